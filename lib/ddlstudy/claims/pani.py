"""Pani, Hand, Yalamanchili (MSU CSE 812), *Performance Analysis of Distributed Deep Learning*:
a shallow CNN and ResNet-18 on MNIST, batch 32-8192, SGD at lr 0.01 in PyTorch, workers
exchanging parameters over MPI; 1 CPU vs 1/2/4/8 RTX 2080 Ti GPUs (Sec. III, V.A, Figs 1-3),
ResNet-18 on 'a server cluster' (Sec. V.B, Figs 4-6) and on three local devices (Sec. V.B,
Figs 7-10), the RTX/GTX gap (Sec. VI) and the lessons (Sec. VIII). The results are figures only:
the text gives no number."""

from __future__ import annotations

import pandas as pd

from ddlstudy import claims
from ddlstudy.claims import Claim, Measurement, Records, per_run, register_claim, runs, side

PAPER = "Pani"
CNN = ("shallow CNN (2 conv + FC 800-500-10), MNIST, batch 32-8192, SGD lr 0.01, PyTorch, "
       "MPI between workers; Xeon Silver 4214 CPU vs 1/2/4/8 RTX 2080 Ti GPUs (one server "
       "assumed: the paper names no network)")
RESNET18 = ("ResNet-18 (1-channel, 3x3 stem, no pretrained weights), MNIST, batch 32-8192, "
            "SGD lr 0.01, PyTorch; 1-8 GPUs of 'a server cluster' (GPUs and network not named)")
LOCAL = ("ResNet-18 on MNIST on single local devices: GTX 1660Ti GPU, AMD Ryzen 5 3600 CPU "
         "(both 2020) and Intel Core i7-5500U laptop CPU ('about 5 years' older)")
# What chapter 09's reference sweep trains (params/reference-dynamics.yaml); each row names the
# model, data set, epochs and learning rate its records carry (`_settings`).
SWEEP = ("; here: chapter 09's sweep at 1 worker on this host's CPU, real training, 5 seeds. "
         "The reference trains an MLP (784-128-128-10, ReLU) on MNIST, 1 epoch per batch size, "
         "SGD at lr 0.01 fixed for every batch (Pani's 'optimal learning rate', Sec. III.B; no "
         "scaling with batch), not Pani's shallow CNN: one CNN epoch at batch 32 did not finish "
         "in 23 min on this 2-core host under load 17-26 (2026-11-26); the row names what ran")
ACROSS = ("; here: chapter 09's sweep, N CPU workers (all-reduce) vs 1 on this host, same seed: "
          "device speed does not enter loss or accuracy, so CPU workers stand in for Pani's "
          "CPU/GPU combinations. Pani does not say whether a GPU takes the whole batch or a "
          "share of it ('each data set is divided into many subsets', Sec. III.A): both are "
          "tested, each row says which (the same batch on every worker: N x the data per "
          "update; one batch split across the workers: the same data per update)")
CLOSEST = ("; here (closest condition): chapter 03's emulated grid, ring all-reduce between "
           "workers each replaying an H100 on shaped network links (Pani: GPUs in one server, "
           "no network named), batch 32 per worker held as workers are added, the model chapter "
           "03 ran that is named in the row (Pani's models are not in its replay tables)")
CH03, CH09 = "03_ps_vs_ring", "09_batch_size"
RING = "allreduce"
PANI_CNN = "shallow_cnn"  # Pani's two models, as the model registry names them
PANI_RESNET = "resnet18"
NEEDS_LOCAL = ("not measured: the study has none of Pani's local devices (GTX 1660Ti, Ryzen 5 "
               "3600, i7-5500U); needs ResNet-18 trained on MNIST on each, timed per batch size")


