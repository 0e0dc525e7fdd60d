"""ZeRO's communication-volume claims (Rajbhandari 2020, Sec. 7.2) on synthetic chapter 11
records: agrees, differs, inconclusive, too few runs, missing input, and counted bytes with no
run-to-run spread (an exact count: decided from 5 runs as one, "counted, exact in all N runs")."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from ddlstudy.claims import beyond, engine

CH = beyond.CH11
FOLDERS = {CH: [CH]}
CLAIM = {c.id: c for c in beyond.CLAIMS}


def _records(tmp: Path, ratio: float, spread: list[float], strategy: str = "zero1",
             source: str = "counted") -> Path:
    """comparison.csv with one ring row and one `strategy` row per run (repeat)."""
    ring = 4_000_000.0
    rows = []
    for rep, f in enumerate(spread):
        rows.append({"strategy": "allreduce", "repeat": rep, "workers": 4, "network": "10GbE",
                     "bytes_sent_per_step": ring, "bytes_source": "counted",
                     "images_per_sec": 100.0})
        rows.append({"strategy": strategy, "repeat": rep, "workers": 4, "network": "10GbE",
                     "bytes_sent_per_step": ring * ratio * f, "bytes_source": source,
                     "images_per_sec": 90.0})
    (tmp / CH).mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(tmp / CH / "comparison.csv", index=False)
    return tmp


NOISE = [0.999, 1.001, 1.0, 0.9995, 1.0005, 1.0002, 0.9998]
WIDE = [0.6, 1.6, 0.8, 1.3, 1.0, 0.7, 1.45]


@pytest.mark.parametrize(("claim_id", "strategy", "ratio", "spread", "verdict"), [
    ("zero_stage1_same_volume", "zero1", 1.0, NOISE, engine.AGREES),
    ("zero_stage1_same_volume", "zero1", 1.3, NOISE, engine.DIFFERS),
    ("zero_stage1_same_volume", "zero1", 1.0, WIDE, engine.INCONCLUSIVE),
    ("zero_stage2_same_volume", "zero2", 1.0, NOISE, engine.AGREES),
    ("zero_stage3_1_5x_volume", "zero3", 1.5, NOISE, engine.AGREES),
    ("zero_stage3_1_5x_volume", "zero3", 1.0, NOISE, engine.DIFFERS),
])
def test_verdict_follows_the_runs(tmp_path: Path, claim_id: str, strategy: str, ratio: float,
                                  spread: list[float], verdict: str) -> None:
    run = _records(tmp_path, ratio, spread, strategy)
    rows = engine.evaluate(CLAIM[claim_id], run, FOLDERS)
    assert [r["verdict"] for r in rows] == [verdict], rows[0]["reason"]
    assert rows[0]["runs"] == len(spread) and "4 workers" in rows[0]["quantity"]


def test_too_few_runs_is_inconclusive(tmp_path: Path) -> None:
    run = _records(tmp_path, 1.0, NOISE[:3])
    row = engine.evaluate(CLAIM["zero_stage1_same_volume"], run, FOLDERS)[0]
    assert row["verdict"] == engine.INCONCLUSIVE
    assert row["reason"].startswith("inconclusive: 3 runs (needs 5)")



def test_missing_chapter_or_strategy_says_what_to_run(tmp_path: Path, no_reference: Path
                                                      ) -> None:
    row = engine.evaluate(CLAIM["zero_stage3_1_5x_volume"], tmp_path, {})[0]
    assert row["verdict"] == engine.NOT_MEASURED and "11_beyond" in row["reason"]
    run = _records(tmp_path, 1.0, NOISE, "zero1")  # no zero3 rows
    row = engine.evaluate(CLAIM["zero_stage3_1_5x_volume"], run, FOLDERS)[0]
    assert row["verdict"] == engine.NOT_MEASURED and "zero3" in row["reason"]


def test_analytic_bytes_are_not_used(tmp_path: Path) -> None:
    """torch's own bytes (analytic, from bucket sizes) never stand in for counted ones."""
    run = _records(tmp_path, 1.0, NOISE, "zero1", source="analytic")
    row = engine.evaluate(CLAIM["zero_stage1_same_volume"], run, FOLDERS)[0]
    assert row["verdict"] == engine.NOT_MEASURED


@pytest.mark.parametrize(("claim_id", "strategy", "ratio", "verdict", "where"), [
    ("zero_stage1_same_volume", "zero1", 1.0, engine.AGREES, "inside the margins [0.98, 1.02]"),
    ("zero_stage1_same_volume", "zero1", 1.25, engine.DIFFERS, "outside the margins [0.98, 1.02]"),
    ("zero_stage3_1_5x_volume", "zero3", 1.5, engine.AGREES, "inside the margins [1.35, 1.65]"),
    ("zero_stage3_1_5x_volume", "zero3", 2.0, engine.DIFFERS, "outside the margins [1.35, 1.65]"),
])
def test_counted_bytes_without_spread_are_exact(tmp_path: Path, claim_id: str, strategy: str,
                                                ratio: float, verdict: str, where: str) -> None:
    """The same count in every run: an exact result of the implementation, decided as one."""
    run = _records(tmp_path, ratio, [1.0] * 5, strategy)
    row = engine.evaluate(CLAIM[claim_id], run, FOLDERS)[0]
    assert row["verdict"] == verdict and row["method"] == "exact", row["reason"]
    want = f"{verdict}: counted, exact in all 5 runs: value {ratio:.4g} lies {where}"
    assert row["reason"] == want
    assert row["value"] == row["ci_low"] == row["ci_high"] == pytest.approx(ratio)


