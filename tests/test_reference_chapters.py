"""Chapters 08-10 in the committed reference: a chapter the reference lacks is added with its
own tables (computed from all its runs) and meta.json, and a run that did not run the chapter
reads the claims' tables from it, labelled as the reference run's."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ddlstudy.records import reference


def _run(folder: Path, value: float) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame([{"model": "mlp", "strategy": "allreduce", "workers": 4,
                   "test_accuracy": value}]).to_csv(folder / "summary.csv", index=False)
    (folder / "meta.json").write_text(json.dumps({"status": "ok", "created": f"t{value}",
                                                  "git_sha": "abc", "params": {}}))


def _chapter(src: Path, seeds: int = 5) -> None:
    """A chapter 08 sitting as the chapter writes it: its own bracketing table (from all its
    runs), its meta.json, and one run folder per (algorithm, seed) with a checkpoint beside."""
    rows = []
    for seed in range(seeds):
        for alg, acc in (("ring", 0.91), ("tree", 0.9101)):
            run = src / "runs" / "bracketing" / "mnist" / f"seed{seed}-b32" / f"allreduce-{alg}"
            _run(run, acc)
            (run / "ckpt-10.pt").write_bytes(b"\0")
            rows.append({"algorithm": alg, "seed": seed, "test_accuracy": acc + seed * 1e-4,
                         "folder": str(run)})
    pd.DataFrame(rows).to_csv(src / "bracketing.csv", index=False)
    (src / "meta.json").write_text(json.dumps({"created": "2026-11-26T03:00:00+00:00",
                                               "git_sha": "abc1234", "host": {"hostname": "vm"},
                                               "chapter": "08_convergence"}))


def test_a_new_chapter_comes_with_its_tables_and_meta(tmp_path: Path) -> None:
    """Chapters 08-10 compute their tables from all their runs: a chapter the reference lacks
    gets them, paths made relative, and no checkpoint is copied."""
    src, dest = tmp_path / "scratch" / "08_convergence", tmp_path / "ref" / "08_convergence"
    _chapter(src)
    (tmp_path / "ref").mkdir()
    assert reference.main(["add-runs", str(src), str(dest)]) == 0
    table = reference.load_table("08_convergence", "bracketing", root=tmp_path / "ref")
    assert len(table) == 10 and set(table["ref_git_sha"]) == {"abc1234"}
    assert not table["folder"].str.startswith("/").any()
    assert (dest / table["folder"].iloc[0] / "summary.csv").exists()
    assert not list(dest.rglob("*.pt"))
    assert reference.load_table("08_convergence", "nope", root=tmp_path / "ref").empty


def test_a_run_without_chapter_08_reads_it_from_the_reference(tmp_path: Path,
                                                              monkeypatch) -> None:
    """Fourie 2019's bracketing claim on a run that did not run chapter 08: decided from the
    committed reference's chapter table (5 seeds), labelled as the reference run's; with no
    reference it is 'not measured' and says what is missing."""
    from ddlstudy.claims import engine

    ref = tmp_path / "ref"
    _chapter(ref / "08_convergence")
    monkeypatch.setattr(reference, "reference_dir", lambda: ref)
    claim = [c for c in engine.all_claims() if c.id == "fourie_ring_accuracy_7_10pct_lower"]
    (row,) = engine.claims_table(tmp_path / "run", {}, claim).to_dict("records")
    assert row["verdict"] == "differs" and row["runs"] == 5, row["reason"]
    assert row["source"].startswith("reference run: vm, 2026-11-26")
    monkeypatch.setattr(reference, "reference_dir", lambda: tmp_path / "none")
    (row,) = engine.claims_table(tmp_path / "run", {}, claim).to_dict("records")
    assert row["verdict"] == "not measured" and "bracketing" in row["reason"]


def test_chapter_08_tables_survive_their_figures(tmp_path: Path) -> None:
    """bracketing.csv keeps one row per run (what Fourie 2019's claim reads) and staleness.csv
    one row per run and staleness value after their figures are saved beside them (a figure's
    data used to overwrite the table of the same name with its per-algorithm medians)."""
    from types import SimpleNamespace

    from ddlstudy.chapters import ch08_convergence as ch08

    final = pd.DataFrame([{"section": "bracketing", "algorithm": alg, "seed": s,
                           "test_accuracy": 0.9, "test_loss": 0.3, "epoch": 1.0,
                           "dataset": "mnist", "dtype": "float32", "workers": 4,
                           "batch_size": 32, "lr": 0.5}
                          for alg in ("ring", "tree") for s in range(5)])
    C = SimpleNamespace(bracketing_dataset="mnist", bracketing_workers=4, bracketing_epochs=1,
                        seeds=list(range(5)), async_model="mlp")
    S = SimpleNamespace(C=C, final=final, out=tmp_path, async_ds="mnist")
    ch08.bracketing(S)
    table = pd.read_csv(tmp_path / "bracketing.csv")
    assert len(table) == 10 and {"seed", "algorithm", "test_accuracy"} <= set(table)
    assert (tmp_path / "bracketing_accuracy.png").exists()