def _sweep(rec: Records, model: str | None) -> tuple[pd.DataFrame, str]:
    """Chapter 09's trained cells (test_error added) of `model` (None: Pani's shallow CNN where
    it ran, else the model the sweep trained, named in the row), and that model's name."""
    df = rec.table(CH09, "sweep")
    if not df.empty and "test_accuracy" in df:
        df = df[df["test_accuracy"].notna()].assign(test_error=lambda d: 1 - d["test_accuracy"])
    if df.empty or "model" not in df:
        return df.iloc[0:0] if not df.empty else df, model or ""
    if model is None:
        model = PANI_CNN if PANI_CNN in set(df["model"]) else str(df["model"].iloc[0])
    return df[df["model"] == model], model


def _batch(column: str, what: str, model: str | None = None):  # noqa: ANN202
    def measure(rec: Records) -> list[Measurement]:
        """Chapter 09 (sweep.csv, trained cells, 1 worker): `what` at the largest batch / at
        the smallest, per seed (each seed an independent training run); `model` given: that
        model only (another model cannot stand for it)."""
        df, got = _sweep(rec, model)
        need = ("sweep.csv with trained (accuracy) cells at two batch sizes"
                + (f" for {model} (batch_sweep.models and accuracy_models)" if model else ""))
        if df.empty or column not in df or df["batch_size"].nunique() < 2:
            return [Measurement(what, missing=rec.missing(CH09, need), chapter=CH09)]
        one = df[df["workers"] == df["workers"].min()]
        lo, hi = int(one["batch_size"].min()), int(one["batch_size"].max())
        vals = per_run(lambda h, low: h / low, runs(one, column, "seed", batch_size=hi),
                       runs(one, column, "seed", batch_size=lo))
        return [Measurement(f"{_settings(one)}: {what} at batch {hi} / at batch {lo}, 1 worker, "
                            "same seed", vals, chapter=CH09, testbed=claims.TESTBED_HOST,
                            exact="exact",  # seeds vary data order and weights
                            source=rec.source(CH09, "measured (real training, one host, CPU)"))]
    return measure


