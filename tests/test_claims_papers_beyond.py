"""Two more papers' claims (issue 25, item 5), tested like the seeds': Jiang 2020 (BytePS:
all-reduce as a special case, counted bytes of the co-located PS over the ring, chapter 03) and
Zhao 2023 (PyTorch FSDP: throughput comparable to DDP, chapter 11). For each: agrees, differs,
inconclusive, too few runs (< 5 never decide), missing input; and the verdicts the committed
reference records give, printed (they follow the records, so they are not pinned here)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from ddlstudy import claims
from ddlstudy.claims import engine, jiang2020, registry, zhao2023

EMU = claims.EMULATED_03
EMU_FOLDER = f"{EMU}-resnet50"
JIANG = {EMU: [EMU_FOLDER]}
ZHAO = {zhao2023.CH11: [zhao2023.CH11]}
BYTEPS = jiang2020.CLAIMS[0]
FSDP = zhao2023.CLAIMS[0]
NOISE = [0.999, 1.001, 1.0, 0.9995, 1.0005, 1.0002, 0.9998]
WIDE = [0.6, 1.6, 0.8, 1.3, 1.0, 0.7, 1.45]


def _chapter03(tmp: Path, ratio: float, spread: list[float], workers: int = 3,
               strategy: str = "ps_colocated", source: str = "counted",
               testbed: str | None = None, folder: str = EMU_FOLDER) -> Path:
    """An emulated chapter 03 summary: the ring and `strategy` at `workers`, one row each per
    run (repeat), bytes sent per step `ratio` x the ring's (times the run's `spread` factor)."""
    ring = 4 / 3 * 100e6
    rows = []
    for rep, f in enumerate(spread):
        for s, b in (("allreduce", ring), (strategy, ring * ratio * f)):
            rows.append({"model": "resnet50", "strategy": s, "workers": workers, "repeat": rep,
                         "bytes_sent_per_step": b, "bytes_recv_per_step": b,
                         "bytes_source": "counted" if s == "allreduce" else source,
                         "images_per_sec": 5.0, "network": "10GbE", "cpu_bound": False,
                         **({"testbed": testbed} if testbed else {})})
    (tmp / folder).mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(tmp / folder / "summary.csv", index=False)
    return tmp


def _comparison(tmp: Path, ratio: float, spread: list[float], fsdp_mode: str = "replay",
                ddp_mode: str = "replay", strategies: tuple[str, ...] = ("fsdp", "ddp")) -> Path:
    """Chapter 11's comparison.csv: fsdp at `ratio` x ddp's images/sec, one row per run."""
    rows = []
    for rep, f in enumerate(spread):
        for s in strategies:
            rate = 20.0 * (ratio * f if s == "fsdp" else 1.0)
            rows.append({"strategy": s, "repeat": rep, "workers": 4, "network": "10GbE",
                         "images_per_sec": rate, "bytes_sent_per_step": 7e7,
                         "bytes_source": "counted",
                         "compute_mode": fsdp_mode if s == "fsdp" else ddp_mode})
    (tmp / zhao2023.CH11).mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(tmp / zhao2023.CH11 / "comparison.csv", index=False)
    return tmp



# ------------------------------------------------------------------ Jiang 2020 (BytePS)
@pytest.mark.parametrize(("ratio", "spread", "verdict"), [
    (1.0, NOISE, engine.AGREES), (1.3, NOISE, engine.DIFFERS), (1.0, WIDE, engine.INCONCLUSIVE),
])
def test_byteps_verdict_follows_the_runs(tmp_path: Path, ratio: float, spread: list[float],
                                         verdict: str) -> None:
    rows = engine.evaluate(BYTEPS, _chapter03(tmp_path, ratio, spread), JIANG)
    assert [r["verdict"] for r in rows] == [verdict], rows[0]["reason"]
    assert rows[0]["runs"] == len(spread) and "at 3 workers" in rows[0]["quantity"]
    assert rows[0]["paper"] == "Jiang 2020" and rows[0]["testbed"] == claims.TESTBED_EMULATED


@pytest.mark.parametrize(("ratio", "verdict", "where"), [
    (1.0, engine.AGREES, "inside the margins [0.98, 1.02]"),
    (1.5, engine.DIFFERS, "outside the margins [0.98, 1.02]")])
def test_byteps_counted_bytes_without_spread_are_exact(tmp_path: Path, ratio: float,
                                                       verdict: str, where: str) -> None:
    row = engine.evaluate(BYTEPS, _chapter03(tmp_path, ratio, [1.0] * 5), JIANG)[0]
    assert row["verdict"] == verdict and row["method"] == "exact", row["reason"]
    want = f"{verdict}: counted, exact in all 5 runs: value {ratio:.4g} lies {where}"
    assert row["reason"] == want


@pytest.mark.parametrize("spread", [NOISE[:3], [1.0] * 4])
def test_byteps_fewer_than_five_runs_never_decide(tmp_path: Path, spread: list[float]) -> None:
    row = engine.evaluate(BYTEPS, _chapter03(tmp_path, 1.0, spread), JIANG)[0]
    assert row["verdict"] == engine.INCONCLUSIVE
    assert row["reason"].startswith(f"inconclusive: {len(spread)} runs (needs 5)")


def test_byteps_missing_input_says_what_to_run(tmp_path: Path) -> None:
    row = engine.evaluate(BYTEPS, tmp_path, {})[0]  # no chapter 03 at all
    assert row["verdict"] == engine.NOT_MEASURED and EMU in row["reason"]
    assert "ps_colocated" in row["reason"]
    run = _chapter03(tmp_path / "a", 1.0, NOISE, strategy="ps_sync")  # no co-located PS
    row = engine.evaluate(BYTEPS, run, JIANG)[0]
    assert row["verdict"] == engine.NOT_MEASURED and "ps_colocated" in row["reason"]
    run = _chapter03(tmp_path / "b", 1.0, NOISE)  # the ring at another worker count only
    df = pd.read_csv(run / EMU_FOLDER / "summary.csv")
    df.loc[df["strategy"] == "allreduce", "workers"] = 6
    df.to_csv(run / EMU_FOLDER / "summary.csv", index=False)
    row = engine.evaluate(BYTEPS, run, JIANG)[0]
    assert row["verdict"] == engine.NOT_MEASURED and "at 3 workers" in row["quantity"]


def test_byteps_uses_counted_bytes_only(tmp_path: Path) -> None:
    run = _chapter03(tmp_path, 1.0, NOISE, source="analytic")
    assert engine.evaluate(BYTEPS, run, JIANG)[0]["verdict"] == engine.NOT_MEASURED


def test_byteps_pairs_cells_of_one_testbed_only(tmp_path: Path) -> None:
    """Today's H100 replay and a paper's testbed grid: one row each, never one testbed's
    co-located PS over another's ring."""
    _chapter03(tmp_path, 1.0, NOISE)
    _chapter03(tmp_path, 1.3, NOISE, testbed="shi2019",
               folder="03_ps_vs_ring-testbed-shi2019-resnet50")
    folders = {EMU: [EMU_FOLDER, "03_ps_vs_ring-testbed-shi2019-resnet50"]}
    rows = engine.evaluate(BYTEPS, tmp_path, folders)
    assert [r["verdict"] for r in rows] == [engine.AGREES, engine.DIFFERS]
    assert rows[0]["testbed"] == claims.TESTBED_EMULATED
    assert rows[1]["testbed"].startswith("emulated testbed shi2019")


