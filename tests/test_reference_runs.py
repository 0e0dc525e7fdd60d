"""Adding another sitting's runs to a reference chapter: runs keep their numbers, new ones
follow, failed runs are left out, and the chapter's summary lists every run once."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ddlstudy.records import reference


def _run(folder: Path, value: float, status: str = "ok", batch: int = 32) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame([{"model": "resnet50", "strategy": "ps_sync", "workers": 2,
                   "images_per_sec_cluster": value}]).to_csv(folder / "summary.csv", index=False)
    (folder / "meta.json").write_text(json.dumps({"status": status, "created": f"t{value}",
                                                  "git_sha": "abc",
                                                  "params": {"batch_size": batch}}))


def test_add_runs_appends_after_the_existing_runs(tmp_path: Path) -> None:
    dest, src = tmp_path / "dest" / "ch", tmp_path / "src" / "ch"
    cell = "ps_sync-1srv_resnet50_x2_replay"
    _run(dest / "runs" / cell, 100.0)                 # the older sitting's run 0
    _run(src / "runs" / cell, 101.0)                  # the new sitting: runs 0-2, run 2 failed
    _run(src / "runs" / cell / "r1", 102.0)
    _run(src / "runs" / cell / "r2", 999.0, status="failed")
    assert reference.add_runs(src, dest) == {cell: 2}
    runs = reference.cell_runs(dest / "runs" / cell)
    assert [p.name for p in runs] == [cell, "r1", "r2"]
    summary = pd.read_csv(dest / "summary.csv")
    assert summary["repeat"].tolist() == [0, 1, 2]
    assert summary["images_per_sec_cluster"].tolist() == [100.0, 101.0, 102.0]
    assert 999.0 not in summary["images_per_sec_cluster"].tolist()


def test_add_runs_cli_refuses_a_missing_folder(tmp_path: Path, capsys) -> None:
    assert reference.main(["add-runs", str(tmp_path / "nope"), str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a folder" in err


def test_add_runs_refuses_another_configuration(tmp_path: Path) -> None:
    dest, src = tmp_path / "dest" / "ch", tmp_path / "src" / "ch"
    cell = "horovod_resnet50_x2_replay"
    _run(dest / "runs" / cell, 100.0, batch=32)
    _run(src / "runs" / cell, 30.0, batch=128)
    try:
        reference.add_runs(src, dest)
    except ValueError as err:
        assert "batch_size: 32 -> 128" in str(err)
    else:
        raise AssertionError("runs of batch 128 were pooled with batch 32")
    assert reference.cell_runs(dest / "runs" / cell) == [dest / "runs" / cell]


def test_add_runs_skips_runs_it_already_has(tmp_path: Path) -> None:
    dest, src = tmp_path / "dest" / "ch", tmp_path / "src" / "ch"
    cell = "ps_sync-1srv_resnet50_x3_replay"
    _run(dest / "runs" / cell, 100.0)
    import shutil

    shutil.copytree(dest / "runs", src / "runs")  # the scratch copy still holds the old run
    assert reference.add_runs(src, dest) == {}
    assert reference.cell_runs(dest / "runs" / cell) == [dest / "runs" / cell]


def test_a_cell_stored_by_another_checkout_is_the_same_cell() -> None:
    """The data folder's location is not what a cell ran (another clone or node must reuse it);
    any other field is."""
    from dataclasses import replace

    from ddlstudy.experiments import grid
    from ddlstudy.train.trainer import TrainConfig

    config = TrainConfig(model="mlp", dataset="synthetic", workers=2)
    stored = grid._jsonable(config.to_dict())
    assert grid._same_config({**stored, "data_root": "/elsewhere/data"}, config, any_code=False)
    other = grid._jsonable(replace(config, workers=3).to_dict())
    assert not grid._same_config(other, config, any_code=False)


def test_nested_cells_keep_their_folders_and_count_as_runs(tmp_path: Path) -> None:
    """Chapter 07 groups cells by profile (runs/<profile>/<cell>): runs are added under the same
    path, no chapter summary is invented, and reference.load numbers every run."""
    dest, src = tmp_path / "ref" / "07_frameworks", tmp_path / "src" / "07_frameworks"
    cell = Path("IB-EDR") / "horovod_resnet50_x2_replay"
    _run(dest / "runs" / cell, 100.0)
    _run(src / "runs" / cell, 101.0)
    _run(src / "runs" / cell / "r1", 102.0)
    assert reference.add_runs(src, dest) == {str(cell): 2}
    assert not (dest / "summary.csv").exists()  # none before: none invented
    cells = reference.load("07_frameworks", root=tmp_path / "ref")
    assert sorted(cells["repeat"]) == [0, 1, 2]
    assert sorted(cells["images_per_sec_cluster"]) == [100.0, 101.0, 102.0]



def test_appended_runs_take_the_cells_constants_but_not_another_runs_speedup(tmp_path: Path):
    """Chapter 05 keeps cells per profile and a summary with columns its cells lack: a new run's
    row copies the cell's constants (profile, conditions) and leaves the per-run derived ones
    (speed-up, efficiency) empty instead of copying run 0's."""
    dest, src = tmp_path / "ref" / "05_network_profiles", tmp_path / "src" / "05_network_profiles"
    cell = Path("10GbE") / "allreduce_resnet50_x2_replay"
    _run(dest / "runs" / cell, 100.0)
    pd.DataFrame([{"model": "resnet50", "strategy": "ps_sync", "workers": 2,
                   "images_per_sec_cluster": 100.0, "profile": "10GbE", "conditions": "c",
                   "speedup": 1.7, "efficiency": 0.85, "repeat": 0}]).to_csv(
        dest / "summary.csv", index=False)
    _run(src / "runs" / cell, 120.0)
    assert reference.add_runs(src, dest) == {str(cell): 1}
    table = pd.read_csv(dest / "summary.csv")
    new = table[table["repeat"] == 1].iloc[0]
    assert new["images_per_sec_cluster"] == 120.0
    assert new["profile"] == "10GbE" and new["conditions"] == "c"
    assert pd.isna(new["speedup"]) and pd.isna(new["efficiency"])

