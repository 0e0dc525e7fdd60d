"""Malik 2018's batch-size claims on synthetic chapter 09 malik.csv (emulated sweep, timed
chunks of independent runs): the run, not the chunk, is the unit; agrees, differs,
inconclusive, too few runs, missing input; a committed malik.csv keeps each run's provenance."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from ddlstudy.claims import engine, malik2018

CH = malik2018.CH09
FOLDERS = {CH: [CH]}
CLAIM = {c.id: c for c in malik2018.CLAIMS}
NOISE = [1.0, 1.02, 0.98, 1.01, 0.99, 1.005]
WIDE = [0.5, 1.8, 0.7, 1.5, 1.0, 0.6]


def _malik(folder: Path, model: str, ratio: float, spread: list[float],
           chunks: int = 2) -> Path:
    """malik.csv: batch 64 and 512 per run (`repeat`), `chunks` timed chunks each."""
    rows = []
    for rep, f in enumerate(spread):
        for bs, rate in ((64, 100.0), (512, 100.0 * ratio * f)):
            for c in range(chunks):  # chunks inside a run agree closely: they are not runs
                rows.append({"model": model, "batch_size": bs, "workers": 2, "repeat": rep,
                             "seed": rep, "chunk": c, "network": "10GbE", "cpu_bound": False,
                             "images_per_sec_cluster": rate * (1 + 0.001 * c),
                             "run_host": "vm", "run_created": "2026-11-26T07:00:00+00:00",
                             "run_git_sha": "abcdef0123", "load_1min": 3.0})
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(folder / "malik.csv", index=False)
    return folder


@pytest.mark.parametrize(("claim_id", "model", "ratio", "spread", "verdict"), [
    ("malik_larger_batch_alexnet", "alexnet", 1.8, NOISE, engine.AGREES),
    ("malik_larger_batch_alexnet", "alexnet", 0.7, NOISE, engine.DIFFERS),
    ("malik_larger_batch_alexnet", "alexnet", 1.0, WIDE, engine.INCONCLUSIVE),
    ("malik_same_batch_resnet50", "resnet50", 1.0, NOISE, engine.AGREES),
    ("malik_same_batch_resnet50", "resnet50", 1.6, NOISE, engine.DIFFERS),
    ("malik_same_batch_googlenet", "googlenet", 1.0, WIDE, engine.INCONCLUSIVE),
])
def test_batch_verdicts_follow_the_runs(tmp_path: Path, claim_id: str, model: str, ratio: float,
                                        spread: list[float], verdict: str) -> None:
    _malik(tmp_path / CH, model, ratio, spread)
    row = engine.evaluate(CLAIM[claim_id], tmp_path, FOLDERS)[0]
    assert row["verdict"] == verdict, row["reason"]
    assert row["runs"] == len(spread)  # runs, not the 2 x 6 chunks
    assert "batch 512 / at batch 64, 2 workers, 10GbE-like links" in row["quantity"]
    assert "scaled linearly" in row["source"]
    assert "not the paper's InfiniBand EDR" in row["reason"]  # 10GbE rows say so


def test_one_run_per_cell_is_too_few(tmp_path: Path) -> None:
    _malik(tmp_path / CH, "alexnet", 1.8, NOISE[:1], chunks=6)
    row = engine.evaluate(CLAIM["malik_larger_batch_alexnet"], tmp_path, FOLDERS)[0]
    assert row["reason"].startswith("inconclusive: 1 runs (needs 5)"), row["reason"]


def test_missing_model_is_not_measured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ddlstudy.records import reference

    monkeypatch.setattr(reference, "reference_dir", lambda: tmp_path / "no-reference")
    _malik(tmp_path / CH, "alexnet", 1.8, NOISE)
    row = engine.evaluate(CLAIM["malik_same_batch_googlenet"], tmp_path, FOLDERS)[0]
    assert row["verdict"] == engine.NOT_MEASURED and "googlenet" in row["reason"]


def test_reference_malik_keeps_each_runs_provenance(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A malik.csv merged into results/reference later than the chapter's meta.json is labelled
    with its own runs' sha and date, not the chapter's."""
    from ddlstudy.records import reference

    ref = tmp_path / "reference"
    _malik(ref / CH, "alexnet", 1.8, NOISE)
    (ref / CH / "meta.json").write_text(json.dumps({"created": "2026-11-20T00:00:00+00:00",
                                                    "git_sha": "0f76af6aaaa", "status": "ok",
                                                    "host": {"hostname": "vm"}}))
    monkeypatch.setattr(reference, "reference_dir", lambda: ref)
    row = engine.evaluate(CLAIM["malik_larger_batch_alexnet"], tmp_path / "run", {})[0]
    assert row["verdict"] == engine.AGREES, row["reason"]
    assert row["source"].startswith("reference run: vm, 2026-11-26, git abcdef0"), row["source"]
