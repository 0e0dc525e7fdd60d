"""Chapter 09's Malik 2018 sweep without the emulated links: the plan gives every cell
`malik_repeats` independent runs (own seed), interleaved, and malik.csv's rows carry their run's
provenance (host, date, git sha, 1-min load)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ddlstudy.chapters import ch09_batch_size as ch
from ddlstudy.config.params import load_params


def test_malik_plan_interleaves_independent_runs() -> None:
    P = load_params("params/default.yaml", check_data=False)
    S = P.batch_sweep.model_validate({**P.batch_sweep.model_dump(), "malik_repeats": 3,
                                      "malik_models": ["alexnet", "googlenet"],
                                      "malik_batch_sizes": [64, 512]})
    plan = ch.malik_plan(P, S)
    assert len(plan) == 3 * 2 * 2
    cells = [(c.model, c.batch_size) for c in plan]
    assert cells[:4] == cells[4:8] == cells[8:]  # run r of every cell before run r + 1
    assert [c.seed for c in plan] == [P.seed + r for r in range(3) for _ in range(4)]
    assert {c.compute for c in plan} == {"replay"} and {c.shape for c in plan} == {"imagenet"}
    assert len(ch.malik_plan(P, P.batch_sweep)) == len(P.batch_sweep.malik_models) * len(
        P.batch_sweep.malik_batch_sizes)  # default: one run per cell, as before


def test_malik_rows_keep_their_runs_provenance(tmp_path: Path) -> None:
    runs, chunks = [], []
    for seed in (0, 1):
        folder = tmp_path / f"run{seed}"
        folder.mkdir()
        (folder / "meta.json").write_text(json.dumps({
            "created": f"2026-11-26T07:0{seed}:00+00:00", "git_sha": "abc1234",
            "host": {"hostname": "vm", "load_avg": [4.5 + seed, 3.0, 2.0]}}))
        runs.append({"folder": str(folder), "model": "alexnet", "batch_size": 64,
                     "seed": seed})
        chunks += [{"model": "alexnet", "batch_size": 64, "seed": seed, "repeat": seed,
                    "chunk": c, "images_per_sec_cluster": 10.0} for c in (0, 1)]
    out = ch._provenance(pd.DataFrame(chunks), pd.DataFrame(runs))
    assert len(out) == 4
    assert out.groupby("seed")["load_1min"].first().tolist() == [4.5, 5.5]
    assert set(out["run_git_sha"]) == {"abc1234"} and set(out["run_host"]) == {"vm"}
    assert out["run_created"].str.startswith("2026-11-26T07:0").all()
