"""Shi 2019's claims after the audit against the thesis's text (issue 20, item 4): each claim's
words, location and conditions are the thesis's (one K80 GPU per GCP node, TensorFlow 1.12,
CIFAR-10, batch 32 per worker, 1-6 workers), and each changed or new measured claim's verdict
follows synthetic records (agrees, differs, inconclusive, too few runs, missing input); a claim
the study cannot measure says what is missing."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from ddlstudy.claims import engine, shi2019
from ddlstudy.claims.base import EMULATED_03, REPRODUCTION, UPDATE

CLAIM = {c.id: c for c in shi2019.CLAIMS}
NOISE = [1.0, 1.01, 0.99, 1.005, 0.995, 1.002]
WIDE = [0.3, 2.5, 0.5, 2.0, 1.0, 0.4]
RUNS = {"noise": NOISE, "wide": WIDE, "few": NOISE[:3]}
GRAD = 1e8  # bytes of one gradient

LINEAR = {1: 100.0, 3: 300.0, 6: 600.0}
FLAT = {1: 100.0, 3: 100.0, 6: 100.0}
PLATEAU = {1: 80.0, 3: 100.0, 6: 104.0}


def _eval(claim_id: str, run: Path, folders: dict) -> list[dict]:
    return engine.evaluate(CLAIM[claim_id], run, folders)


def _emulated(run: Path, cells: dict[str, dict[int, float]], spread: list[float],
              testbed: str = "none", model: str = "resnet50") -> dict:
    """One chapter 03 emulated summary: strategy -> {workers: cluster images/sec}, one row per
    run scaled by spread ** (N / 2) (ratios between counts vary run to run), with the wire
    bytes per step the algorithms move: a PS server N gradients each way, a ring worker one
    gradient each way (constant, so its rate follows the throughput per worker)."""
    rows = []
    for strategy, per_n in cells.items():
        for n, rate in per_n.items():
            for rep, f in enumerate(spread):
                row = {"strategy": strategy, "workers": n, "model": model, "repeat": rep,
                       "images_per_sec": rate * (f ** (n / 2) if n > 1 else 1.0),
                       "batch_size": 32, "compute_s": 1.0, "comm_s": 1.0, "error": "",
                       "cpu_bound": False, "testbed": testbed,
                       "wire_bytes_sent_per_step": GRAD, "wire_bytes_recv_per_step": GRAD}
                if strategy == "ps_sync":
                    row |= {"wire_server_bytes_sent_per_step": n * GRAD,
                            "wire_server_bytes_recv_per_step": n * GRAD}
                rows.append(row)
    folder = (f"{EMULATED_03}-{model}" if testbed == "none"
              else f"03_ps_vs_ring-testbed-{testbed}-{model}")
    (run / folder).mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(run / folder / "summary.csv", index=False)
    return {EMULATED_03: [folder]}


def _emulated_rows(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["chapter"] == EMULATED_03]


# --- the thesis's words --------------------------------------------------------------------

def test_conditions_are_the_theses_k80_gcp_cluster() -> None:
    """Sec. 3.3: one NVIDIA K80 GPU per node (not CPU-only nodes); TF 1.12; the ring is
    TensorFlow's CollectiveAllReduceStrategy (Sec. 3.4), not Horovod; the rate is not stated."""
    for c in shi2019.CLAIMS:
        assert "NVIDIA K80 GPU" in c.conditions and "CPU nodes" not in c.conditions
        assert "TensorFlow 1.12" in c.conditions and "CollectiveAllReduceStrategy" in c.conditions
        assert "Horovod" not in c.conditions and "batch 32 per worker" in c.conditions
        assert "1 to 6 worker nodes" in c.conditions and "not stated" in c.conditions
        assert c.location.startswith("Shi 2019, ")
        assert "seed" not in c.location.lower() and "..." not in c.quote
    assert "packets" in CLAIM["shi_ring_traffic_same"].conditions


