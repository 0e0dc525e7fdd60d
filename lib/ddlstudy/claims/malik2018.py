"""Malik et al. 2018 (BNL, NYSDS slides): Horovod scaling of AlexNet / GoogLeNet / ResNet50
and the TF parameter-server bottleneck (slides 'AlexNet/GoogleNet/ResNet50 using Horovod',
'Using Parameter Server Tensorflow APIs'). Their cluster: K20/K40/K80/P100 GPUs, InfiniBand
EDR, ImageNet or synthetic data, batch 64-512."""

from __future__ import annotations

from ddlstudy import claims
from ddlstudy.claims import Claim, Measurement, Records, per_run, register_claim, runs, side

PAPER = "Malik 2018"
CONDITIONS = ("BNL HPC1 / Institutional Cluster, K20-P100 GPUs, InfiniBand EDR, TensorFlow + "
              "Horovod (NCCL ring), ImageNet or synthetic data, batch 64/128/256/512")
CH03, CH07, CH09 = "03_ps_vs_ring", "07_frameworks", "09_batch_size"
HOROVOD = "horovod"
TF_PS = "tf_ps_sync"  # TF parameter servers, the slide's "Parameter Server Tensorflow"
PS = "ps_sync"
IB = "IB-EDR"  # the paper's network: tested on these emulated links only
RATE = "images_per_sec"
SLIDE = "slide '{} using Horovod'"
REPLAY = ("emulated (ring all-reduce on shaped links, H100 compute replayed; the "
          "H100 table stops at batch 64 on ImageNet-size input, so a larger batch's compute is "
          "its batch-64 time scaled linearly: an assumption, not a measurement)")


def _efficiency(strategy: str, model: str | None):  # noqa: ANN202 - a measure function
    def measure(rec: Records) -> list[Measurement]:
        """Chapter 07 on IB-EDR-like links: `strategy` images/sec at its top worker count /
        (N x at 1 worker), per run (`model` None: whatever model chapter 07 ran)."""
        df = rec.table(CH07, "summary")
        need = (f"{strategy} on {IB} at 1 and >= 2 workers"
                + (f" with model {model} (frameworks.model)" if model else ""))
        part = df
        for col, val in (("strategy", strategy), ("profile", IB), ("model", model)):
            if val is not None and not part.empty:
                part = part[part[col] == val] if col in part else part.iloc[0:0]
        if part.empty or int(part["workers"].max()) < 2 or 1 not in set(part["workers"]):
            return [Measurement(model or strategy, missing=rec.missing(CH07, need),
                                chapter=CH07)]
        top = int(part["workers"].max())
        got = str(part["model"].iloc[0])
        vals = per_run(lambda h, lo: h / (top * lo), runs(part, RATE, workers=top),
                       runs(part, RATE, workers=1))
        return [Measurement(f"{got}: {strategy} efficiency at {top} workers, {IB}-like links",
                            vals, chapter=CH07, source=rec.source(
                                CH07, "emulated (shaped links, H100 compute replayed)"))]
    return measure


def _batch(model: str):  # noqa: ANN202 - a measure function
    def measure(rec: Records) -> list[Measurement]:
        """Chapter 09's emulated sweep (malik.csv): images/sec at the largest batch / at the
        smallest, per run (the timed chunks of one run are one run; `repeat`: malik_repeats)."""
        df = rec.table(CH09, "malik")
        need = f"malik.csv with {model} at two batch sizes (batch_sweep.malik_models, root)"
        part = df[df["model"] == model] if "model" in df else df.iloc[0:0]
        if part.empty or part["batch_size"].nunique() < 2:
            return [Measurement(model, missing=rec.missing(CH09, need), chapter=CH09)]
        lo, hi = int(part["batch_size"].min()), int(part["batch_size"].max())
        rate = "images_per_sec_cluster"
        a = runs(part, rate, batch_size=hi)
        b = runs(part, rate, batch_size=lo)
        n = int(part["workers"].max()) if "workers" in part else 0
        net = f", {part['network'].iloc[0]}-like links" if "network" in part else ""
        links = str(part["network"].iloc[0]) if "network" in part else ""
        note = ("" if links == IB else
                f"links {links or 'unshaped'}-like, not the paper's InfiniBand EDR: with compute "
                "scaled linearly in batch, the ratio measures the communication amortised over "
                "a larger batch (on IB-EDR-like links it would sit near 1 by construction)")
        return [Measurement(f"{model}: images/sec at batch {hi} / at batch {lo}, {n} workers{net}",
                            tuple(a), tuple(b), chapter=CH09, source=rec.source(CH09, REPLAY),
                            note=note)]
    return measure