def _meta(folder: Path, network: dict | None, params: dict | None = None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame([{"model": "resnet50", "strategy": "ps_sync", "workers": 2,
                   "images_per_sec_cluster": 1.0}]).to_csv(folder / "summary.csv", index=False)
    from ddlstudy.records import resume

    (folder / "meta.json").write_text(json.dumps({
        "status": "ok", "created": str(folder), "git_sha": "abc",
        "code_digest": resume.code_digest(),
        "params": params or {"batch_size": 32}, "network": network}))


def test_cell_identity_reads_old_records_as_the_defaults_they_ran_with(tmp_path: Path) -> None:
    """Records written before testbed / gpus_per_node / latency were recorded read as no
    testbed, one engine per node, no latency; a run on a testbed is another cell."""
    old, new = tmp_path / "old", tmp_path / "new"
    _meta(old, {"profile": "10GbE", "scale": 0.01, "latency_emulated": False})
    _meta(new, {"profile": "10GbE", "scale": 0.01, "testbed": "shi2019", "gpus_per_node": 1,
                "latency_emulated_s": 0.0})
    assert reference.cell_identity(json.loads((old / "meta.json").read_text())) == {
        "testbed": reference.DEFAULT_TESTBED, "network": "10GbE", "gpus_per_node": 1,
        "latency_emulated_s": 0.0}
    assert reference.same_cell(old, new) == "testbed: 'none' -> 'shi2019'"
    _meta(new, {"profile": "10GbE", "gpus_per_node": 4, "latency_emulated_s": 0.0018})
    assert reference.same_cell(old, new) == "gpus_per_node: 1 -> 4"
    assert reference.cell_identity(None)["network"] == "none"


def test_committed_reference_cells_read_as_the_study_testbed() -> None:
    """Every committed chapter 03 emulated cell of the study's own settings loads with
    testbed 'none', one GPU per node and no latency (what it ran with)."""
    cells = reference.load("03_ps_vs_ring-emulated-resnet50")
    assert len(cells) >= 12
    assert set(cells["testbed"]) == {reference.DEFAULT_TESTBED}
    assert set(cells["gpus_per_node"]) == {1}
    assert set(cells["latency_emulated_s"].astype(float)) == {0.0}


def test_grid_does_not_reuse_a_cell_of_another_testbed(tmp_path: Path) -> None:
    """grid._finished reuses a stored cell only on the same testbed / network / GPUs per node /
    latency; an old cell without them counts as the defaults."""
    from ddlstudy.experiments import grid
    from ddlstudy.train.trainer import TrainConfig

    config = TrainConfig(model="mlp", dataset="synthetic", workers=2)
    folder = tmp_path / "cell"
    _meta(folder, {"profile": "10GbE", "scale": 0.01}, grid._jsonable(config.to_dict()))
    same = {"testbed": "none", "network": "10GbE", "gpus_per_node": 1, "latency_emulated_s": 0.0}
    done = grid._finished(folder, config, same)
    assert done is not None and done["testbed"].tolist() == ["none"]
    for key, other in (("testbed", "shi2019"), ("network", "1GbE"), ("gpus_per_node", 8),
                       ("latency_emulated_s", 0.00072)):
        assert grid._finished(folder, config, {**same, key: other}) is None, key


def test_add_runs_refuses_runs_of_another_testbed(tmp_path: Path) -> None:
    dest, src = tmp_path / "dest" / "ch", tmp_path / "src" / "ch"
    cell = "ps_sync-1srv_resnet50_x2_replay"
    _meta(dest / "runs" / cell, {"profile": "10GbE"})
    _meta(src / "runs" / cell, {"profile": "shi2019", "testbed": "shi2019"})
    try:
        reference.add_runs(src, dest)
    except ValueError as err:
        assert "testbed: 'none' -> 'shi2019'" in str(err)
    else:
        raise AssertionError("runs of testbed shi2019 were pooled with the study's own")


def _dirty_run(folder: Path, value: float, sha: str, digest: str) -> None:
    _run(folder, value)
    meta = json.loads((folder / "meta.json").read_text())
    (folder / "meta.json").write_text(json.dumps({**meta, "git_sha": f"{sha}+dirty",
                                                  "code_digest": digest}))


def test_runs_of_uncommitted_code_are_left_out_and_said(tmp_path: Path) -> None:
    """A run from a tree with uncommitted changes is not reference material: `load` leaves it
    out and the label says how many; once `code_commit` names the commit that holds its code
    it counts, under that commit's sha."""
    cell = tmp_path / "ch" / "runs" / "ps_sync-1srv_resnet50_x2_replay"
    _run(cell, 100.0)
    _dirty_run(cell / "r1", 101.0, "d" * 40, "x")
    cells = reference.load("ch", root=tmp_path)
    assert cells["images_per_sec_cluster"].tolist() == [100.0]
    assert "1 run(s) of uncommitted code left out" in reference.label(cells)
    assert len(reference.load("ch", root=tmp_path, uncommitted=True)) == 2
    meta = json.loads((cell / "r1" / "meta.json").read_text())
    (cell / "r1" / "meta.json").write_text(json.dumps({**meta, "code_commit": "c" * 40}))
    cells = reference.load("ch", root=tmp_path)
    assert sorted(cells["ref_git_sha"]) == ["abc", "c" * 40]
    assert "left out" not in reference.label(cells)
    assert reference.rebuild_summary(tmp_path / "ch")["repeat"].tolist() == [0, 1]


def test_certify_finds_the_commit_that_holds_a_dirty_runs_code(tmp_path: Path) -> None:
    """A real git repository: commit A, a run measured with A's tree plus an edit (+dirty), the
    edit committed as B; certify names B for that run and nothing for a run whose code no
    commit holds."""
    import subprocess

    from ddlstudy.records.resume import code_digest

    repo = tmp_path / "repo"
    pkg = repo / "lib" / "ddlstudy"
    pkg.mkdir(parents=True)

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                              check=True).stdout.strip()

    git("init", "-q")
    git("config", "user.email", "t@t")
    git("config", "user.name", "t")
    (pkg / "m.py").write_text("x = 1\n")
    git("add", "-A")
    git("commit", "-qm", "A")
    a = git("rev-parse", "HEAD")
    (pkg / "m.py").write_text("x = 2\n")          # the run's uncommitted edit
    edited = code_digest(pkg)
    git("commit", "-qam", "B")
    b = git("rev-parse", "HEAD")
    root = tmp_path / "ref"
    _dirty_run(root / "ch" / "runs" / "c1", 1.0, a, edited)
    _dirty_run(root / "ch" / "runs" / "c2", 2.0, a, "no-such-code")
    found = reference.certify(root, repo=repo)
    assert found == {str(root / "ch" / "runs" / "c1"): b, str(root / "ch" / "runs" / "c2"): None}
    assert json.loads((root / "ch" / "runs" / "c1" / "meta.json").read_text())["code_commit"] == b
    assert reference.code_version(json.loads(
        (root / "ch" / "runs" / "c2" / "meta.json").read_text())) == (f"{a}+dirty", False)