def test_locations_and_quotes() -> None:
    assert CLAIM["shi_ps_levels_off"].quote.startswith(
        "We observed that performance improvement of training process on Parameter Server is "
        "limited. In Figure 4.3,")
    assert "Fig. 4.3" in CLAIM["shi_ps_levels_off"].location
    assert "Abstract" in CLAIM["shi_ring_scales_better"].location
    assert "outperforms the Parameter Server" in CLAIM["shi_ring_scales_better"].reasoning
    assert CLAIM["shi_not_directly_proportional"].location == "Shi 2019, Abstract"
    ps = CLAIM["shi_ps_traffic_proportional"]
    assert ps.quote.startswith("By concatenating Figures 4.7, 4.9, and 4.11")
    assert ps.quote.endswith("dramatically increase as Worker nodes are added into the cluster.")
    assert "5.1" in ps.location and "pp. 30-31" in ps.location
    assert CLAIM["shi_ring_traffic_same"].quote.startswith("However, in Figures 4.15 and 4.18")


# --- scaling (chapter 03) ------------------------------------------------------------------

@pytest.mark.parametrize(("claim_id", "cells", "spread", "verdict"), [
    ("shi_ps_levels_off", {"ps_sync": PLATEAU}, "noise", engine.AGREES),
    ("shi_ps_levels_off", {"ps_sync": LINEAR}, "noise", engine.DIFFERS),
    ("shi_ps_levels_off", {"ps_sync": PLATEAU}, "wide", engine.INCONCLUSIVE),
    ("shi_ring_proportional", {"allreduce": LINEAR}, "noise", engine.AGREES),
    ("shi_ring_proportional", {"allreduce": FLAT}, "noise", engine.DIFFERS),
    ("shi_ring_proportional", {"allreduce": LINEAR}, "wide", engine.INCONCLUSIVE),
    ("shi_ring_scales_better", {"allreduce": LINEAR, "ps_sync": PLATEAU}, "noise",
     engine.AGREES),
    ("shi_ring_scales_better", {"allreduce": PLATEAU, "ps_sync": LINEAR}, "noise",
     engine.DIFFERS),
    ("shi_ring_scales_better", {"allreduce": LINEAR, "ps_sync": LINEAR}, "wide",
     engine.INCONCLUSIVE),
])
def test_scaling_verdicts_follow_the_runs(tmp_path: Path, claim_id: str, cells: dict,
                                          spread: str, verdict: str) -> None:
    rows = _emulated_rows(_eval(claim_id, tmp_path, _emulated(tmp_path, cells, RUNS[spread])))
    assert [r["verdict"] for r in rows] == [verdict], [r["reason"] for r in rows]
    assert rows[0]["column"] == UPDATE


@pytest.mark.parametrize(("ps", "ring", "spread", "verdicts"), [
    (PLATEAU, PLATEAU, "noise", [engine.AGREES, engine.AGREES]),
    # superlinear (more than N-fold) differs; exactly N-fold cannot clear 1
    ({1: 100.0, 3: 400.0, 6: 800.0}, LINEAR, "noise", [engine.DIFFERS, engine.INCONCLUSIVE]),
    (PLATEAU, LINEAR, "wide", [engine.INCONCLUSIVE, engine.INCONCLUSIVE]),
])
def test_not_directly_proportional_for_both_architectures(tmp_path: Path, ps, ring, spread,
                                                          verdicts) -> None:
    """The abstract: speed-up below N for the PS and for the ring, each on its own 1-worker
    baseline; PS rows first."""
    rows = _emulated_rows(_eval("shi_not_directly_proportional", tmp_path,
                                _emulated(tmp_path, {"ps_sync": ps, "allreduce": ring},
                                          RUNS[spread])))
    assert [r["verdict"] for r in rows] == verdicts, [r["reason"] for r in rows]
    assert "ps_sync images/sec at 6 workers / (6 x at 1)" in rows[0]["quantity"]
    assert "allreduce images/sec at 6 workers / (6 x at 1)" in rows[1]["quantity"]
    assert CLAIM["shi_not_directly_proportional"].direction == "less"


