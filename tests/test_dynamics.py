"""Training dynamics: strategies that compute the same update follow the same curve, the
learning-rate schedule reaches the engines' optimizers, and chapter 99's bracketing and batch-size
verdicts follow the records they are given."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from ddlstudy.claims.engine import chapter_claims
from ddlstudy.cluster.engines import Cluster
from ddlstudy.experiments import dynamics
from ddlstudy.strategies import make_strategy
from ddlstudy.train.trainer import TrainConfig, train
from ddlstudy.workload.models import build_model

# digits: 1,438 training images; 2 workers x 16 = 32 per step -> 44 steps in the first epoch
TINY = TrainConfig(model="mlp", dataset="digits", strategy="allreduce", workers=2,
                   batch_size=16, epochs=1, warmup_steps=0, lr=0.1, dtype="float64",
                   model_kwargs={"activation": "relu"})


def _curve(res, folder: Path) -> pd.DataFrame:
    return dynamics.epoch_curve(dynamics.read_run(folder))


def test_single_ps_sync_allreduce_follow_one_curve_float64(cluster: Cluster,
                                                           tmp_path: Path) -> None:
    # 2 workers x 32 = 64 per step -> 22 steps in the first epoch (half TINY's: CI time)
    two = replace(TINY, batch_size=32)
    runs = {"single": replace(two, strategy="single", workers=1, batch_size=64),
            "ps_sync": replace(two, strategy="ps_sync"), "allreduce": two}
    results = {k: train(cluster, c, out_dir=tmp_path / k, progress=False, return_weights=True)
               for k, c in runs.items()}
    curves = {k: _curve(r, tmp_path / k) for k, r in results.items()}
    ref = curves["single"]
    assert ref["epoch"].tolist() == [1.0] and ref["step"].tolist() == [22]
    assert ref["wall_s"].notna().all() and (ref["wall_s"] > 0).all()
    # per-step training loss: worker losses averaged = the union batch's loss
    steps = {k: r.steps[r.steps["role"] == "worker"].groupby("step")["loss"].mean()
             for k, r in results.items()}
    assert len(steps["single"]) == 22
    for name in ("ps_sync", "allreduce"):
        np.testing.assert_allclose(steps[name].to_numpy(), steps["single"].to_numpy(),
                                   rtol=0, atol=1e-9, err_msg=name)
        np.testing.assert_allclose(curves[name]["train_loss"], ref["train_loss"], atol=1e-9)
        np.testing.assert_allclose(curves[name]["test_loss"], ref["test_loss"], atol=1e-9)
        assert curves[name]["test_accuracy"].tolist() == ref["test_accuracy"].tolist()
        torch.testing.assert_close(results[name].weights, results["single"].weights,
                                   rtol=0, atol=1e-10)
    # the loss did fall: the curves are of a model that learns, not of a constant
    assert steps["single"].iloc[-5:].mean() < steps["single"].iloc[:5].mean()


def test_linear_scaling_reaches_the_engines(cluster: Cluster) -> None:
    """2 x 16 with lr 0.05 scaled x2 (base 16 -> batch 32) is single's batch 32 at lr 0.1."""
    scaled = replace(TINY, lr=0.05, lr_scaling="linear", lr_base_batch=16, epochs=None,
                     steps=6)
    plain = replace(TINY, strategy="single", workers=1, batch_size=32, epochs=None, steps=6)
    a = train(cluster, scaled, progress=False, return_weights=True)
    b = train(cluster, plain, progress=False, return_weights=True)
    torch.testing.assert_close(a.weights, b.weights, rtol=0, atol=1e-10)
    c = train(cluster, replace(scaled, lr_scaling="none"), progress=False, return_weights=True)
    assert not torch.allclose(c.weights, b.weights)


def test_warmup_ramps_from_base_to_scaled_rate() -> None:
    torch.manual_seed(0)
    model = build_model("mlp", (1, 8, 8), num_classes=10).double()
    strat = make_strategy("single", model, lr=0.1)
    config = replace(TINY, strategy="single", workers=1, batch_size=128, lr=0.1,
                     lr_scaling="linear", lr_base_batch=32, lr_warmup_epochs=1.0)
    sched = dynamics.attach_schedule(strat, config, train_size=4 * 128)
    assert sched == dynamics.LRSchedule(0.1, pytest.approx(0.4), 4)
    seen = []
    x, y = torch.randn(8, 1, 8, 8, dtype=torch.float64), torch.randint(0, 10, (8,))
    for _ in range(6):
        seen.append(strat.opt.param_groups[0]["lr"])
        strat.step(x, y)
    np.testing.assert_allclose(seen, [0.1, 0.175, 0.25, 0.325, 0.4, 0.4])
    # ps_async: one update per worker's gradient, batch b each
    async_cfg = replace(config, strategy="ps_async", workers=4, batch_size=32)
    assert dynamics.schedule_for(async_cfg, 4 * 128).target == pytest.approx(0.1)