def test_a_later_sitting_adds_the_tables_a_chapter_lacks_stamped(tmp_path: Path) -> None:
    """Chapter 11: the accuracy runs are in the reference (meta.json, accuracy.csv); a later
    sitting's comparison.csv joins them with its own host, date and code on every row
    (load_table keeps them), and the chapter's own accuracy.csv is not overwritten."""
    dest, src = tmp_path / "ref" / "11_beyond", tmp_path / "src" / "11_beyond"
    for folder, host, created in ((dest, "old", "2026-11-25"), (src, "new", "2026-11-26")):
        folder.mkdir(parents=True)
        (folder / "meta.json").write_text(json.dumps({
            "status": "ok", "created": created, "git_sha": f"{host}sha",
            "host": {"hostname": host}}))
        pd.DataFrame({"strategy": ["ddp"], "acc": [0.9 if host == "old" else 0.1]}).to_csv(
            folder / "accuracy.csv", index=False)
    pd.DataFrame({"strategy": ["zero1", "zero3"], "bytes": [1.0, 1.5],
                  "folder": [str(src / "runs" / "a"), str(src / "runs" / "b")]}).to_csv(
        src / "comparison.csv", index=False)
    _run(src / "runs" / "zero1_resnet18_x4_replay", 10.0)
    reference.add_runs(src, dest)  # runs only, by default
    assert not (dest / "comparison.csv").exists()
    assert reference.main(["add-runs", str(src), str(dest), "--tables"]) == 0
    assert pd.read_csv(dest / "accuracy.csv")["acc"].tolist() == [0.9]
    table = reference.load_table("11_beyond", "comparison", root=tmp_path / "ref")
    assert table["ref_host"].tolist() == ["new", "new"]
    assert table["ref_created"].tolist() == ["2026-11-26"] * 2
    assert table["folder"].tolist() == ["runs/a", "runs/b"]
    assert reference.load_table("11_beyond", "accuracy", root=tmp_path / "ref")[
        "ref_host"].tolist() == ["old"]