def test_scaling_too_few_runs_and_missing(tmp_path: Path) -> None:
    for cid, cells in (("shi_ps_levels_off", {"ps_sync": PLATEAU}),
                       ("shi_not_directly_proportional", {"ps_sync": PLATEAU,
                                                          "allreduce": PLATEAU})):
        run = tmp_path / cid
        rows = _emulated_rows(_eval(cid, run, _emulated(run, cells, RUNS["few"])))
        assert rows and all(r["reason"].startswith("inconclusive: 3 runs (needs 5)")
                            for r in rows), [r["reason"] for r in rows]
    # no chapter 03 at all; and a PS grid without its 1-worker cell
    (row,) = _emulated_rows(_eval("shi_ring_proportional", tmp_path / "none", {}))
    assert row["verdict"] == engine.NOT_MEASURED and EMULATED_03 in row["reason"]
    run = tmp_path / "no1"
    rows = _emulated_rows(_eval("shi_not_directly_proportional", run, _emulated(
        run, {"ps_sync": {3: 100.0, 6: 104.0}, "allreduce": LINEAR}, NOISE)))
    assert rows[0]["verdict"] == engine.NOT_MEASURED and "at 1 worker" in rows[0]["reason"]
    assert rows[1]["verdict"] == engine.INCONCLUSIVE


def test_reads_shis_testbed_and_todays_but_not_another_papers(tmp_path: Path) -> None:
    """The K80 testbed's grid is the reproduction, the H100 replay the update; Wang's V100
    testbed (16 workers, 8 GPUs per node) is not Shi's condition and gives no row."""
    folders = _emulated(tmp_path, {"allreduce": FLAT}, NOISE)
    folders[EMULATED_03] += _emulated(tmp_path, {"allreduce": LINEAR}, NOISE,
                                      testbed="shi2019")[EMULATED_03]
    folders[EMULATED_03] += _emulated(tmp_path, {"allreduce": {1: 10.0, 16: 160.0}}, NOISE,
                                      testbed="wang_nchc_ib")[EMULATED_03]
    rows = _emulated_rows(_eval("shi_ring_proportional", tmp_path, folders))
    assert [(r["column"], r["verdict"]) for r in rows] == [(UPDATE, engine.DIFFERS),
                                                          (REPRODUCTION, engine.AGREES)]
    assert rows[1]["testbed"].startswith("emulated testbed shi2019")
    assert not any("wang" in r["testbed"] or "16 workers" in r["quantity"] for r in rows)


# --- traffic (chapter 03 wire counts; chapter 07 from the reference) -------------------------

@pytest.mark.parametrize(("claim_id", "cells", "spread", "verdict"), [
    # PS server bytes/s follow the throughput (N gradients per step, steps/s = rate / N / 32)
    ("shi_ps_traffic_proportional", {"ps_sync": LINEAR}, "noise", engine.AGREES),
    ("shi_ps_traffic_proportional", {"ps_sync": FLAT}, "noise", engine.DIFFERS),
    ("shi_ps_traffic_proportional", {"ps_sync": LINEAR}, "wide", engine.INCONCLUSIVE),
    # a ring worker's bytes/s follow the throughput per worker
    ("shi_ring_traffic_same", {"allreduce": LINEAR}, "noise", engine.AGREES),
    ("shi_ring_traffic_same", {"allreduce": FLAT}, "noise", engine.DIFFERS),
    ("shi_ring_traffic_same", {"allreduce": LINEAR}, "wide", engine.INCONCLUSIVE),
])
def test_traffic_is_a_rate_and_follows_the_runs(tmp_path: Path, no_reference, claim_id: str,
                                                cells: dict, spread: str, verdict: str) -> None:
    rows = _emulated_rows(_eval(claim_id, tmp_path, _emulated(tmp_path, cells, RUNS[spread])))
    assert [r["verdict"] for r in rows] == [verdict], [r["reason"] for r in rows]
    assert "bytes sent + received per second at 6 workers" in rows[0]["quantity"]
    assert rows[0]["quantity"].endswith("(6/3 x at 3)]" if "ps" in claim_id else "at 3]")