def _across(column: str, what: str, model: str | None = None):  # noqa: ANN202
    def measure(rec: Records) -> list[Measurement]:
        """Chapter 09 (sweep.csv, trained cells): `what` at the top worker count / at 1 worker,
        same seed, per seed, under both readings of Pani's batch (the paper does not say which):
        the same batch on every worker (N x the data per update), and one batch split across
        the workers (the same data per update, as torch's DataParallel or a batch divided by
        the world size does). One row per batch size the sweep ran under that reading."""
        df, got = _sweep(rec, model)
        need = ("sweep.csv with trained (accuracy) cells at 1 and >= 2 workers (batch_sweep."
                "workers)" + (f" for {model}" if model else ""))
        if df.empty or column not in df or 1 not in set(df["workers"]) or \
                int(df["workers"].max()) < 2:
            return [Measurement(what, missing=rec.missing(CH09, need), chapter=CH09)]
        top = int(df["workers"].max())
        one, many = df[df["workers"] == 1], df[df["workers"] == top]
        pairs = [(int(b), int(b), f"batch {int(b)}") for b in
                 sorted(set(many["batch_size"]) & set(one["batch_size"]))]
        pairs += [(int(b) // top, int(b), f"one batch of {int(b)} split across the workers "
                   f"({int(b) // top} each)") for b in sorted(set(one["batch_size"]))
                  if int(b) % top == 0 and int(b) // top in set(many["batch_size"])]
        rows = []
        settings = _settings(df)
        src = rec.source(CH09, "measured (real training, one host, CPU workers)")
        for per_worker, single, label in pairs:
            vals = per_run(lambda n, o: n / o,
                           runs(many, column, "seed", batch_size=per_worker),
                           runs(one, column, "seed", batch_size=single))
            text = f"{settings}: {what} on {top} workers / on 1, {label}, same seed"
            if per_worker != single and vals:
                # a split batch averaged by a synchronous all-reduce is the one worker's update:
                # the runs check the implementation, not Pani's devices
                rows.append(Measurement(text, chapter=CH09, testbed=claims.TESTBED_HOST,
                                        source=src, fixed=(
                    "set by configuration: synchronous all-reduce of a batch split across the "
                    "workers computes the update one worker computes on the whole batch (same "
                    f"seed, same data order); measured {min(vals):.4f}-{max(vals):.4f} over "
                    f"{len(vals)} seeds, a check of the implementation, not of the devices")))
                continue
            acc = [c.loc[c["batch_size"] == b, "test_accuracy"].median()
                   for c, b in ((many, per_worker), (one, single))]
            note = (f"test accuracy {acc[0]:.2f} and {acc[1]:.2f}, near chance (0.1 on 10 "
                    "classes): two models that did not train are 'the same'"
                    if max(acc) < 0.2 else "")
            rows.append(Measurement(text, vals, chapter=CH09, testbed=claims.TESTBED_HOST,
                                    exact="exact", source=src, note=note))
        return rows or [Measurement(what, missing=rec.missing(CH09, need), chapter=CH09)]
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
    other = "" if model in {PANI_CNN, PANI_RESNET} else " (not Pani's shallow CNN)"
    return f"{model}{data}{epochs}{lr}{other}"


def _order(ring: pd.DataFrame) -> pd.Series:
    """Chapter 03's models ordered by their own compute per step (replayed: the table's
    seconds; the measured wait, which a loaded host stretches, only where none is recorded;
    neither: seconds per image at 1 worker, where no communication adds to them)."""
    for key in ("replay_s", "compute_s"):
        if key in ring and ring[key].notna().all():
            return ring.groupby("model")[key].median().sort_values()
    one = ring[ring["workers"] == 1]
    return (1 / one.groupby("model")["images_per_sec"].median()).sort_values()


def _times(pick: str | tuple[str, ...], pairs):  # noqa: ANN001, ANN202 - a measure function
    """Chapter 03's emulated section (today's H100 replay; Pani's one-server testbed has no
    compute to replay), ring all-reduce: training time for a fixed data set at a workers / at
    b workers = images/sec at b / at a, per run, for each (a, b) in `pairs(counts, top)`.
    `pick`: 'least' / 'most' (the model of least / most compute) or models in preference."""
    def measure(rec: Records) -> list[Measurement]:
        ch = claims.EMULATED_03
        df = rec.table(ch, "summary")
        need = "allreduce at 1 and >= 2 workers in network.chapter03_models"
        cols = {"strategy", "workers", "model", "images_per_sec"}
        ring = df[df["strategy"] == RING] if cols <= set(df) else df.iloc[0:0]
        ring = dict(claims.by_testbed(ring)).get("none", ring.iloc[0:0])
        models = [m for m, p in ring.groupby("model")
                  if 1 in set(p["workers"]) and p["workers"].max() > 1] if not ring.empty else []
        ring = ring[ring["model"].isin(models)] if models else ring.iloc[0:0]
        if isinstance(pick, tuple):
            model = next((m for m in pick if m in models), "")
        elif models:
            order = _order(ring)
            model = str(order.index[0] if pick == "least" else order.index[-1])
        else:
            model = ""
        if not model:
            what = f"{'/'.join(pick)} " if isinstance(pick, tuple) else ""
            return [Measurement(f"{what}ring", missing=rec.missing(ch, what + need), chapter=ch)]
        part = ring[ring["model"] == model]
        counts = sorted(set(int(w) for w in part["workers"]))
        rows = []
        for a, b in pairs(counts, counts[-1]):
            got = claims.ratio_of_runs(runs(part, "images_per_sec", workers=b),
                                       runs(part, "images_per_sec", workers=a))
            rows.append(Measurement(
                f"{model}: ring training time for a fixed data set on {a} worker(s) / on {b} "
                f"(images/sec at {b} / at {a})", **got, chapter=ch,
                testbed=claims.TESTBED_EMULATED, source=rec.source(
                    ch, "emulated (shaped links, H100 compute replayed; Pani: GPUs of one "
                    "server, no network named)")))
        if not rows:  # e.g. workers [1, 4]: no two of Pani's 2, 4, 8 to order
            return [Measurement(f"{model}: ring", chapter=ch, missing=(
                f"not measured: {ch} ran {model}'s ring at {counts} workers only: needs the "
                "worker counts the claim compares (two or more of Pani's 2, 4, 8 for the "
                "order, 1 and >= 2 for one GPU against several) in network.workers"))]
        return rows
    return measure


def _pani_counts(counts: list[int], top: int) -> list[int]:
    """Pani's 2, 4, 8 among the worker counts run, and the top count if it is above them."""
    got = [n for n in (2, 4, 8) if n in counts]
    return got + [top] if top > 1 and top > max(got, default=1) else got


def _one_vs_n(counts: list[int], top: int) -> list[tuple[int, int]]:
    return [(1, n) for n in _pani_counts(counts, top)]


def _increasing(counts: list[int], top: int) -> list[tuple[int, int]]:
    got = _pani_counts(counts, top)
    return [(b, a) for a, b in zip(got, got[1:], strict=False)]


def _top_vs_one(counts: list[int], top: int) -> list[tuple[int, int]]:
    return [(top, 1)] if top > 1 else []


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
            rows.append(_one_ratio(part, ch, bed if tb == "none" else tb,
                                   "" if tb == "none" else f"testbed {tb}: "))
        if not found:
            rows.append(Measurement(ch, missing=rec.missing(ch, need), chapter=ch, testbed=bed))
    return rows


def _bed_label(bed: str, models: list[str]) -> str:
    """A catalog testbed's claim label for the rows of `models` (their converted compute rows
    named), else `bed` as it is (the host, today's H100 replay, a testbed not in the catalog)."""
    from ddlstudy.testbeds import catalog

    if bed not in catalog.names():
        return bed if bed in (claims.TESTBED_HOST, claims.TESTBED_EMULATED) else \
            f"emulated testbed {bed}"
    return claims.emulated_testbed_label(bed, models)


def _one_ratio(ring: pd.DataFrame, ch: str, bed: str, prefix: str) -> Measurement:
    """Ring comm/compute of the least-compute model over the most-compute one, run by run, on
    one testbed's cells at its top worker count (`bed`: its label, or a catalog testbed's
    name, labelled here with the two models' rows)."""
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
                       f"compute) / {big} (most)", vals, chapter=ch,
                       testbed=_bed_label(bed, [small, big]),
                       source="measured" if ch == CH03 else "emulated")