# ------------------------------------------------------------------ Zhao 2023 (FSDP)
@pytest.mark.parametrize(("ratio", "spread", "verdict"), [
    (1.0, NOISE, engine.AGREES), (0.5, NOISE, engine.DIFFERS), (1.0, WIDE, engine.INCONCLUSIVE),
])
def test_fsdp_verdict_follows_the_runs(tmp_path: Path, ratio: float, spread: list[float],
                                       verdict: str) -> None:
    rows = engine.evaluate(FSDP, _comparison(tmp_path, ratio, spread), ZHAO)
    assert [r["verdict"] for r in rows] == [verdict], rows[0]["reason"]
    assert rows[0]["runs"] == len(spread) and "at 4 workers (replay compute)" in rows[0][
        "quantity"]
    assert rows[0]["paper"] == "Zhao 2023"


def test_fsdp_fewer_than_five_runs_never_decide(tmp_path: Path) -> None:
    row = engine.evaluate(FSDP, _comparison(tmp_path, 1.0, NOISE[:3]), ZHAO)[0]
    assert row["verdict"] == engine.INCONCLUSIVE
    assert row["reason"].startswith("inconclusive: 3 runs (needs 5)")


def test_fsdp_real_compute_beside_replayed_ddp_is_not_compared(tmp_path: Path) -> None:
    """fsdp has no compute replay: its real CPU time is never set against DDP's replayed GPU
    time; both real compare."""
    run = _comparison(tmp_path, 0.3, NOISE, fsdp_mode="real", ddp_mode="replay")
    row = engine.evaluate(FSDP, run, ZHAO)[0]
    assert row["verdict"] == engine.NOT_MEASURED and "beyond.compute: real" in row["reason"]
    run = _comparison(tmp_path / "b", 1.0, NOISE, fsdp_mode="real", ddp_mode="real")
    row = engine.evaluate(FSDP, run, ZHAO)[0]
    assert row["verdict"] == engine.AGREES and "(real compute)" in row["quantity"]