def test_ps_traffic_per_step_proportional_is_not_enough(tmp_path: Path, no_reference) -> None:
    """Per step the server's bytes are N x the gradient whatever the throughput (the PS
    algorithm); the thesis's figures are traffic over time: a PS whose throughput levels off
    moves no more bytes per second with more workers, and differs."""
    rows = _emulated_rows(_eval("shi_ps_traffic_proportional", tmp_path,
                                _emulated(tmp_path, {"ps_sync": PLATEAU}, NOISE)))
    assert rows[0]["verdict"] == engine.DIFFERS and rows[0]["value"] < 0.6


def test_traffic_too_few_runs_and_missing(tmp_path: Path, no_reference) -> None:
    rows = _emulated_rows(_eval("shi_ring_traffic_same", tmp_path,
                                _emulated(tmp_path, {"allreduce": LINEAR}, RUNS["few"])))
    assert rows[0]["reason"].startswith("inconclusive: 3 runs (needs 5)"), rows[0]["reason"]
    # a ring grid with one worker count >= 2 only (the 1-worker ring sends nothing)
    run = tmp_path / "one"
    rows = _emulated_rows(_eval("shi_ring_traffic_same", run, _emulated(
        run, {"allreduce": {1: 100.0, 6: 600.0}}, NOISE)))
    assert rows[0]["verdict"] == engine.NOT_MEASURED and "worker counts >= 2" in rows[0]["reason"]
    # no wire counts
    run = tmp_path / "nowire"
    folders = _emulated(run, {"ps_sync": LINEAR}, NOISE)
    path = run / folders[EMULATED_03][0] / "summary.csv"
    df = pd.read_csv(path)
    df.drop(columns=["wire_server_bytes_sent_per_step"]).to_csv(path, index=False)
    rows = _emulated_rows(_eval("shi_ps_traffic_proportional", run, folders))
    assert rows[0]["verdict"] == engine.NOT_MEASURED
    assert "wire_server_bytes_sent_per_step" in rows[0]["reason"]
    # no chapter 03 and no chapter 07 (empty reference): every row not measured
    rows = _eval("shi_ps_traffic_proportional", tmp_path / "none", {})
    assert rows and all(r["verdict"] == engine.NOT_MEASURED for r in rows)
    assert {r["chapter"] for r in rows} >= {EMULATED_03, "07_frameworks"}


def test_traffic_reads_chapter_07_frameworks(tmp_path: Path, no_reference) -> None:
    """Chapter 07: TensorFlow's PS (server bytes) and Horovod (per-worker bytes), per profile,
    from 2 workers (the thesis's smallest setup) to the top."""
    rows = []
    for strategy, per_n in (("tf_ps_sync", {1: 50.0, 2: 100.0, 6: 300.0}),
                            ("horovod", {1: 50.0, 2: 100.0, 6: 300.0})):
        for n, rate in per_n.items():
            for rep, f in enumerate(NOISE):
                row = {"strategy": strategy, "workers": n, "profile": "10GbE", "repeat": rep,
                       "images_per_sec": rate * f ** (n / 2), "batch_size": 32, "error": "",
                       "wire_bytes_sent_per_step": GRAD, "wire_bytes_recv_per_step": GRAD}
                if strategy == "tf_ps_sync":
                    row |= {"wire_server_bytes_sent_per_step": n * GRAD,
                            "wire_server_bytes_recv_per_step": n * GRAD}
                rows.append(row)
    (tmp_path / "07_frameworks").mkdir()
    pd.DataFrame(rows).to_csv(tmp_path / "07_frameworks" / "summary.csv", index=False)
    folders = {"07_frameworks": ["07_frameworks"]}
    for cid, what in (("shi_ps_traffic_proportional", "10GbE: tf_ps_sync server"),
                      ("shi_ring_traffic_same", "10GbE: horovod per-worker")):
        (row,) = [r for r in _eval(cid, tmp_path, folders) if r["chapter"] == "07_frameworks"]
        assert row["verdict"] == engine.AGREES, row["reason"]
        assert what in row["quantity"] and "at 6 workers / " in row["quantity"]
        assert ("(6/2 x at 2)" if "ps" in cid else "at 2]") in row["quantity"]