def test_counted_bytes_in_four_runs_stay_undecided(tmp_path: Path) -> None:
    row = engine.evaluate(CLAIM["zero_stage3_1_5x_volume"], _records(tmp_path, 1.5, [1.0] * 4,
                                                                     "zero3"), FOLDERS)[0]
    assert row["verdict"] == engine.INCONCLUSIVE
    assert row["reason"].startswith("inconclusive: 4 runs (needs 5)")


def test_claims_say_bytes_are_set_by_the_algorithm() -> None:
    for c in beyond.CLAIMS[:3]:  # the ZeRO byte counts
        assert "set by the algorithm" in c.conditions and "implementation" in c.conditions
        assert c.reads == ((CH, "comparison"),) and c.paper in engine.PAPERS
    assert CLAIM["zero_stage1_same_volume"].margin_low == 0.98
    assert CLAIM["zero_stage3_1_5x_volume"].margin_low == pytest.approx(1.35)


def _accuracy(tmp: Path, ratio: float, spread: list[float]) -> Path:
    rows = []
    for seed, f in enumerate(spread):
        rows.append({"strategy": "ddp", "seed": seed, "model": "mlp", "dataset": "digits",
                     "test_accuracy": 0.9})
        rows.append({"strategy": "ddp_powersgd1", "seed": seed, "model": "mlp",
                     "dataset": "digits", "test_accuracy": 0.9 * ratio * f})
    (tmp / CH).mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(tmp / CH / "accuracy.csv", index=False)
    return tmp


@pytest.mark.parametrize(("ratio", "spread", "verdict"), [
    (1.0, NOISE, engine.AGREES), (0.9, NOISE, engine.DIFFERS),
    (1.0, WIDE, engine.INCONCLUSIVE)])
def test_powersgd_on_par_follows_the_seeds(tmp_path: Path, ratio: float, spread: list[float],
                                           verdict: str) -> None:
    claim = next(c for c in beyond.CLAIMS if c.id == "powersgd_accuracy_on_par")
    row = engine.evaluate(claim, _accuracy(tmp_path, ratio, spread), FOLDERS)[0]
    assert row["verdict"] == verdict, row["reason"]
    assert "ddp_powersgd1 / ddp" in row["quantity"] and row["paper"] == "Vogels 2019"


def test_powersgd_without_accuracy_runs_is_not_measured(tmp_path: Path, no_reference: Path
                                                        ) -> None:
    claim = next(c for c in beyond.CLAIMS if c.id == "powersgd_accuracy_on_par")
    row = engine.evaluate(claim, tmp_path, {})[0]
    assert row["verdict"] == engine.NOT_MEASURED and "11_beyond" in row["reason"]


def test_powersgd_ranks_each_get_a_row_naming_their_settings(tmp_path: Path) -> None:
    """Ranks 1 / 2 / 4 on the shallow CNN: one row each, its verdict from its own seeds (rank 1
    3 % below DDP differs, ranks 2 and 4 on par agree), the label naming the recorded settings."""
    common = {"model": "shallow_cnn", "dataset": "mnist", "workers": 2, "batch_size": 64,
              "steps": 398, "lr": 0.05}
    rows = [{"strategy": s, "seed": seed, "test_accuracy": 0.97 * f * NOISE[(seed + k) % 7],
             **common}  # each arm its own run-to-run noise
            for seed in range(5)
            for k, (s, f) in enumerate((("ddp", 1.0), ("ddp_powersgd1", 0.97),
                                        ("ddp_powersgd2", 1.0), ("ddp_powersgd4", 1.0)))]
    (tmp_path / CH).mkdir()
    pd.DataFrame(rows).to_csv(tmp_path / CH / "accuracy.csv", index=False)
    out = engine.evaluate(CLAIM["powersgd_accuracy_on_par"], tmp_path, FOLDERS)
    got = {r["quantity"].split("[")[1].split(" / ")[0]: r for r in out}  # '... [label]'
    assert sorted(got) == ["ddp_powersgd1", "ddp_powersgd2", "ddp_powersgd4"]
    assert got["ddp_powersgd1"]["verdict"] == engine.DIFFERS
    assert got["ddp_powersgd2"]["verdict"] == got["ddp_powersgd4"]["verdict"] == engine.AGREES
    assert ("shallow_cnn on mnist, 2 workers x batch 64, 400 steps (51,200 images), SGD lr 0.05"
            in got["ddp_powersgd2"]["quantity"])
    assert "before any of its runs" in CLAIM["powersgd_accuracy_on_par"].reasoning


def test_a_run_without_chapter_11_reads_the_committed_reference(tmp_path: Path,
                                                                 no_reference: Path) -> None:
    """As chapters 07-10: chapter 11's tables in results/reference stand in, labelled."""
    from ddlstudy.records import store

    ref = no_reference / CH
    _accuracy(ref.parent, 1.0, NOISE)
    store.write_meta(ref, {"chapter": CH}, status="ok")
    claim = CLAIM["powersgd_accuracy_on_par"]
    row = engine.evaluate(claim, tmp_path / "run", {})[0]
    assert row["verdict"] == engine.AGREES and row["source"].startswith("reference run: ")
