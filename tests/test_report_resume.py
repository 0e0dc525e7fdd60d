"""Resume never reuses a stale result: code, notebook and upstream changes all force a rerun.

These tests run no notebook: they write the markers a finished run would write and ask the
planner what it would reuse, against a copy of the package whose files they edit.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from ddlstudy.config.params import load_params
from ddlstudy.experiments import grid
from ddlstudy.records import resume
from ddlstudy.report import runner as report
from ddlstudy.train.trainer import TrainConfig


@pytest.fixture
def finished_run(tmp_path: Path, repo_root: Path, monkeypatch: pytest.MonkeyPatch):
    """A run folder whose every job looks finished under a private copy of code and notebooks."""
    pkg = tmp_path / "pkg"
    shutil.copytree(resume.PACKAGE, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    nbs = tmp_path / "notebooks"
    shutil.copytree(report.NOTEBOOKS, nbs)
    monkeypatch.setattr(resume, "PACKAGE", pkg)
    monkeypatch.setattr(report, "NOTEBOOKS", nbs)
    files = [str(repo_root / "params/default.yaml"), str(repo_root / "params/ci.yaml")]
    params = load_params(*files)
    run = tmp_path / "run"
    run.mkdir()
    jobs = report.plan(params, run, files)
    for job in jobs:  # in run order, as run_report would: 99 last, stamping what it read
        _finished_outputs(run, job)
        resume.write_json_atomic(report.marker_path(run, job), {
            "digest": job.digest(params, report.upstream(job, jobs, run)), "finished": 1.0})
    return params, run, jobs, pkg, nbs


def _finished_outputs(run: Path, job) -> None:
    """What a finished chapter leaves: a non-empty executed notebook and its declared tables."""
    from ddlstudy.chapters.registry import get_chapter

    (run / f"{job.name}.ipynb").write_text('{"cells": [{"cell_type": "code", "source": ""}]}')
    folder = run / job.name
    folder.mkdir(exist_ok=True)
    for table, columns in get_chapter(job.chapter).tables.items():
        pd.DataFrame({c: [1] for c in (columns or ("x",))}).to_csv(folder / f"{table}.csv",
                                                                  index=False)


def _done(params, run, jobs) -> dict[str, bool]:
    return {job.name: report.is_done(job, run, params, jobs) for job in jobs}


def test_unchanged_run_is_reused(finished_run) -> None:
    params, run, jobs, _, _ = finished_run
    assert all(_done(params, run, jobs).values())


def test_a_code_change_in_lib_reruns_every_chapter(finished_run) -> None:
    params, run, jobs, pkg, _ = finished_run
    with (pkg / "plots.py").open("a") as f:  # uncommitted edit: content, not git sha, counts
        f.write("\n# an edit\n")
    assert not any(_done(params, run, jobs).values())


def test_a_notebook_change_reruns_that_chapter_only(finished_run) -> None:
    params, run, jobs, _, nbs = finished_run
    with (nbs / "02_collectives.ipynb").open("a") as f:
        f.write(" ")
    done = _done(params, run, jobs)
    assert not done["02_collectives"] and done["00_background"]


def test_conclusions_rerun_when_a_chapter_they_read_reran(finished_run) -> None:
    params, run, jobs, _, _ = finished_run
    first = next(j for j in jobs if j.chapter == "00_background")
    resume.write_json_atomic(report.marker_path(run, first), {
        "digest": first.digest(params), "finished": 2.0})
    done = _done(params, run, jobs)
    assert done["00_background"] and not done["99_conclusions"]


def test_a_deleted_or_damaged_output_means_not_done(finished_run) -> None:
    """Resume checks what a chapter left, not only its marker (issue 23)."""
    params, run, jobs, _, _ = finished_run
    (run / "00_background" / "worked_costs.csv").unlink()  # a deleted table
    (run / "01_cluster_setup" / "p2p.csv").write_text("")  # an empty one
    (run / "02_collectives.ipynb").write_text("")  # a 0-byte executed notebook
    j03 = next(j for j in jobs if j.chapter == "03_ps_vs_ring")
    pd.DataFrame({"model": [1]}).to_csv(run / j03.name / "summary.csv", index=False)  # columns
    done = _done(params, run, jobs)
    assert not any(done[n] for n in ("00_background", "01_cluster_setup", "02_collectives",
                                     j03.name))
    assert sum(done.values()) == len(jobs) - 4
    why = report.why_not_done(jobs[0], run, params, jobs)
    assert "worked_costs.csv" in why


def test_the_environment_is_in_the_digest(finished_run, monkeypatch: pytest.MonkeyPatch,
                                          tmp_path: Path) -> None:
    """Reference records, the netem calibration, root / namespaces and package versions."""
    params, run, jobs, _, _ = finished_run
    base = report.environment(params)
    for key, value in [("reference", "other"), ("calibration", "other"),
                       ("root", not base["root"]), ("namespaces", not base["namespaces"]),
                       ("versions", {**base["versions"], "torch": "0.0"})]:
        monkeypatch.setattr(report, "environment",
                            lambda p, run_dir=None, k=key, v=value: {**base, k: v})
        assert not any(_done(params, run, jobs).values()), key
    monkeypatch.undo()
    ref = tmp_path / "ref"
    (ref / "x").mkdir(parents=True)
    (ref / "x" / "summary.csv").write_text("a\n1\n")
    from ddlstudy.records import reference

    monkeypatch.setattr(reference, "reference_dir", lambda: ref)
    first = report.environment(params)["reference"]
    (ref / "x" / "summary.csv").write_text("a\n2\n")
    assert report.environment(params)["reference"] != first
    # a `reference` run writes into results/reference itself: its own records are not inputs
    own = report.environment(params, ref)["reference"]
    (ref / "x" / "summary.csv").write_text("a\n3\n")
    assert report.environment(params, ref)["reference"] == own


def test_an_unknown_kernel_is_refused_before_anything(tmp_path: Path, repo_root: Path) -> None:
    from ddlstudy.config.params import ParamsError

    bad = tmp_path / "k.yaml"
    bad.write_text("report:\n  kernel: no-such-kernel\n")
    out = tmp_path / "run"
    with pytest.raises(ParamsError, match="no Jupyter kernel named 'no-such-kernel'"):
        report.run_report([str(repo_root / "params/default.yaml"),
                           str(repo_root / "params/ci.yaml"), str(bad)], str(out))
    assert not out.exists()


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", ""])
def test_corrupt_marker_means_not_done(finished_run, content: str) -> None:
    params, run, jobs, _, _ = finished_run
    report.marker_path(run, jobs[0]).write_text(content)
    assert not report.is_done(jobs[0], run, params, jobs)


def test_atomic_marker_leaves_no_temp_files(tmp_path: Path) -> None:
    path = resume.write_json_atomic(tmp_path / "x.done.json", {"digest": "abc"})
    assert resume.read_marker(path) == {"digest": "abc"}
    assert [p.name for p in tmp_path.iterdir()] == ["x.done.json"]
    resume.clear_marker(path)
    assert resume.read_marker(path) is None


def test_grid_cell_reused_only_under_the_same_code(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from ddlstudy.records import store as records

    config = TrainConfig(model="mlp", strategy="allreduce", workers=2).validate()
    folder = grid.cell_dir(tmp_path, config)
    records.write_table(pd.DataFrame([{"images_per_sec": 1.0}]), folder, "summary")
    records.write_meta(folder, config.to_dict(), status="ok")
    assert grid._finished(folder, config) is not None
    monkeypatch.setattr(resume, "code_digest", lambda package=None: "changed")
    assert grid._finished(folder, config) is None


def test_reference_cell_survives_a_new_config_field_at_its_default(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """make reference (DDLSTUDY_RESUME_ANY_CODE=1) keeps a cell written before TrainConfig
    gained a field when that field is at its default now; a non-default value reruns it."""
    import json
    from dataclasses import replace

    from ddlstudy.records import store as records

    config = TrainConfig(model="mlp", strategy="allreduce", workers=2).validate()
    folder = grid.cell_dir(tmp_path, config)
    old = config.to_dict()
    old.pop("lr_scaling")  # as written by code that had no such field
    records.write_table(pd.DataFrame([{"images_per_sec": 1.0}]), folder, "summary")
    records.write_meta(folder, old, status="ok")
    assert json.loads((folder / "meta.json").read_text())["params"].get("lr_scaling") is None
    assert grid._finished(folder, config) is None  # same code only: exact params
    monkeypatch.setenv("DDLSTUDY_RESUME_ANY_CODE", "1")
    assert grid._finished(folder, config) is not None
    assert grid._finished(folder, replace(config, lr_scaling="linear")) is None
    assert grid._finished(folder, replace(config, workers=3)) is None


def test_repeats_interleave_with_rotated_order() -> None:
    order = grid.interleaved(["a", "b", "c"], 3)
    assert [x for _, x in order] == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert [r for r, _ in order] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    positions = {x: [i % 3 for i, (_, y) in enumerate(order) if y == x] for x in "abc"}
    assert all(sorted(p) == [0, 1, 2] for p in positions.values())  # each arm in each slot once


def _report(tree: Path, run: Path) -> tuple[str, dict[str, float]]:
    """The real report runner on a copied tree (its lib first on the path): output and each
    chapter marker's `finished` stamp."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(tree / "lib")}
    files = [tree / "params" / n for n in ("default.yaml", "ci.yaml", "tiny.yaml")]
    proc = subprocess.run([sys.executable, "-m", "ddlstudy.report",
                           *[a for f in files for a in ("--params", str(f))], "--out", str(run)],
                          cwd=tree, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    stamps = {p.name: json.loads(p.read_text())["finished"] for p in run.glob("*.done.json")}
    return proc.stdout + proc.stderr, stamps


@pytest.mark.slow
def test_a_lib_change_reruns_every_chapter_of_a_real_report(tmp_path: Path,
                                                            repo_root: Path) -> None:
    """Two chapters through `python -m ddlstudy.report`, on a copy of lib/ and notebooks/: rerun
    unchanged, every chapter is reused; after a real edit of one lib file, every chapter runs."""
    tree = tmp_path / "tree"
    for part in ("lib", "notebooks", "params"):
        shutil.copytree(repo_root / part, tree / part,
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copy(repo_root / "pyproject.toml", tree)
    (tree / "params" / "tiny.yaml").write_text(
        "report:\n  chapters: [00_background, 99_conclusions]\n")
    run = tmp_path / "run"
    out, first = _report(tree, run)
    assert set(first) == {"00_background.done.json", "99_conclusions.done.json"}, out
    out, again = _report(tree, run)
    assert again == first and out.count(": reused") == 2, out
    with (tree / "lib" / "ddlstudy" / "stats.py").open("a") as f:  # an uncommitted edit
        f.write("\n# an edit\n")
    out, after = _report(tree, run)
    assert set(after) == set(first) and all(after[k] > first[k] for k in first), out
    assert out.count(": ran in") == 2 and ": reused" not in out, out


@pytest.mark.slow
def test_report_reruns_a_chapter_whose_table_was_deleted(
        tmp_path: Path, repo_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real report (00_background, the cheapest chapter, params/ci.yaml layered): rerun
    unchanged it is reused; after one of its declared tables is deleted, it runs again. The
    code digest reads a private copy of lib/ddlstudy: others editing the checkout meanwhile
    must not make the unchanged rerun run again."""
    pkg = tmp_path / "pkg"
    shutil.copytree(resume.PACKAGE, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(resume, "PACKAGE", pkg)
    tiny = tmp_path / "tiny.yaml"
    tiny.write_text("report:\n  chapters: [00_background]\n")
    files = [str(repo_root / "params/default.yaml"), str(repo_root / "params/ci.yaml"),
             str(tiny)]
    run = tmp_path / "run"
    first = report.run_report(files, str(run))
    assert first.ran == ["00_background"] and not first.failed, first
    again = report.run_report(files, str(run))
    assert again.reused == ["00_background"] and again.ran == []
    (run / "00_background" / "worked_costs.csv").unlink()
    after = report.run_report(files, str(run))
    assert after.ran == ["00_background"] and after.reused == [] and not after.failed
    assert (run / "00_background" / "worked_costs.csv").is_file()
    assert not list(run.rglob("*.tmp")) and not (run / ".ddlstudy.lock").exists()