# --- a ring worker's link use --------------------------------------------------------------

def _ring_link(run: Path, use: float, spread: list[float], testbed: str = "none",
               gpus_per_node: int = 1) -> dict:
    """Ring cells at 2 and 6 workers on shaped links (10GbE x 0.01: 12.5 MB/s of the host's
    time; a testbed's own profile where `testbed` names one) whose wire bytes over comm_s are
    `use` x that rate, times spread per run."""
    from ddlstudy.network.profiles import PROFILES
    from ddlstudy.testbeds import emulation

    network = "10GbE" if testbed == "none" else emulation.profile_for(testbed)
    scale = 0.01 if testbed == "none" else 0.05
    rate = PROFILES[network].rate_bps * scale / 8
    rows = [{"strategy": "allreduce", "workers": n, "model": "resnet50", "repeat": rep,
             "images_per_sec": 100.0 * n, "batch_size": 32, "compute_s": 1.0,
             "comm_s": GRAD / (use * f * rate), "wire_bytes_sent_per_step": GRAD,
             "network": "10GbE" if testbed == "none" else testbed, "network_scale": scale,
             "gpus_per_node": gpus_per_node, "testbed": testbed, "error": "",
             "cpu_bound": False} for n in (2, 6) for rep, f in enumerate(spread)]
    folder = (f"{EMULATED_03}-resnet50" if testbed == "none"
              else f"03_ps_vs_ring-testbed-{testbed}-resnet50")
    (run / folder).mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(run / folder / "summary.csv", index=False)
    return {EMULATED_03: [folder]}


@pytest.mark.parametrize(("use", "spread", "verdict"), [
    (0.92, NOISE, engine.AGREES), (0.5, NOISE, engine.DIFFERS), (0.82, WIDE, engine.INCONCLUSIVE),
    (0.92, NOISE[:3], engine.INCONCLUSIVE)])
def test_full_bandwidth_divides_wire_bytes_by_the_shaped_rate(tmp_path: Path, use: float,
                                                               spread: list[float],
                                                               verdict: str) -> None:
    """A ring worker's wire bytes per step over (comm_s x profile rate x scale): near the rate
    agrees, half of it differs, a wide spread or too few runs decide nothing."""
    folders = _ring_link(tmp_path, use, spread)
    (row,) = _emulated_rows(_eval("shi_ring_full_bandwidth", tmp_path, folders))
    assert row["verdict"] == verdict, row["reason"]
    assert "at 6 workers" in row["quantity"]
    if verdict != engine.INCONCLUSIVE:
        assert abs(row["value"] - use) < 0.02 and row["column"] == UPDATE


def test_full_bandwidth_on_shis_testbed_is_the_reproduction_and_skips_shared_node_links(
        tmp_path: Path) -> None:
    """On Shi's K80 testbed the row stands for the paper's testbed, at its own 2 Gb/s profile;
    cells with several GPUs sharing one node link give no row."""
    folders = _ring_link(tmp_path, 0.9, NOISE, testbed="shi2019")
    (row,) = _emulated_rows(_eval("shi_ring_full_bandwidth", tmp_path, folders))
    assert row["column"] == REPRODUCTION and abs(row["value"] - 0.9) < 0.02
    other = tmp_path / "shared"
    folders = _ring_link(other, 0.9, NOISE, gpus_per_node=8)
    rows = _emulated_rows(_eval("shi_ring_full_bandwidth", other, folders))
    assert all(r["verdict"] == engine.NOT_MEASURED for r in rows)