def test_fsdp_missing_input_says_what_to_run(tmp_path: Path, no_reference: Path) -> None:
    row = engine.evaluate(FSDP, tmp_path, {})[0]
    assert row["verdict"] == engine.NOT_MEASURED and "11_beyond" in row["reason"]
    run = _comparison(tmp_path / "a", 1.0, NOISE, strategies=("fsdp", "allreduce"))  # no ddp
    row = engine.evaluate(FSDP, run, ZHAO)[0]
    assert row["verdict"] == engine.NOT_MEASURED and "ddp" in row["reason"]


# ------------------------------------------------------------------ both
def test_claims_are_registered_after_the_beyond_papers_with_their_words() -> None:
    ids = [c.id for c in registry.all_claims()]
    assert ids.index(BYTEPS.id) > ids.index("powersgd_accuracy_on_par")
    assert ids.index(FSDP.id) > ids.index(BYTEPS.id)
    for c in (BYTEPS, FSDP):
        assert c.paper in engine.PAPERS and c.location.startswith("Abstract")
    assert "set by the algorithm" in BYTEPS.conditions and "implementation" in BYTEPS.conditions
    assert (BYTEPS.margin_low, BYTEPS.margin_high) == (0.98, 1.02)
    assert FSDP.kind == "equivalence" and FSDP.margin_high == pytest.approx(1.2)
    assert "two special cases of BytePS" in BYTEPS.quote
    assert "comparable performance to Distributed Data Parallel" in FSDP.quote


def test_reference_verdicts_printed() -> None:
    """What the committed reference records say (printed, not pinned: they follow the records)."""
    from ddlstudy.records import reference

    table = engine.claims_table(reference.reference_dir(), claims=[BYTEPS, FSDP])
    assert set(table["claim_id"]) == {BYTEPS.id, FSDP.id}
    assert set(table["verdict"]) <= {*engine.DECIDED, engine.INCONCLUSIVE, engine.NOT_MEASURED}
    for r in table.itertuples():
        print(f"{r.paper} {r.claim_id} [{str(r.quantity).rsplit(' [', 1)[-1]}: {r.verdict}: "
              f"{r.reason}")
