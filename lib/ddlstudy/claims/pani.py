"""Pani, Hand, Yalamanchili (MSU CSE 812), *Performance Analysis of Distributed Deep Learning*:
a shallow CNN and ResNet-18 on MNIST, batch 32-8192, 1 CPU vs 1/2/4/8 RTX 2080 Ti GPUs
(Sec. V, Figs 1-6; Sec. VI, Figs 7-10; Sec. VIII)."""

from __future__ import annotations

import pandas as pd

from ddlstudy import claims
from ddlstudy.claims import Claim, Measurement, Records, per_run, register_claim, runs, side

PAPER = "Pani"
CNN = ("shallow CNN (2 conv + FC 800-500-10), MNIST, batch 32-8192, Xeon Silver 4214 CPU vs "
       "1/2/4/8 RTX 2080 Ti GPUs")
RESNET18 = "ResNet-18 (1-channel, 3x3 stem), MNIST, batch 32-8192, 1-8 GPUs"
# What chapter 09's reference sweep trains (params/reference-dynamics.yaml); each row names the
# model, data set, epochs and learning rate its records carry (`_settings`).
SWEEP = ("; here: chapter 09's sweep at 1 worker on this host's CPU, real training, 5 seeds. "
         "The reference trains an MLP (784-128-128-10, ReLU) on MNIST, 1 epoch per batch size, "
         "SGD at lr 0.01 fixed for every batch (Pani's 'optimal learning rate', Sec. V; no "
         "scaling with batch), not Pani's shallow CNN: one CNN epoch at batch 32 did not finish "
         "in 23 min on this 2-core host under load 17-26 (2026-11-26); the row names what ran")
CH03, CH09 = "03_ps_vs_ring", "09_batch_size"
RING = "allreduce"
NEEDS_GPUS = ("not measured: needs one GPU per worker (a GPU testbed; the testbeds issue); "
              "on this host workers share two CPU cores, so a slowdown with more workers is "
              "guaranteed and would decide nothing")


def _batch(column: str, what: str):  # noqa: ANN202 - a measure function
    def measure(rec: Records) -> list[Measurement]:
        """Chapter 09 (sweep.csv, trained cells, 1 worker): `what` at the largest batch / at
        the smallest, per seed (each seed an independent training run)."""
        df = rec.table(CH09, "sweep")
        need = "sweep.csv with trained (accuracy) cells at two batch sizes"
        if not df.empty and "test_accuracy" in df:
            df = df[df["test_accuracy"].notna()].assign(test_error=lambda d:
                                                        1 - d["test_accuracy"])
        if df.empty or column not in df or df["batch_size"].nunique() < 2:
            return [Measurement(what, missing=rec.missing(CH09, need), chapter=CH09)]
        one = df[df["workers"] == df["workers"].min()]
        model = "shallow_cnn" if "shallow_cnn" in set(one["model"]) else str(one["model"].iloc[0])
        one = one[one["model"] == model]
        lo, hi = int(one["batch_size"].min()), int(one["batch_size"].max())
        vals = per_run(lambda h, low: h / low, runs(one, column, "seed", batch_size=hi),
                       runs(one, column, "seed", batch_size=lo))
        return [Measurement(f"{_settings(one)}: {what} at batch {hi} / at batch {lo}, 1 worker, "
                            "same seed", vals, chapter=CH09, testbed=claims.TESTBED_HOST,
                            exact="exact",  # seeds vary data order and weights
                            source=rec.source(CH09, "measured (real training, one host, CPU)"))]
    return measure


def _settings(one: pd.DataFrame) -> str:
    """'model on data set, E epoch(s), lr ...' from the sweep's rows, and whether the model is
    Pani's shallow CNN (a different model is said to be one)."""
    model = str(one["model"].iloc[0])
    data = f" on {one['dataset'].iloc[0]}" if "dataset" in one else ""
    epochs = (f", {pd.to_numeric(one['epochs']).max():g} epoch(s) per batch size"
              if "epochs" in one else "")
    lr_col = "lr_target" if "lr_target" in one else "lr" if "lr" in one else ""
    lrs = sorted(set(pd.to_numeric(one[lr_col]).round(12))) if lr_col else []
    if len(lrs) == 1:
        lr = f", SGD lr {lrs[0]:g} fixed for every batch size"
    else:
        lr = f", {one['lr_rule'].iloc[0]}" if "lr_rule" in one else ", lr as configured"
    other = "" if model == "shallow_cnn" else " (not Pani's shallow CNN)"
    return f"{model}{data}{epochs}{lr}{other}"


def _ratio(rec: Records) -> list[Measurement]:
    """Chapter 03 (each section): ring comm/compute at the top worker count, the least-compute
    model over the most-compute model, per run."""
    rows = []
    for ch, bed in ((CH03, claims.TESTBED_HOST), (claims.EMULATED_03, claims.TESTBED_EMULATED)):
        df = rec.table(ch, "summary")
        need = "allreduce at > 1 worker for two or more models"
        if df.empty or not {"comm_s", "compute_s", "model"} <= set(df):
            rows.append(Measurement(ch, missing=rec.missing(ch, need), chapter=ch, testbed=bed))
            continue
        ring_all = df[(df["strategy"] == RING) & (df["workers"] > 1)]
        # one testbed at a time: another testbed's grid (Wang's 16 GPUs) must not set the top
        # worker count of this one's models
        found = False
        for tb, part in claims.by_testbed(ring_all):
            part = part[part["workers"] == part["workers"].max()] if not part.empty else part
            if part.empty or part["model"].nunique() < 2:
                continue
            found = True
            rows.append(_one_ratio(part, ch, bed if tb == "none" else f"emulated testbed {tb}",
                                   "" if tb == "none" else f"testbed {tb}: "))
        if not found:
            rows.append(Measurement(ch, missing=rec.missing(ch, need), chapter=ch, testbed=bed))
    return rows