def _comm_share(rec: Records) -> list[Measurement]:
    """Chapter 03 (emulated section): AlexNet's PS step spent communicating, at the top worker
    count: comm_s / (comm_s + compute_s), per run."""
    df = rec.table(claims.EMULATED_03, "summary")
    need = "ps_sync with alexnet in network.chapter03_models"
    part = df[(df["model"] == "alexnet") & (df["strategy"] == PS)] if "model" in df else df
    part = dict(claims.by_testbed(part)).get("none", part[:0])  # today's H100 replay only
    if part.empty or not {"comm_s", "compute_s"} <= set(part):
        return [Measurement("alexnet", missing=rec.missing(claims.EMULATED_03, need),
                            chapter=claims.EMULATED_03)]
    top = int(part["workers"].max())
    vals = per_run(lambda c, k: c / (c + k), runs(part, "comm_s", workers=top),
                   runs(part, "compute_s", workers=top))
    return [Measurement(f"alexnet: PS share of the step spent communicating at {top} workers",
                        vals, chapter=claims.EMULATED_03, testbed=claims.TESTBED_EMULATED,
                        source=rec.source(claims.EMULATED_03, "emulated (10GbE-like links, "
                                          "ddlstudy PS, H100 compute replayed)"))]


def _linear(model: str, name: str) -> Claim:
    return Claim(
        PAPER, f"malik_horovod_linear_{model}", f"{name} with Horovod scales almost linearly",
        "Throughput performance and latency performance is almost linear",
        SLIDE.format(name), CONDITIONS + f"; {name}",
        f"{name}: Horovod images/sec at the top worker count / (N x at 1 worker), IB-EDR-like "
        "links",
        "equivalence", 1.0, 0.9, 1 / 0.9,
        "'almost linear' = scaling efficiency within 10 % of linear: [0.9, 1.11] (log-symmetric)",
        ((CH07, "summary"),), _efficiency(HOROVOD, model))


def _same_batch(model: str, name: str) -> Claim:
    return Claim(
        PAPER, f"malik_same_batch_{model}", f"{name}: every batch size performs the same",
        "All batch size shows same performance", SLIDE.format(name),
        CONDITIONS + f"; {name}, batch 64-512",
        f"{name}: images/sec at the largest batch / at the smallest (independent runs)",
        "equivalence", 1.0, 1 / 1.1, 1.1,
        "'same performance' = within 10 % either way: [0.909, 1.1] (TOST: a 2x change never "
        "agrees)", ((CH09, "malik"),), _batch(model))


CLAIMS = [
    _linear("alexnet", "AlexNet"),
    _linear("googlenet", "GoogLeNet"),
    _linear("resnet50", "ResNet50"),
    Claim(PAPER, "malik_larger_batch_alexnet", "AlexNet: the largest batch is fastest",
          "larger batch size shows the best result", SLIDE.format("AlexNet"),
          CONDITIONS + "; AlexNet, batch 64-512",
          "AlexNet: images/sec at the largest batch / at the smallest (independent runs)",
          "direction", 1.0, *side(1.0),
          "'shows the best result' = the largest batch is faster: any ratio above 1 once the "
          "95 % interval excludes 1", ((CH09, "malik"),), _batch("alexnet")),
    _same_batch("googlenet", "GoogLeNet"),
    _same_batch("resnet50", "ResNet50"),
    Claim(PAPER, "malik_ps_poor_scalability", "TF parameter-server scalability is poor",
          "Single Master Server which takes care of the parameter averaging (gradient update) "
          "- The scalability in poor",
          "slide 'Using Parameter Server Tensorflow APIs'",
          CONDITIONS + "; TF parameter servers (one server), GoogLeNet shown",
          "TF PS (tf_ps_sync) scaling efficiency at the top worker count, IB-EDR-like links "
          "(ResNet-50: the model chapter 07 runs)",
          "direction", 0.5, *side(0.5, "less"),
          "'poor', set against Horovod's 'almost linear' (>= 0.9): below half of linear "
          "(efficiency < 0.5)", ((CH07, "summary"),), _efficiency(TF_PS, None), "less"),
    Claim(PAPER, "malik_alexnet_comm_bottleneck",
          "AlexNet on a PS: communication is the main bottleneck",
          "AlexNet has large number of parameters - Communication is the main bottleneck here",
          "slide 'Using Parameter Server Tensorflow APIs'",
          CONDITIONS + "; AlexNet, TF parameter servers",
          "AlexNet PS step: communication time / (communication + compute) at the top worker "
          "count",
          "direction", 0.5, *side(0.5),
          "'the main bottleneck' = communication takes most of the step: share above 0.5",
          ((claims.EMULATED_03, "summary"),), _comm_share),
]

for _claim in CLAIMS:
    register_claim(_claim)