CLAIMS = [
    Claim(PAPER, "pani_one_gpu_fastest", "one GPU trains faster than any multi-GPU setup",
          "The single GPU trains faster as compared to any other combination of GPUs.",
          "Sec. V.A (Experiment I), Fig. 3", CNN + CLOSEST,
          "training time for the same data on 1 GPU / on N GPUs (N = 2, 4, 8; here the worker "
          "counts run), same model and batch: the least-compute model chapter 03 ran",
          "direction", 1.0, *side(1.0, "less"),
          "'trains faster' = shorter time on one GPU: any ratio below 1, at every N",
          ((claims.EMULATED_03, "summary"),), _times("least", _one_vs_n), "less"),
    Claim(PAPER, "pani_time_order_2_4_8", "training time rises from two to four to eight GPUs",
          "Also the increasing order of training time are two, four, and eight GPUs.",
          "Sec. V.A (Experiment I), Fig. 3", CNN + CLOSEST,
          "training time on 4 GPUs / on 2, and on 8 / on 4 (here: the worker counts run), same "
          "model and batch: the least-compute model chapter 03 ran",
          "direction", 1.0, *side(1.0),
          "'increasing order' = more GPUs take longer: any ratio above 1, at each step",
          ((claims.EMULATED_03, "summary"),), _times("least", _increasing)),
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
          "and GPU combinations.", "Sec. V.A (Experiment I), Fig. 1", CNN + ACROSS,
          "test loss on N workers / on 1, same model and seed, at the same batch per worker and "
          "at one batch split across the workers",
          "equivalence", 1.0, 1 / 1.1, 1.1,
          "'almost the same' = within 10 % either way: [0.909, 1.1]",
          ((CH09, "sweep"),), _across("test_loss", "test loss")),
    Claim(PAPER, "pani_error_same_across_devices",
          "classification error the same on CPU and GPU combinations",
          "The classification error also remains similar for different combinations of set of "
          "CPU and GPU combination; however, it decreases with any increase in batch size.",
          "Sec. V.A (Experiment I), Fig. 2", CNN + ACROSS,
          "test error (1 - accuracy) on N workers / on 1, same model and seed, at the same batch "
          "per worker and at one batch split across the workers",
          "equivalence", 1.0, 1 / 1.1, 1.1,
          "'remains similar' = within 10 % either way: [0.909, 1.1]",
          ((CH09, "sweep"),), _across("test_error", "test error")),
    Claim(PAPER, "pani_resnet18_loss_down_with_batch", "ResNet-18: larger batches lower the loss",
          "The graphs show that with the negative log-likelihood loss function and low batch "
          "sizes ResNet-18 was prone to large amounts of loss and over fitting. [...] This "
          "loss was made less negative when the batch size increased. This increased batch "
          "size tended to not only improve the loss but the testing accuracy as well.",
          "Sec. V.B (Experiment II), Fig. 4", RESNET18 + "; here: chapter 09's "
          "sweep at 1 worker on this host's CPU, where it trained resnet18",
          "ResNet-18 test loss at the largest batch / at the smallest, 1 worker, same seed",
          "direction", 1.0, *side(1.0, "less"),
          "'large amounts of loss' at low batch, 'improve the loss' at larger batch: any ratio "
          "below 1 (the paper's 'made less negative' is read with its Fig. 4: the NLL loss "
          "falls); only ResNet-18 tests it: the paper contrasts it with the shallow CNN, whose "
          "loss rose with batch", ((CH09, "sweep"),),
          _batch("test_loss", "test loss", PANI_RESNET), "less"),
    Claim(PAPER, "pani_resnet18_accuracy_up_with_batch",
          "ResNet-18: larger batches raise test accuracy",
          "This increased batch size tended to not only improve the loss but the testing "
          "accuracy as well.", "Sec. V.B (Experiment II), Fig. 5", RESNET18 + "; here: chapter "
          "09's sweep at 1 worker on this host's CPU, where it trained resnet18",
          "ResNet-18 test error (1 - accuracy) at the largest batch / at the smallest, 1 worker, "
          "same seed", "direction", 1.0, *side(1.0, "less"),
          "'improve [...] the testing accuracy': lower test error, any ratio below 1; only "
          "ResNet-18 tests it", ((CH09, "sweep"),),
          _batch("test_error", "test error", PANI_RESNET), "less"),
    Claim(PAPER, "pani_resnet18_time_flat", "ResNet-18 training time varies little from 1 to 8 "
          "GPUs",
          "This is most notable among the Training time where the time to train varied little "
          "from 1 to 8 GPU(s).", "Sec. V.B (Experiment II), Fig. 6", RESNET18 + CLOSEST,
          "ResNet-18 training time for the same data on 8 GPUs / on 1 GPU, same batch (here: "
          "resnet18 where chapter 03 ran it, else resnet50, the nearest residual network, at "
          "the top worker count run)",
          "equivalence", 1.0, 1 / 1.1, 1.1,
          "'varied little' = within 10 % either way: [0.909, 1.1]",
          ((claims.EMULATED_03, "summary"),), _times((PANI_RESNET, "resnet50"), _top_vs_one)),
    Claim(PAPER, "pani_resnet18_accuracy_flat",
          "ResNet-18 accuracy varies little with the hardware",
          "The performance varied little with the change in hardware.",
          "Sec. V.B (Experiment II), Figs 4-6", RESNET18 + ACROSS,
          "ResNet-18 test accuracy on N workers / on 1, same batch and seed (Fig. 5; time: "
          "pani_resnet18_time_flat)",
          "equivalence", 1.0, 1 / 1.1, 1.1,
          "'varied little' = within 10 % either way: [0.909, 1.1]",
          ((CH09, "sweep"),), _across("test_accuracy", "test accuracy", PANI_RESNET)),
    Claim(PAPER, "pani_local_newer_hw_slower",
          "ResNet-18 ran longer on the newer local hardware than on the old",
          "There was a large increase in run time from the old hardware to the newer hardware.",
          "Sec. V.B, Figs 7-9", LOCAL,
          "ResNet-18 training time on the 2020 devices (GTX 1660Ti, Ryzen 5 3600) / on the "
          "i7-5500U, same batch",
          "direction", 1.0, *side(1.0),
          "read as written ('increase in run time' from old to new): newer slower, any ratio "
          "above 1 (Sec. VI's 'large generational gaps in performance' suggests the opposite "
          "was meant; the row keeps the words)", needs=NEEDS_LOCAL),
    Claim(PAPER, "pani_local_batch512_peak",
          "ResNet-18 training time peaks locally at batch 512",
          "There was an odd doubling in runtime for the 512 batch test. This was present on two "
          "runs, but a third run was conducted with more values around that batch size. This "
          "showed a lower spike in run times, but it still was a local maxima in training time.",
          "Sec. V.B, Figs 9-10", LOCAL,
          "ResNet-18 training time at batch 512 / the larger of its neighbours' (batch 256 and "
          "1024), same device",
          "direction", 1.0, *side(1.0),
          "'a local maxima': above both neighbours, any ratio above 1 (the first runs' 'doubling' "
          "was not repeated by the third, so no size is tested)", needs=NEEDS_LOCAL),
    Claim(PAPER, "pani_rtx_20x_gtx", "RTX cards perform near 20x GTX cards of the same year",
          "The fact that RTX graphics cards have a performance near 20x that of GTX graphics of "
          "the same model year provides an interesting challenge when designing the distributed "
          "network paradigm.", "Sec. VI (Future work)",
          "RTX 2080 Ti (Sec. V.A) vs GTX 1660Ti (Sec. V.B); the models and workloads compared are "
          "not stated",
          "throughput of an RTX card / of a GTX card of the same model year, same training job",
          "magnitude", 20.0, 20 * 0.8, 20 / 0.8,
          "'near 20x': within 25 % of 20 (log-symmetric), [16, 25]",
          needs="not measured: the study has neither card; needs the same training job timed "
                "on an RTX and a GTX card of one model year"),
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
    Claim(PAPER, "pani_small_model_overhead_outweighs",
          "for a small model, adding machines makes training slower",
          "The overhead due to synchronization and transfer of data and parameter outweighs the "
          "computational advantage due to the addition of machines or processes.",
          "Sec. VIII Summary and lessons learned", CNN + "; 'in the case of small architecture "
          "and dataset'" + CLOSEST,
          "training time for the same data on N workers / on 1, the least-compute model chapter "
          "03 ran, at its top worker count",
          "direction", 1.0, *side(1.0),
          "'outweighs the computational advantage': N workers take longer than one, any ratio "
          "above 1", ((claims.EMULATED_03, "summary"),), _times("least", _top_vs_one)),
    Claim(PAPER, "pani_large_model_distributed_useful",
          "for a medium or large model, distributed training pays",
          "In the case of medium or large network and datasets, this ratio is lower as the "
          "computation per iteration is quite high. Hence, in such cases a distributed training "
          "approach is useful.", "Sec. VIII Summary and lessons learned",
          "medium or large networks and data sets (none named)" + CLOSEST,
          "training time for the same data on N workers / on 1, the most-compute model chapter "
          "03 ran, at its top worker count",
          "direction", 1.0, *side(1.0, "less"),
          "'useful' = N workers train the same data faster than one: any ratio below 1",
          ((claims.EMULATED_03, "summary"),), _times("most", _top_vs_one), "less"),
]

for _claim in CLAIMS:
    register_claim(_claim)
