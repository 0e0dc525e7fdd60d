"""Malik 2018's and Pani's claims after the audit against the papers' text (issue 20, item 4):
each claim's words are the paper's, and each new or changed measured claim's verdict follows
synthetic records (agrees, differs, inconclusive, too few runs, missing input); a claim the study
cannot measure says what is missing."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from ddlstudy.claims import engine, malik2018, pani
from ddlstudy.claims.base import EMULATED_03

CLAIM = {c.id: c for c in malik2018.CLAIMS + pani.CLAIMS}
NOISE = [1.0, 1.01, 0.99, 1.005, 0.995, 1.002]
WIDE = [0.3, 2.5, 0.5, 2.0, 1.0, 0.4]
RUNS = {"noise": NOISE, "wide": WIDE, "few": NOISE[:3]}


def _eval(claim_id: str, run: Path, folders: dict) -> list[dict]:
    return engine.evaluate(CLAIM[claim_id], run, folders)


# --- chapter 03, emulated section -------------------------------------------------------------

def _emulated(run: Path, rates: dict[tuple[str, int], float], spread: list[float],
              strategy: str = "allreduce", **extra: object) -> dict:
    """One summary.csv per model under the emulated chapter 03 folder: (model, workers) -> the
    cluster's images/sec, one row per run scaled by spread ** (N / 2) (so ratios between worker
    counts vary run to run too); AlexNet computes least."""
    replay = {"alexnet": 0.003, "resnet50": 0.03, "resnet152": 0.07}
    folders = []
    for model in sorted({m for m, _ in rates}):
        rows = []
        for (m, n), rate in rates.items():
            if m != model:
                continue
            for rep, f in enumerate(spread):
                rows.append({"strategy": strategy, "workers": n, "model": model, "repeat": rep,
                             "images_per_sec": rate * (f ** (n / 2) if n > 1 else 1.0),
                             "replay_s": replay[model], "compute_s": 1.0, "comm_s": 1.0,
                             "network": "10GbE", "error": "", **extra})
        folder = f"{EMULATED_03}-{model}"
        (run / folder).mkdir(parents=True, exist_ok=True)
        pd.DataFrame(rows).to_csv(run / folder / "summary.csv", index=False)
        folders.append(folder)
    return {EMULATED_03: folders}


def _grid(model: str, per_n: dict[int, float]) -> dict[tuple[str, int], float]:
    return {(model, n): r for n, r in per_n.items()}


SLOWER = {1: 100.0, 2: 50.0, 4: 40.0, 6: 30.0}  # more workers: less throughput, longer time
LINEAR = {1: 100.0, 2: 200.0, 4: 400.0, 6: 600.0}
FLAT = {1: 100.0, 2: 100.0, 4: 100.0, 6: 100.0}


@pytest.mark.parametrize(("claim_id", "model", "per_n", "spread", "verdict"), [
    ("pani_one_gpu_fastest", "alexnet", SLOWER, "noise", engine.AGREES),
    ("pani_one_gpu_fastest", "alexnet", LINEAR, "noise", engine.DIFFERS),
    ("pani_one_gpu_fastest", "alexnet", FLAT, "wide", engine.INCONCLUSIVE),
    ("pani_time_order_2_4_8", "alexnet", SLOWER, "noise", engine.AGREES),
    ("pani_time_order_2_4_8", "alexnet", LINEAR, "noise", engine.DIFFERS),
    ("pani_time_order_2_4_8", "alexnet", FLAT, "wide", engine.INCONCLUSIVE),
    ("pani_small_model_overhead_outweighs", "alexnet", SLOWER, "noise", engine.AGREES),
    ("pani_small_model_overhead_outweighs", "alexnet", LINEAR, "noise", engine.DIFFERS),
    ("pani_small_model_overhead_outweighs", "alexnet", FLAT, "wide", engine.INCONCLUSIVE),
    ("pani_large_model_distributed_useful", "resnet152", LINEAR, "noise", engine.AGREES),
    ("pani_large_model_distributed_useful", "resnet152", SLOWER, "noise", engine.DIFFERS),
    ("pani_large_model_distributed_useful", "resnet152", FLAT, "wide", engine.INCONCLUSIVE),
    ("pani_resnet18_time_flat", "resnet50", FLAT, "noise", engine.AGREES),
    ("pani_resnet18_time_flat", "resnet50", SLOWER, "noise", engine.DIFFERS),
    ("pani_resnet18_time_flat", "resnet50", FLAT, "wide", engine.INCONCLUSIVE),
])
def test_pani_training_time_follows_the_runs(tmp_path: Path, claim_id: str, model: str,
                                             per_n: dict, spread: str, verdict: str) -> None:
    """Training time for one data set = images / cluster images/sec: its ratio between worker
    counts is the inverse throughput ratio, on the model of least (most) compute."""
    other = "resnet152" if model == "alexnet" else "alexnet"
    rates = {**_grid(model, per_n), **_grid(other, {1: 10.0, 6: 10.0})}
    rows = _eval(claim_id, tmp_path, _emulated(tmp_path, rates, RUNS[spread]))
    assert rows and all(r["verdict"] == verdict for r in rows), [r["reason"] for r in rows]
    assert all(r["quantity"].count(f"{model}: ring training time") == 1 for r in rows)
    assert "closest condition" in rows[0]["conditions"]


def test_pani_time_rows_are_papers_worker_counts(tmp_path: Path) -> None:
    """1 vs 2, 4 (Pani's counts that ran) and 6 (the top, in place of 8); order 2->4, 4->6."""
    rates = {**_grid("alexnet", SLOWER), **_grid("resnet152", SLOWER)}
    folders = _emulated(tmp_path, rates, NOISE)
    one = [r["quantity"] for r in _eval("pani_one_gpu_fastest", tmp_path, folders)]
    assert [q.split("[", 1)[1].split(" (")[0] for q in one] == [
        f"alexnet: ring training time for a fixed data set on 1 worker(s) / on {n}"
        for n in (2, 4, 6)]
    order = [r["quantity"] for r in _eval("pani_time_order_2_4_8", tmp_path, folders)]
    assert "on 4 worker(s) / on 2" in order[0] and "on 6 worker(s) / on 4" in order[1]
    row = _eval("pani_large_model_distributed_useful", tmp_path, folders)[0]
    assert "resnet152: ring training time for a fixed data set on 6 worker(s) / on 1" in \
        row["quantity"]


def test_pani_time_too_few_runs_and_missing(tmp_path: Path) -> None:
    rates = {**_grid("alexnet", SLOWER), **_grid("resnet152", LINEAR)}
    row = _eval("pani_small_model_overhead_outweighs", tmp_path,
                _emulated(tmp_path, rates, RUNS["few"]))[0]
    assert row["reason"].startswith("inconclusive: 3 runs (needs 5)"), row["reason"]
    (row,) = _eval("pani_one_gpu_fastest", tmp_path / "none", {})
    assert row["verdict"] == engine.NOT_MEASURED and EMULATED_03 in row["reason"]
    (row,) = _eval("pani_resnet18_time_flat", tmp_path / "alex",
                   _emulated(tmp_path / "alex", _grid("alexnet", FLAT), NOISE))
    assert row["verdict"] == engine.NOT_MEASURED and "resnet18/resnet50" in row["reason"]


def test_pani_time_order_names_the_counts_it_lacks(tmp_path: Path, no_reference: Path) -> None:
    """make report's grid (1 and 4 workers) has no two of Pani's 2, 4, 8 to order: the row says
    which counts ran and which the claim needs, not 'no records'."""
    rates = {**_grid("alexnet", {1: 100.0, 4: 40.0}), **_grid("resnet152", {1: 10.0, 4: 30.0})}
    (row,) = _eval("pani_time_order_2_4_8", tmp_path, _emulated(tmp_path, rates, NOISE))
    assert row["verdict"] == engine.NOT_MEASURED, row
    assert "alexnet's ring at [1, 4] workers only" in row["reason"]
    assert "Pani's 2, 4, 8" in row["reason"] and "network.workers" in row["reason"]


def test_pani_time_reads_todays_testbed_only(tmp_path: Path) -> None:
    """A paper's testbed grid (more workers, other compute) is not today's replay: it neither
    sets the worker counts nor joins the runs."""
    folders = _emulated(tmp_path, {**_grid("alexnet", SLOWER), **_grid("resnet152", FLAT)},
                        NOISE, testbed="none")
    shi = tmp_path / "03_ps_vs_ring-testbed-shi2019-alexnet"
    shi.mkdir()
    pd.DataFrame([{"strategy": "allreduce", "workers": n, "model": "alexnet", "repeat": r,
                   "images_per_sec": 100.0 * n, "replay_s": 0.003, "testbed": "shi2019"}
                  for n in (1, 8) for r in range(6)]).to_csv(shi / "summary.csv", index=False)
    folders[EMULATED_03].append(shi.name)
    rows = _eval("pani_one_gpu_fastest", tmp_path, folders)
    assert len(rows) == 3 and all(r["verdict"] == engine.AGREES for r in rows)


# --- chapter 03: Malik's PS communication share and the ring's volume -------------------------

def _ps(run: Path, comm: float, spread: list[float], testbed: str = "none",
        network: str = "10GbE", workers: int = 6) -> dict:
    folder = (f"{EMULATED_03}-alexnet" if testbed == "none"
              else f"03_ps_vs_ring-testbed-{testbed}-alexnet")
    rows = [{"strategy": "ps_sync", "workers": w, "servers": 1, "model": "alexnet", "repeat": r,
             "comm_s": comm * f, "compute_s": 1.0, "network": network, "testbed": testbed,
             "error": ""} for w in (1, workers) for r, f in enumerate(spread)]
    (run / folder).mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(run / folder / "summary.csv", index=False)
    return {EMULATED_03: [folder]}


@pytest.mark.parametrize(("comm", "spread", "verdict"), [
    (9.0, NOISE, engine.AGREES), (0.1, NOISE, engine.DIFFERS), (1.0, WIDE, engine.INCONCLUSIVE),
    (9.0, NOISE[:3], engine.INCONCLUSIVE)])
def test_malik_comm_share_follows_the_runs_and_names_the_links(tmp_path: Path, comm: float,
                                                               spread: list[float],
                                                               verdict: str) -> None:
    (row,) = _eval("malik_alexnet_comm_bottleneck", tmp_path, _ps(tmp_path, comm, spread))
    assert row["verdict"] == verdict, row["reason"]
    assert "6 workers, 1 server(s), 10GbE-like links" in row["quantity"]
    assert "not the paper's InfiniBand EDR" in row["reason"]
    if len(spread) < 5:
        assert row["reason"].startswith("inconclusive: 3 runs (needs 5)")


def test_malik_comm_share_takes_malik_testbeds_as_the_reproduction(tmp_path: Path) -> None:
    folders = _ps(tmp_path, 9.0, NOISE)
    k80 = _ps(tmp_path, 9.0, NOISE, testbed="malik2018_k80", network="IB-EDR", workers=8)
    shi = _ps(tmp_path, 0.1, NOISE, testbed="shi2019", workers=8)
    folders[EMULATED_03] += k80[EMULATED_03] + shi[EMULATED_03]
    rows = _eval("malik_alexnet_comm_bottleneck", tmp_path, folders)
    assert [r["column"] for r in rows] == ["update", "reproduction"]
    rep = rows[1]
    assert "malik2018_k80" in rep["testbed"] and "IB-EDR-like links" in rep["quantity"]
    assert "not the paper's" not in rep["reason"] and rep["verdict"] == engine.AGREES
    (row,) = _eval("malik_alexnet_comm_bottleneck", tmp_path / "none", {})
    assert row["verdict"] == engine.NOT_MEASURED


def _ring(run: Path, sent: float, runs: int = 6, source: str = "counted") -> dict:
    params, n = 1000, 4
    rows = [{"strategy": "allreduce", "workers": w, "model": "alexnet", "repeat": r,
             "params": params, "dtype": "float32", "bytes_source": source,
             "bytes_sent_per_step": sent * 2 * (w - 1) / w * params * 4 if w > 1 else 0.0,
             "error": ""} for w in (1, n) for r in range(runs)]
    folder = f"{EMULATED_03}-alexnet"
    (run / folder).mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(run / folder / "summary.csv", index=False)
    return {EMULATED_03: [folder]}


@pytest.mark.parametrize(("sent", "runs", "verdict", "reason"), [
    (1.0, 6, engine.AGREES, "agrees: counted, exact in all 6 runs"),
    (2.0, 6, engine.DIFFERS, "differs: counted, exact in all 6 runs"),
    (1.0, 3, engine.INCONCLUSIVE, "inconclusive: 3 runs (needs 5)")])
def test_malik_ring_volume_is_counted_exactly(tmp_path: Path, sent: float, runs: int,
                                              verdict: str, reason: str) -> None:
    """Bytes sent per worker per step over 2 (N-1)/N x gradient bytes: the same count in every
    run is an exact result (a naive all-to-all's 2x volume differs)."""
    (row,) = _eval("malik_ring_bandwidth_optimal", tmp_path, _ring(tmp_path, sent, runs))
    assert row["verdict"] == verdict and row["reason"].startswith(reason), row["reason"]
    assert "alexnet: ring bytes sent per worker per step at 4 workers" in row["quantity"]


def test_malik_ring_volume_needs_counted_bytes(tmp_path: Path) -> None:
    (row,) = _eval("malik_ring_bandwidth_optimal", tmp_path,
                   _ring(tmp_path, 1.0, source="estimated"))
    assert row["verdict"] == engine.NOT_MEASURED and "counted" in row["reason"]


# --- chapter 07: Malik's TF parameter-server efficiency ----------------------------------------

def _ch07(run: Path, rates: dict[int, float], spread: list[float], model: str = "resnet50",
          strategy: str = "tf_ps_sync", profile: str = "IB-EDR") -> dict:
    rows = [{"strategy": strategy, "workers": n, "servers": 1, "model": model, "repeat": r,
             "images_per_sec": rate * (f if n > 1 else 1.0), "profile": profile,
             "network": profile, "batch_size": 32, "shape": "cifar", "dataset": "synthetic",
             "error": ""} for n, rate in rates.items() for r, f in enumerate(spread)]
    (run / "07_frameworks").mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(run / "07_frameworks" / "summary.csv", index=False)
    return {"07_frameworks": ["07_frameworks"]}


@pytest.mark.parametrize(("eff", "spread", "verdict"), [
    (0.2, NOISE, engine.AGREES), (0.95, NOISE, engine.DIFFERS), (0.5, WIDE, engine.INCONCLUSIVE),
    (0.2, NOISE[:3], engine.INCONCLUSIVE)])
def test_malik_ps_efficiency_names_the_model_and_server(tmp_path: Path, eff: float,
                                                        spread: list[float], verdict: str,
                                                        no_reference: Path) -> None:
    (row,) = _eval("malik_ps_poor_scalability", tmp_path,
                   _ch07(tmp_path, {1: 100.0, 6: 600.0 * eff}, spread))
    assert row["verdict"] == verdict, row["reason"]
    assert "resnet50: tf_ps_sync efficiency at 6 workers, 1 server(s), IB-EDR-like links (not " \
           "the slide's GoogleNet" in row["quantity"], row["quantity"]
    assert "batch 32 per worker, cifar-shaped synthetic data" in row["reason"]


def test_malik_ps_efficiency_prefers_googlenet_and_misses_without_ib(tmp_path: Path,
                                                                     no_reference: Path) -> None:
    (row,) = _eval("malik_ps_poor_scalability", tmp_path,
                   _ch07(tmp_path, {1: 100.0, 4: 80.0}, NOISE, model="googlenet"))
    assert row["verdict"] == engine.AGREES and "not the slide's" not in row["quantity"]
    (row,) = _eval("malik_ps_poor_scalability", tmp_path / "ge",
                   _ch07(tmp_path / "ge", {1: 100.0, 4: 80.0}, NOISE, profile="10GbE"))
    assert row["verdict"] == engine.NOT_MEASURED and "IB-EDR" in row["reason"]


# --- chapter 09's sweep: Pani across worker counts and ResNet-18 over batch --------------------

def _sweep(run: Path, model: str, by_workers: float, by_batch: float, spread: list[float],
           workers: tuple[int, ...] = (1, 2)) -> dict:
    """sweep.csv: batch 32 and 8192 at `workers`, one row per seed; loss and error at batch
    8192 are `by_batch` x batch 32's, at the top worker count `by_workers` x 1 worker's."""
    rows = []
    for seed, f in enumerate(spread):
        for n in workers:
            for bs in (32, 8192):
                k = (by_batch if bs == 8192 else 1.0) * (by_workers * f if n > 1 else 1.0)
                rows.append({"model": model, "dataset": "mnist", "workers": n, "batch_size": bs,
                             "seed": seed, "epochs": 1, "lr": 0.01, "lr_target": 0.01,
                             "test_loss": 0.3 * k * (f if bs == 8192 else 1.0),
                             "test_accuracy": 1 - 0.1 * k * (f if bs == 8192 else 1.0)})
    (run / "09_batch_size").mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(run / "09_batch_size" / "sweep.csv", index=False)
    return {"09_batch_size": ["09_batch_size"]}


@pytest.mark.parametrize("claim_id", ["pani_loss_same_across_devices",
                                      "pani_error_same_across_devices"])
@pytest.mark.parametrize(("by_workers", "spread", "verdict"), [
    (1.0, NOISE, engine.AGREES), (1.6, NOISE, engine.DIFFERS), (1.0, WIDE, engine.INCONCLUSIVE),
    (1.0, NOISE[:3], engine.INCONCLUSIVE)])
def test_pani_same_across_workers_follows_the_seeds(tmp_path: Path, claim_id: str,
                                                    by_workers: float, spread: list[float],
                                                    verdict: str) -> None:
    rows = _eval(claim_id, tmp_path, _sweep(tmp_path, "shallow_cnn", by_workers, 2.0, spread))
    assert [r["verdict"] for r in rows] == [verdict] * 2, [r["reason"] for r in rows]
    assert "on 2 workers / on 1, batch 32, same seed" in rows[0]["quantity"]
    assert "shallow_cnn on mnist" in rows[0]["quantity"]
    assert "CPU workers stand in" in rows[0]["conditions"]


@pytest.mark.parametrize("claim_id", ["pani_loss_same_across_devices",
                                      "pani_error_same_across_devices"])
def test_pani_same_across_workers_reads_the_batch_both_ways(tmp_path: Path, claim_id: str,
                                                            no_reference: Path) -> None:
    """Pani does not say whether a GPU takes the whole batch or a share: a 2-worker cell at
    batch 16 is set against the 1-worker cell at 32 (one batch split: the same update by
    construction, so no verdict), a 2-worker cell at 32 against 32 (the same batch per worker:
    measured); each reading is its own row."""
    rows = []
    for seed, f in enumerate(NOISE):
        for n, bs, k in ((1, 32, 1.0), (2, 32, 1.6 * f), (2, 16, f)):
            rows.append({"model": "mlp", "dataset": "mnist", "workers": n, "batch_size": bs,
                         "seed": seed, "epochs": 1, "lr": 0.01, "lr_target": 0.01,
                         "test_loss": 0.3 * k, "test_accuracy": 1 - 0.1 * k})
    (tmp_path / "09_batch_size").mkdir(parents=True)
    pd.DataFrame(rows).to_csv(tmp_path / "09_batch_size" / "sweep.csv", index=False)
    got = {r["quantity"].rsplit("on 1, ", 1)[1].split(", same seed")[0]: r["verdict"]
           for r in _eval(claim_id, tmp_path, {"09_batch_size": ["09_batch_size"]})}
    assert got == {"batch 32": engine.DIFFERS,
                   "one batch of 32 split across the workers (16 each)": engine.SET_BY_CONFIG}, got


def test_pani_same_across_workers_needs_two_worker_counts(tmp_path: Path,
                                                          no_reference: Path) -> None:
    (row,) = _eval("pani_loss_same_across_devices", tmp_path,
                   _sweep(tmp_path, "shallow_cnn", 1.0, 2.0, NOISE, workers=(1,)))
    assert row["verdict"] == engine.NOT_MEASURED and "batch_sweep.workers" in row["reason"]


@pytest.mark.parametrize("claim_id", ["pani_resnet18_loss_down_with_batch",
                                      "pani_resnet18_accuracy_up_with_batch"])
@pytest.mark.parametrize(("by_batch", "spread", "verdict"), [
    (0.5, NOISE, engine.AGREES), (2.0, NOISE, engine.DIFFERS), (1.0, WIDE, engine.INCONCLUSIVE),
    (0.5, NOISE[:3], engine.INCONCLUSIVE)])
def test_pani_resnet18_batch_follows_the_seeds(tmp_path: Path, claim_id: str, by_batch: float,
                                               spread: list[float], verdict: str) -> None:
    (row,) = _eval(claim_id, tmp_path, _sweep(tmp_path, "resnet18", 1.0, by_batch, spread))
    assert row["verdict"] == verdict, row["reason"]
    assert "resnet18 on mnist" in row["quantity"] and "not Pani's" not in row["quantity"]
    assert "batch 8192 / at batch 32, 1 worker" in row["quantity"]


def test_pani_resnet18_claims_take_no_other_model(tmp_path: Path, no_reference: Path) -> None:
    """The paper sets ResNet-18 against its shallow CNN: an MLP sweep does not stand for it."""
    folders = _sweep(tmp_path, "mlp", 1.0, 0.5, NOISE)
    for claim_id in ("pani_resnet18_loss_down_with_batch", "pani_resnet18_accuracy_up_with_batch",
                     "pani_resnet18_accuracy_flat"):
        (row,) = _eval(claim_id, tmp_path, folders)
        assert row["verdict"] == engine.NOT_MEASURED and "resnet18" in row["reason"], claim_id
    assert _eval("pani_loss_up_with_batch", tmp_path, folders)[0]["verdict"] != \
        engine.NOT_MEASURED


def test_pani_resnet18_accuracy_flat_follows_the_seeds(tmp_path: Path) -> None:
    rows = _eval("pani_resnet18_accuracy_flat", tmp_path,
                 _sweep(tmp_path, "resnet18", 1.0, 1.0, NOISE))
    assert [r["verdict"] for r in rows] == [engine.AGREES] * 2, [r["reason"] for r in rows]


# --- the words ------------------------------------------------------------------------------

@pytest.mark.parametrize(("claim_id", "words"), [
    ("malik_tf_ps_code_change_10pct", "lines changed"),
    ("malik_horovod_few_changes", "Horovod"),
    ("pani_local_newer_hw_slower", "GTX 1660Ti"),
    ("pani_local_batch512_peak", "i7-5500U"),
    ("pani_rtx_20x_gtx", "RTX and a GTX card")])
def test_unmeasured_claims_say_what_is_missing(tmp_path: Path, claim_id: str,
                                               words: str) -> None:
    (row,) = _eval(claim_id, tmp_path, {})
    assert row["verdict"] == engine.NOT_MEASURED and row["reason"].startswith("not measured: ")
    assert words in row["reason"], row["reason"]


def test_quotes_are_the_papers_words() -> None:
    """Each quote (its parts between a bullet ' - ' and a marked elision '[...]') is a run of
    the paper's words; locations name the slide or section."""
    for c in malik2018.CLAIMS:
        assert c.location.startswith("slide '"), c.id
        assert "GoogLeNet" not in c.location, c.id  # the slides spell it GoogleNet
    for c in pani.CLAIMS:
        assert c.location.startswith("Sec. "), c.id
        assert "[...]" in c.quote or "..." not in c.quote
    ids = {c.id for c in malik2018.CLAIMS + pani.CLAIMS}
    assert len(ids) == len(malik2018.CLAIMS) + len(pani.CLAIMS)
    assert CLAIM["malik_ps_poor_scalability"].quote.endswith("The scalability in poor")
    assert "over fitting. [...] This loss was made less negative" in \
        CLAIM["pani_resnet18_loss_down_with_batch"].quote