def test_a_chapter_table_names_the_commit_certify_found(tmp_path: Path) -> None:
    """load_table gives a chapter table the sha `code_version` gives its meta: the certified
    commit for a +dirty sitting, not the dirty sha."""
    ch = tmp_path / "08_convergence"
    ch.mkdir()
    (ch / "meta.json").write_text(json.dumps({"status": "ok", "created": "2026-11-26",
                                              "git_sha": "abc1234+dirty",
                                              "code_commit": "def5678"}))
    pd.DataFrame({"x": [1]}).to_csv(ch / "bracketing.csv", index=False)
    table = reference.load_table("08_convergence", "bracketing", root=tmp_path)
    assert table["ref_git_sha"].tolist() == ["def5678"]


def test_add_rows_appends_the_arms_a_table_lacks_stamped(tmp_path: Path, capsys) -> None:
    """A later sitting measured two more strategies on the same seeds: only their rows join,
    stamped; the baseline's rows it measured again stay as they were; their run folders are
    copied; a missing key column is one line and exit 2."""
    src, dest = tmp_path / "new" / "11_beyond", tmp_path / "ref" / "11_beyond"
    for d in (src, dest):
        d.mkdir(parents=True)
    pd.DataFrame({"strategy": ["ddp", "ddp"], "seed": [0, 1], "acc": [0.9, 0.8]}).to_csv(
        dest / "accuracy.csv", index=False)
    pd.DataFrame({"strategy": ["ddp", "ddp_fp16", "ddp", "ddp_fp16"], "seed": [0, 0, 1, 1],
                  "acc": [0.91, 0.7, 0.81, 0.6]}).to_csv(src / "accuracy.csv", index=False)
    (src / "meta.json").write_text(json.dumps({"status": "ok", "created": "2026-11-26T12:23",
                                               "git_sha": "a" * 40, "host": {"hostname": "h"}}))
    for cell in ("ddp_fp16_x2", "ddp_x2"):
        run = src / "accuracy_runs" / "seed0" / cell
        run.mkdir(parents=True)
        (run / "summary.csv").write_text("x\n1\n")
        (run / "steps.csv").write_text("x\n1\n")
        (run / "model.pt").write_text("not copied")
    kept = dest / "accuracy_runs" / "seed0" / "ddp_x2"
    kept.mkdir(parents=True)
    (kept / "summary.csv").write_text("x\n0\n")
    assert reference.add_rows(src, dest, "accuracy", ["strategy", "seed"], "accuracy_runs") == 2
    out = pd.read_csv(dest / "accuracy.csv")
    assert list(out["acc"]) == [0.9, 0.8, 0.7, 0.6]  # the reference's ddp rows unchanged
    assert list(out["run_host"].fillna("")) == ["", "", "h", "h"]
    assert out["run_git_sha"].iloc[-1] == "a" * 40
    copied = dest / "accuracy_runs" / "seed0" / "ddp_fp16_x2"
    assert (copied / "steps.csv").exists() and not (copied / "model.pt").exists()
    # the reference's own run of the baseline gets nothing from the other sitting
    assert [f.name for f in kept.iterdir()] == ["summary.csv"]
    assert reference.add_rows(src, dest, "accuracy", ["strategy", "seed"]) == 0  # idempotent
    assert reference.main(["add-rows", str(src), str(dest), "--table", "accuracy",
                           "--keys", "strategy,nope"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_load_table_gives_unstamped_rows_the_chapters_own_provenance(tmp_path: Path) -> None:
    ch = tmp_path / "11_beyond"
    ch.mkdir()
    (ch / "meta.json").write_text(json.dumps({"status": "ok", "created": "2026-11-25T10:00",
                                              "git_sha": "b" * 40, "host": {"hostname": "a"}}))
    pd.DataFrame({"strategy": ["ddp", "ddp_fp16"], "run_host": [None, "h"],
                  "run_created": [None, "2026-11-26T12:23"],
                  "run_git_sha": [None, "c" * 40]}).to_csv(ch / "accuracy.csv", index=False)
    df = reference.load_table("11_beyond", "accuracy", root=tmp_path)
    assert list(df["ref_host"]) == ["a", "h"]
    assert list(df["ref_created"].str[:10]) == ["2026-11-25", "2026-11-26"]
    assert "2026-11-25 to 2026-11-26" in reference.label(df)