@pytest.mark.parametrize("kw, match", [
    ({"lr_scaling": "cubic"}, "unknown lr_scaling 'cubic'; valid: none, linear"),
    ({"lr_warmup_epochs": -1.0}, "lr_warmup_epochs must be a number >= 0"),
    ({"lr_base_batch": 0}, "lr_base_batch must be an integer >= 1"),
])
def test_bad_schedule_is_one_line(kw: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match) as err:
        replace(TINY, **kw).validate()
    assert "\n" not in str(err.value)


# ----------------------------------------------------------------------------- chapter 99 rows
def _bracketing_records(run: Path, ring_acc: list[float], tree_acc: list[float]) -> None:
    rows = [{"algorithm": a, "seed": s, "test_accuracy": acc, "epoch": 3.0, "dtype": "float32"}
            for a, accs in (("ring", ring_acc), ("tree", tree_acc))
            for s, acc in enumerate(accs)]
    folder = run / "08_convergence"
    folder.mkdir(parents=True)
    pd.DataFrame(rows).to_csv(folder / "bracketing.csv", index=False)


def _bracketing_row(run: Path) -> dict:
    """Fourie 2019's accuracy-gap claim as chapter 99 (and chapter 08) judge it."""
    table = chapter_claims(run, "08_convergence")
    return table[table["claim_id"] == "fourie_ring_accuracy_7_10pct_lower"].iloc[0].to_dict()


def test_bracketing_verdict_follows_a_gap_inside_the_papers_range(tmp_path: Path) -> None:
    _bracketing_records(tmp_path, [0.830, 0.832, 0.829, 0.831, 0.830],
                        [0.900, 0.902, 0.899, 0.901, 0.900])
    row = _bracketing_row(tmp_path)
    assert row["verdict"] == "agrees", row
    assert row["runs"] == 5


def test_bracketing_verdict_follows_no_gap(tmp_path: Path) -> None:
    _bracketing_records(tmp_path, [0.901, 0.899, 0.90, 0.902, 0.90],
                        [0.90, 0.90, 0.901, 0.90, 0.899])
    row = _bracketing_row(tmp_path)
    assert row["verdict"] == "differs", row


def test_bracketing_with_four_seeds_is_inconclusive(tmp_path: Path) -> None:
    _bracketing_records(tmp_path, [0.830, 0.832, 0.829, 0.831], [0.900, 0.902, 0.899, 0.901])
    row = _bracketing_row(tmp_path)
    assert row["verdict"] == "inconclusive" and "4 runs" in row["reason"], row


def test_bracketing_identical_accuracy_in_every_seed_is_exact(tmp_path: Path) -> None:
    """Ring and tree equal to the last digit in each of 5 seeds (the reference's case): the
    ratio 1 is exact, so it is decided against the paper's [0.90, 0.93], not left open."""
    accs = [0.9186, 0.9201, 0.9222, 0.9242, 0.9189]
    _bracketing_records(tmp_path, accs, accs)
    row = _bracketing_row(tmp_path)
    assert row["verdict"] == "differs" and row["method"] == "exact", row
    assert "exact in all 5 runs: value 1 lies outside the margins [0.9, 0.93]" in row["reason"]
    assert row["ci_low"] == row["ci_high"] == 1.0


def test_bracketing_identical_in_four_seeds_is_inconclusive(tmp_path: Path) -> None:
    accs = [0.9186, 0.9201, 0.9222, 0.9242]
    _bracketing_records(tmp_path, accs, accs)
    row = _bracketing_row(tmp_path)
    assert row["verdict"] == "inconclusive" and row["reason"].startswith(
        "inconclusive: 4 runs (needs 5)"), row


def test_bracketing_not_measured_without_chapter_08(tmp_path: Path, monkeypatch) -> None:
    from ddlstudy.records import reference

    monkeypatch.setattr(reference, "reference_dir", lambda: tmp_path / "no-reference")
    row = _bracketing_row(tmp_path)
    assert row["verdict"] == "not measured" and "08_convergence" in row["reason"], row


def test_run_plan_keeps_batch_sizes_apart_and_runs_shared_configs_once(cluster: Cluster,
                                                                      tmp_path: Path) -> None:
    """Cell labels name strategy, model and workers, not the batch: two batches must not share
    (and overwrite) one folder; a config two sections list runs once."""
    small = replace(TINY, epochs=None, steps=2, warmup_steps=1, eval=False, batch_size=8)
    big = replace(small, batch_size=16)
    runs = dynamics.run_plan(cluster, [("a", small), ("a", big), ("b", small)], tmp_path)
    assert runs["error"].tolist() == ["", "", ""]
    assert runs["folder"].iloc[0] != runs["folder"].iloc[1]
    assert runs["folder"].iloc[0] == runs["folder"].iloc[2]
    final = dynamics.finals(runs)
    sizes = [int(pd.read_csv(Path(f) / "summary.csv")["batch_size"].iloc[0])
             for f in runs["folder"]]
    assert sizes == [8, 16, 8] and final["images_per_sec"].gt(0).all()
    times = dynamics.epoch_times(final, samples=1438)
    assert times["time_source"].str.startswith("extrapolated").all()
    np.testing.assert_allclose(times["time_per_epoch_s"], 1438 / final["images_per_sec"])
