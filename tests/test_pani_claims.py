"""Pani's batch-size claims (loss up, error down with batch) on synthetic chapter 09 sweeps:
agrees, differs, inconclusive, too few runs, missing input; and the row names what ran (model,
data set, epochs, fixed lr) and says when the model is not Pani's shallow CNN."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from ddlstudy.claims import engine, pani

CH = pani.CH09
FOLDERS = {CH: [CH]}
CLAIM = {c.id: c for c in pani.CLAIMS}
NOISE = [1.0, 1.01, 0.99, 1.005, 0.995, 1.002]
WIDE = [0.3, 2.5, 0.5, 2.0, 1.0, 0.4]


def _sweep(tmp: Path, loss_ratio: float, spread: list[float], model: str = "mlp",
           err_ratio: float = 1.0) -> Path:
    """sweep.csv: batch 32 and 8192 at 1 worker, one row per seed, lr 0.01 at both."""
    rows = []
    for seed, f in enumerate(spread):
        for bs, loss, err in ((32, 0.27, 0.08),
                              (8192, 0.27 * loss_ratio * f, 0.08 * err_ratio * f)):
            rows.append({"model": model, "dataset": "mnist", "workers": 1, "batch_size": bs,
                         "seed": seed, "epochs": 1, "lr": 0.01, "lr_target": 0.01,
                         "lr_rule": "lr 0.01", "test_loss": loss, "test_accuracy": 1 - err})
    (tmp / CH).mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(tmp / CH / "sweep.csv", index=False)
    return tmp


@pytest.mark.parametrize(("ratio", "spread", "verdict"), [
    (8.0, NOISE, engine.AGREES), (0.5, NOISE, engine.DIFFERS), (1.0, WIDE, engine.INCONCLUSIVE)])
def test_loss_up_follows_the_seeds(tmp_path: Path, ratio: float, spread: list[float],
                                   verdict: str) -> None:
    row = engine.evaluate(CLAIM["pani_loss_up_with_batch"], _sweep(tmp_path, ratio, spread),
                          FOLDERS)[0]
    assert row["verdict"] == verdict, row["reason"]
    assert row["runs"] == len(spread)


def test_too_few_seeds_and_missing_sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    row = engine.evaluate(CLAIM["pani_loss_up_with_batch"], _sweep(tmp_path, 8.0, NOISE[:3]),
                          FOLDERS)[0]
    assert row["reason"].startswith("inconclusive: 3 runs (needs 5)")
    from ddlstudy.records import reference

    monkeypatch.setattr(reference, "reference_dir", lambda: tmp_path / "no-reference")
    empty = tmp_path / "none"
    row = engine.evaluate(CLAIM["pani_error_down_with_batch"], empty, {})[0]
    assert row["verdict"] == engine.NOT_MEASURED and CH in row["reason"]


def test_rows_say_what_ran_and_that_it_is_not_panis_cnn(tmp_path: Path) -> None:
    row = engine.evaluate(CLAIM["pani_error_down_with_batch"],
                          _sweep(tmp_path, 8.0, NOISE, err_ratio=0.5), FOLDERS)[0]
    assert row["verdict"] == engine.AGREES, row["reason"]
    label = row["quantity"]
    for words in ("mlp on mnist", "1 epoch(s)", "SGD lr 0.01 fixed for every batch size",
                  "(not Pani's shallow CNN)", "batch 8192 / at batch 32"):
        assert words in label, label
    assert "MLP" in row["conditions"] and "not Pani's shallow CNN" in row["conditions"]
    cnn = engine.evaluate(CLAIM["pani_error_down_with_batch"],
                          _sweep(tmp_path / "cnn", 8.0, NOISE, "shallow_cnn", 0.5), FOLDERS)[0]
    assert "shallow_cnn on mnist" in cnn["quantity"] and "not Pani's" not in cnn["quantity"]


@pytest.mark.parametrize(("ratio", "verdict"), [(8.0, engine.AGREES), (0.5, engine.DIFFERS)])
def test_identical_ratio_in_every_seed_is_exact(tmp_path: Path, ratio: float,
                                                verdict: str) -> None:
    """Seeds vary the data order and initial weights: the same ratio in all 6 is exact."""
    row = engine.evaluate(CLAIM["pani_loss_up_with_batch"], _sweep(tmp_path, ratio, [1.0] * 6),
                          FOLDERS)[0]
    assert row["verdict"] == verdict and row["method"] == "exact", row["reason"]
    assert "exact in all 6 runs" in row["reason"]


def test_small_model_ratio_orders_models_by_their_own_compute(tmp_path: Path) -> None:
    """A loaded host stretches the measured wait (compute_s); the replayed seconds (replay_s)
    say which model computes least, so the least-compute model stays AlexNet."""
    ch = pani.claims.EMULATED_03
    rows = []
    for rep in range(5):
        for model, replay, compute, comm in (("alexnet", 0.003, 1.2, 23.0),
                                             ("vgg16", 0.006, 0.55, 20.0),
                                             ("resnet152", 0.07, 7.3, 37.0)):
            f = 1 + 0.02 * rep
            rows.append({"strategy": "allreduce", "workers": 6, "model": model, "repeat": rep,
                         "replay_s": replay, "compute_s": compute * f, "comm_s": comm})
    (tmp_path / ch).mkdir(parents=True)
    pd.DataFrame(rows).to_csv(tmp_path / ch / "summary.csv", index=False)
    out = engine.evaluate(CLAIM["pani_small_model_high_ratio"], tmp_path, {ch: [ch]})
    row = next(r for r in out if r["chapter"] == ch)
    assert "alexnet (least compute) / resnet152 (most)" in row["quantity"], row["quantity"]
    assert row["verdict"] == engine.AGREES and row["runs"] == 5, row["reason"]