# --- a ring worker's packets: compute or links ----------------------------------------------

def _links_pair(run: Path, fast: float, spread: list[float], what_if: bool = True) -> dict:
    """Ring cells at 3 and 6 workers on Shi's testbed (cluster images/sec 100 x N) and on its
    links-only what-if shi2019_10g (`fast` x that, times spread per run), one gradient each way
    per step on both (bytes per step are the model's)."""
    folders = []
    for testbed, factor in (("shi2019", 1.0), ("shi2019_10g", fast))[:2 if what_if else 1]:
        rows = [{"strategy": "allreduce", "workers": n, "model": "resnet50", "repeat": rep,
                 "images_per_sec": 5.0 * n, "images_per_sec_cluster": 100.0 * n * factor
                 * (f if testbed != "shi2019" else 1.0), "batch_size": 32, "compute_s": 1.0,
                 "comm_s": 2.0, "wire_bytes_sent_per_step": GRAD,
                 "wire_bytes_recv_per_step": GRAD, "testbed": testbed, "error": "",
                 "cpu_bound": False} for n in (3, 6) for rep, f in enumerate(spread)]
        folder = f"03_ps_vs_ring-testbed-{testbed}-resnet50"
        (run / folder).mkdir(parents=True, exist_ok=True)
        pd.DataFrame(rows).to_csv(run / folder / "summary.csv", index=False)
        folders.append(folder)
    return {EMULATED_03: folders}


@pytest.mark.parametrize(("fast", "spread", "verdict"), [
    (1.02, NOISE, engine.AGREES), (1.5, NOISE, engine.DIFFERS), (1.0, WIDE, engine.INCONCLUSIVE),
    (1.0, NOISE[:3], engine.INCONCLUSIVE)])
def test_packets_follow_the_links_or_not(tmp_path: Path, fast: float, spread: list[float],
                                         verdict: str) -> None:
    """The per-worker traffic rate (cluster seconds) with 5x faster links / with Shi's: the
    same rate agrees with 'only depend on the computational capacity', 1.5x differs, a wide
    spread or too few runs decide nothing; the row names both testbeds and the base's compute /
    communication ratio."""
    folders = _links_pair(tmp_path, fast, spread)
    (row,) = _emulated_rows(_eval("shi_ring_packets_set_by_compute", tmp_path, folders))
    assert row["verdict"] == verdict, row["reason"]
    assert "at 6 workers, 10 Gb/s links / 2 Gb/s" in row["quantity"]
    assert "shi2019_10g" in row["testbed"] and "Tesla K80" in row["testbed"]
    if verdict != engine.INCONCLUSIVE:
        assert abs(row["value"] - fast) < 0.02 and row["ratio"] == pytest.approx(0.5)


def test_packets_without_the_what_if_cells_say_how_to_measure_them(tmp_path: Path) -> None:
    folders = _links_pair(tmp_path, 1.0, NOISE, what_if=False)
    (row,) = _emulated_rows(_eval("shi_ring_packets_set_by_compute", tmp_path, folders))
    assert row["verdict"] == engine.NOT_MEASURED
    assert "params/reference-shi-links.yaml" in row["reason"]


# --- claims the study does not measure -------------------------------------------------------

@pytest.mark.parametrize("claim_id", ["shi_ring_full_bandwidth",
                                      "shi_ring_packets_set_by_compute"])
def test_unmeasured_claims_say_what_is_missing(tmp_path: Path, claim_id: str) -> None:
    (row,) = _eval(claim_id, tmp_path, {})
    assert row["verdict"] == engine.NOT_MEASURED and row["reason"].startswith("not measured: ")
    assert "needs" in row["reason"] and row["runs"] == 0