def _one_ratio(ring: pd.DataFrame, ch: str, bed: str, prefix: str) -> Measurement:
    """Ring comm/compute of the least-compute model over the most-compute one, run by run, on
    one testbed's cells at its top worker count."""
    # the model's own compute (replayed: the table's seconds) orders the models, not the
    # measured wait, which a loaded host stretches (AlexNet's 0.4 s read 0.9-1.8 s at load 20)
    key = ("replay_s" if "replay_s" in ring and ring["replay_s"].notna().all()
           else "compute_s")
    order = ring.groupby("model")[key].median().sort_values()
    small, big = str(order.index[0]), str(order.index[-1])

    def cc(m: str, part: pd.DataFrame = ring) -> pd.Series:
        return runs(part, "comm_s", model=m) / runs(part, "compute_s", model=m)

    vals = per_run(lambda s, b: s / b, cc(small), cc(big))
    top = int(ring["workers"].iloc[0])
    return Measurement(f"{prefix}ring comm/compute at {top} workers: {small} (least "
                       f"compute) / {big} (most)", vals, chapter=ch, testbed=bed,
                       source="measured" if ch == CH03 else "emulated")


CLAIMS = [
    Claim(PAPER, "pani_one_gpu_fastest", "one GPU trains faster than any multi-GPU setup",
          "The single GPU trains faster as compared to any other combination of GPUs.",
          "Sec. V.A (Experiment I), Fig. 3", CNN,
          "training time on 1 GPU / on N GPUs (N = 2, 4, 8), same model and batch",
          "direction", 1.0, *side(1.0, "less"),
          "'trains faster' = shorter time on one GPU: any ratio below 1",
          needs=NEEDS_GPUS, direction="less"),
    Claim(PAPER, "pani_time_order_2_4_8", "training time rises from two to four to eight GPUs",
          "Also the increasing order of training time are two, four, and eight GPUs.",
          "Sec. V.A (Experiment I), Fig. 3", CNN,
          "training time on 8 GPUs / on 2 GPUs (and 4 / 2)",
          "direction", 1.0, *side(1.0),
          "'increasing order' = more GPUs take longer: any ratio above 1",
          needs=NEEDS_GPUS),
    Claim(PAPER, "pani_loss_up_with_batch", "average test loss increases with batch size",
          "Overall, with the increase in batch size, the average loss increased across the "
          "board.", "Sec. V.A (Experiment I), Fig. 1", CNN + SWEEP,
          "test loss at the largest batch / at the smallest, 1 worker, same seed",
          "direction", 1.0, *side(1.0),
          "'increased' (no size given): any ratio above 1 once the 95 % interval excludes 1",
          ((CH09, "sweep"),), _batch("test_loss", "test loss")),
    Claim(PAPER, "pani_error_down_with_batch", "classification error decreases with batch size",
          "The classification error also remains similar for different combinations of set of "
          "CPU and GPU combination; however, it decreases with any increase in batch size.",
          "Sec. V.A (Experiment I), Fig. 2", CNN + SWEEP,
          "test error (1 - accuracy) at the largest batch / at the smallest, 1 worker, same seed",
          "direction", 1.0, *side(1.0, "less"),
          "'decreases' (no size given): any ratio below 1 once the 95 % interval excludes 1",
          ((CH09, "sweep"),), _batch("test_error", "test error"), "less"),
    Claim(PAPER, "pani_loss_same_across_devices", "loss the same on CPU and GPU combinations",
          "We found that the average loss remained almost the same for different sets of CPU "
          "and GPU combinations.", "Sec. V.A (Experiment I), Fig. 1", CNN,
          "test loss on N GPUs / on 1 CPU, same model, batch and seed",
          "equivalence", 1.0, 1 / 1.1, 1.1,
          "'almost the same' = within 10 % either way: [0.909, 1.1]",
          needs="not measured: no chapter trains the same model on CPU and on GPUs (needs a "
                "GPU testbed; the testbeds issue)"),
    Claim(PAPER, "pani_resnet18_time_flat", "ResNet-18 training time varies little from 1 to 8 "
          "GPUs",
          "This is most notable among the Training time where the time to train varied little "
          "from 1 to 8 GPU(s).", "Sec. V.B (Experiment II), Fig. 6", RESNET18,
          "ResNet-18 training time on 8 GPUs / on 1 GPU, same batch",
          "equivalence", 1.0, 1 / 1.1, 1.1,
          "'varied little' = within 10 % either way: [0.909, 1.1]", needs=NEEDS_GPUS),
    Claim(PAPER, "pani_small_model_high_ratio",
          "small models have a high data-transfer-to-computation ratio",
          "However, in the case of small architecture and dataset, the ratio of data transfer "
          "to computation is high as less computation is performed per iteration.",
          "Sec. VIII Summary and lessons learned", CNN + "; compared with medium/large networks",
          "ring comm/compute at the top worker count: least-compute model / most-compute model",
          "direction", 1.0, *side(1.0),
          "'high' set against 'lower' for medium or large networks: the small model's ratio is "
          "above the large model's (ratio of ratios above 1)",
          ((CH03, "summary"), (claims.EMULATED_03, "summary")), _ratio),
]

for _claim in CLAIMS:
    register_claim(_claim)
