"""Malik et al. 2018 (BNL, NYSDS 2018 slides), *Detailed Performance Analysis of Distributed
TensorFlow on a GPU Cluster using Deep Learning Algorithms*: Horovod scaling of AlexNet /
GoogleNet / ResNet50 (slides '<model> using Horovod'), the ring all-reduce it uses (slides 'Ring
All_Reduce'), the TF parameter-server bottleneck (slides 'Using Parameter Server Tensorflow
APIs') and the porting effort (slides 'Writing Distributed Deep Learning Algorithms', 'Horovod
Framework'). Their cluster (slide 'Experimentation'): K20/K40 GPUs on HPC1 and K80/P100 GPUs on
the Institutional Cluster at BNL, 124 worker nodes (about 400 K80 GPUs), InfiniBand EDR,
TensorFlow, synthetic and ImageNet data, batch 64/128/256/512. The results are charts only: the
text gives no number and not the GPU counts on the charts' axes."""

from __future__ import annotations

import pandas as pd

from ddlstudy import claims
from ddlstudy.claims import Claim, Measurement, Records, per_run, register_claim, runs, side

PAPER = "Malik 2018"
CONDITIONS = ("BNL HPC1 (K20, K40) and Institutional Cluster (K80, P100; 124 worker nodes, "
              "about 400 K80 GPUs), InfiniBand EDR, TensorFlow + Horovod (NCCL ring "
              "all-reduce), synthetic and ImageNet data, batch 64/128/256/512; the GPU counts "
              "of the charts are not in the slides' text")
CH03, CH07, CH09 = "03_ps_vs_ring", "07_frameworks", "09_batch_size"
HOROVOD = "horovod"
TF_PS = "tf_ps_sync"  # TF parameter servers, the slide's "Parameter Server Tensorflow"
PS = "ps_sync"
RING = "allreduce"
IB = "IB-EDR"  # the paper's network: tested on these emulated links only
RATE = "images_per_sec"
SLIDE = "slide '{} using Horovod'"
PS_SLIDE = "slide 'Using Parameter Server Tensorflow APIs' (the first of two)"
REPLAY = ("emulated (ring all-reduce on shaped links, H100 compute replayed; the "
          "H100 table stops at batch 64 on ImageNet-size input, so a larger batch's compute is "
          "its batch-64 time scaled linearly: an assumption, not a measurement)")
PAPER_MODEL = {"alexnet": "AlexNet", "googlenet": "GoogleNet", "resnet50": "ResNet50"}


def _cell_note(part: pd.DataFrame) -> str:
    """Where chapter 07's cells differ from the paper's: batch and input (the paper: batch
    64-512, ImageNet-size synthetic or ImageNet data)."""
    bs = sorted({int(b) for b in part["batch_size"].dropna()}) if "batch_size" in part else []
    shape = str(part["shape"].iloc[0]) if "shape" in part else "?"
    data = str(part["dataset"].iloc[0]) if "dataset" in part else "?"
    if bs and set(bs) <= {64, 128, 256, 512} and shape == "imagenet":
        return ""
    return (f"batch {'/'.join(map(str, bs)) or '?'} per worker, {shape}-shaped {data} data "
            "(the paper: batch 64-512, ImageNet-size input): the closest cells chapter 07 ran")


def _efficiency(strategy: str, model: str | None, paper_model: str = ""):  # noqa: ANN202
    def measure(rec: Records) -> list[Measurement]:
        """Chapter 07 on IB-EDR-like links: `strategy` images/sec at its top worker count /
        (N x at 1 worker), per run (`model` None: whatever model chapter 07 ran; then
        `paper_model` is the model the paper charted, named in the row when another ran)."""
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
        if model is None and paper_model and paper_model in set(part["model"]):
            part = part[part["model"] == paper_model]
        got = str(part["model"].iloc[0])
        part = part[part["model"] == got]
        top = int(part["workers"].max())
        vals = per_run(lambda h, lo: h / (top * lo), runs(part, RATE, workers=top),
                       runs(part, RATE, workers=1))
        servers = (f", {int(part['servers'].max())} server(s)"
                   if strategy == TF_PS and "servers" in part else "")
        other = (f" (not the slide's {PAPER_MODEL.get(paper_model, paper_model)}: chapter 07 "
                 f"ran {got} only)" if paper_model and got != paper_model else "")
        return [Measurement(f"{got}: {strategy} efficiency at {top} workers{servers}, "
                            f"{IB}-like links{other}", vals, chapter=CH07,
                            note=_cell_note(part), source=rec.source(
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


def _testbeds(df: pd.DataFrame) -> list[tuple[str, pd.DataFrame, str, str]]:
    """(name, cells, testbed label, column) of an emulated chapter 03 summary: today's H100
    replay ('none': the update) and Malik's own testbeds (malik2018_k80 / _p100, K80 / P100
    compute on IB-EDR-like links: the reproduction); another paper's testbed is skipped."""
    from ddlstudy.testbeds import catalog

    out = []
    for name, part in claims.by_testbed(df):
        if name in ("none", "nan", ""):
            out.append((name, part, claims.TESTBED_EMULATED, claims.UPDATE))
        elif name in catalog.names() and catalog.testbed(name).paper == PAPER:
            out.append((name, part, claims.emulated_testbed_label(name), claims.REPRODUCTION))
    return out


def _comm_share(rec: Records) -> list[Measurement]:
    """Chapter 03 (emulated section): AlexNet's PS step spent communicating, at the top worker
    count: comm_s / (comm_s + compute_s), per run; one row per testbed (today's H100 replay,
    Malik's K80 / P100 testbeds where their grids ran)."""
    df = rec.table(claims.EMULATED_03, "summary")
    need = "ps_sync with alexnet in network.chapter03_models"
    part = df[(df["model"] == "alexnet") & (df["strategy"] == PS)] if "model" in df else df
    beds = _testbeds(part) if not part.empty and {"comm_s", "compute_s"} <= set(part) else []
    if not beds:
        return [Measurement("alexnet", missing=rec.missing(claims.EMULATED_03, need),
                            chapter=claims.EMULATED_03)]
    rows = []
    for _name, cells, bed, column in beds:
        top = int(cells["workers"].max())
        vals = per_run(lambda c, k: c / (c + k), runs(cells, "comm_s", workers=top),
                       runs(cells, "compute_s", workers=top))
        links = str(cells["network"].iloc[0]) if "network" in cells else "unshaped"
        servers = (f", {int(cells['servers'].max())} server(s)" if "servers" in cells else "")
        note = ("" if links == IB else f"links {links}-like, not the paper's InfiniBand EDR; "
                "ddlstudy's PS, not TensorFlow's: the closest cells chapter 03 ran")
        rows.append(Measurement(
            f"alexnet: PS share of the step spent communicating at {top} workers{servers}, "
            f"{links}-like links", vals, chapter=claims.EMULATED_03, testbed=bed, column=column,
            note=note, source=rec.source(claims.EMULATED_03, f"emulated ({links}-like links, "
                                         "ddlstudy PS, compute replayed)")))
    return rows


def _ring_volume(rec: Records) -> list[Measurement]:
    """Chapter 03 (emulated section, today's testbed): per model, ring all-reduce bytes each
    worker sends per step at the top worker count / the bandwidth-optimal 2 (N-1)/N x gradient
    bytes (the bytes are counted by the code, so every run gives the same count)."""
    df = rec.table(claims.EMULATED_03, "summary")
    need = "allreduce at >= 2 workers with counted bytes_sent_per_step and params"
    cols = {"strategy", "workers", "bytes_sent_per_step", "params", "model"}
    part = df[(df["strategy"] == RING) & (df["workers"] > 1)] if cols <= set(df) else df[:0]
    part = dict(claims.by_testbed(part)).get("none", part[:0])
    if "bytes_source" in part:
        part = part[part["bytes_source"].astype(str) == "counted"]
    if part.empty:
        return [Measurement("ring bytes", missing=rec.missing(claims.EMULATED_03, need),
                            chapter=claims.EMULATED_03)]
    rows = []
    for model, cells in part.groupby("model"):
        top = int(cells["workers"].max())
        cells = cells[cells["workers"] == top]
        width = 2 if "dtype" in cells and "16" in str(cells["dtype"].iloc[0]) else 4
        optimal = 2 * (top - 1) / top * float(cells["params"].iloc[0]) * width
        vals = per_run(lambda s, o=optimal: s / o, runs(cells, "bytes_sent_per_step"))
        rows.append(Measurement(
            f"{model}: ring bytes sent per worker per step at {top} workers / "
            f"(2 ({top}-1)/{top} x gradient bytes)", vals, chapter=claims.EMULATED_03,
            exact="counted, exact", source=rec.source(
                claims.EMULATED_03, "counted by ddlstudy's ring all-reduce (the algorithm "
                "Horovod runs through NCCL), emulated links")))
    return rows


def _linear(model: str) -> Claim:
    name = PAPER_MODEL[model]
    return Claim(
        PAPER, f"malik_horovod_linear_{model}", f"{name} with Horovod scales almost linearly",
        "Throughput performance and latency performance is almost linear",
        SLIDE.format(name) + (" (chart 'Scalability of GoogleNet -- (images/sec. vs # of "
                              "GPU)')" if model == "googlenet" else ""),
        CONDITIONS + f"; {name}",
        f"{name}: Horovod images/sec at the top worker count / (N x at 1 worker), IB-EDR-like "
        "links (latency, 'completion time for one epoch' (slide 'Scalability Performance'), is "
        "the epoch's images over this throughput, so the one ratio tests both)",
        "equivalence", 1.0, 0.9, 1 / 0.9,
        "'almost linear' = scaling efficiency within 10 % of linear: [0.9, 1.11] (log-symmetric)",
        ((CH07, "summary"),), _efficiency(HOROVOD, model))


def _same_batch(model: str) -> Claim:
    name = PAPER_MODEL[model]
    return Claim(
        PAPER, f"malik_same_batch_{model}", f"{name}: every batch size performs the same",
        "All batch size shows same performance", SLIDE.format(name),
        CONDITIONS + f"; {name}, batch 64-512",
        f"{name}: images/sec at the largest batch / at the smallest (independent runs)",
        "equivalence", 1.0, 1 / 1.1, 1.1,
        "'same performance' = within 10 % either way: [0.909, 1.1] (TOST: a 2x change never "
        "agrees)", ((CH09, "malik"),), _batch(model))


PORTING = ("not measured: the study ports no single-GPU TensorFlow script; needs one such "
           "script (one of the paper's models) and its {what} version, and the count of lines "
           "changed (diff) over the script's lines")

CLAIMS = [
    _linear("alexnet"),
    _linear("googlenet"),
    _linear("resnet50"),
    Claim(PAPER, "malik_larger_batch_alexnet", "AlexNet: the largest batch is fastest",
          "larger batch size shows the best result", SLIDE.format("AlexNet"),
          CONDITIONS + "; AlexNet, batch 64-512",
          "AlexNet: images/sec at the largest batch / at the smallest (independent runs)",
          "direction", 1.0, *side(1.0),
          "'shows the best result' = the largest batch is faster: any ratio above 1 once the "
          "95 % interval excludes 1", ((CH09, "malik"),), _batch("alexnet")),
    _same_batch("googlenet"),
    _same_batch("resnet50"),
    Claim(PAPER, "malik_ps_poor_scalability", "TF parameter-server scalability is poor",
          "Single Master Server which takes care of the parameter averaging (gradient update) "
          "- The scalability in poor", PS_SLIDE + "; the second charts 'GoogleNet -- images/sec'",
          CONDITIONS + "; TensorFlow parameter-server APIs with one (master) server, GoogleNet "
          "charted",
          "TF PS (tf_ps_sync, one server) images/sec at the top worker count / (N x at 1 "
          "worker), IB-EDR-like links; GoogleNet where chapter 07 ran it, else the model it ran "
          "(ResNet-50), named in the row",
          "direction", 0.5, *side(0.5, "less"),
          "'poor', set against Horovod's 'almost linear' (>= 0.9): below half of linear "
          "(efficiency < 0.5)", ((CH07, "summary"),), _efficiency(TF_PS, None, "googlenet"),
          "less"),
    Claim(PAPER, "malik_alexnet_comm_bottleneck",
          "AlexNet on a PS: communication is the main bottleneck",
          "AlexNet has large number of parameters - Communication is the main bottleneck here",
          PS_SLIDE, CONDITIONS + "; AlexNet, TensorFlow parameter-server APIs, one (master) "
          "server",
          "AlexNet PS step: communication time / (communication + compute) at the top worker "
          "count, one server (chapter 03's emulated grid: the links it shaped, named in the row)",
          "direction", 0.5, *side(0.5),
          "'the main bottleneck' = communication takes most of the step: share above 0.5",
          ((claims.EMULATED_03, "summary"),), _comm_share),
    Claim(PAPER, "malik_ring_bandwidth_optimal",
          "ring all-reduce sends the bandwidth-optimal volume",
          "The algorithm is bandwidth-optimal - Each of N nodes communicates with two of its "
          "peers 2*(N-1) times. During this communication, a node sends and receives chunks of "
          "the data buffer", "slide 'Ring All_Reduce' (the second)",
          CONDITIONS + "; ring all-reduce as in Patarasuk and Yuan 2009, which Horovod runs "
          "through NCCL",
          "ring all-reduce bytes each worker sends per step at the top worker count / "
          "(2 (N-1)/N x gradient bytes), the lower bound: 2 (N-1) sends of 1/N of the buffer",
          "equivalence", 1.0, 0.99, 1 / 0.99,
          "'bandwidth-optimal' = the volume equals the 2 (N-1)/N bound: a counted ratio within "
          "1 % of 1 (header bytes aside), [0.99, 1.01]",
          ((claims.EMULATED_03, "summary"),), _ring_volume),
    Claim(PAPER, "malik_tf_ps_code_change_10pct",
          "porting TensorFlow code to parameter servers changes about 10 % of it",
          "One needs to change 10% of your code to make Tensorflow code workable across the "
          "nodes", "slide 'Writing Distributed Deep Learning Algorithms' (the second)",
          CONDITIONS + "; TensorFlow parameter-server model",
          "lines changed to make a single-GPU TensorFlow script run on TF parameter servers / "
          "the script's lines",
          "magnitude", 0.10, 0.10 * 0.9, 0.10 / 0.9,
          "a stated number, read as within 10 % of itself: [0.09, 0.111]",
          needs=PORTING.format(what="TensorFlow parameter-server")),
    Claim(PAPER, "malik_horovod_few_changes",
          "porting to Horovod needs fewer changes than to TF parameter servers",
          "One needs to make few changes to transfer single-GPU programs to distributed GPU "
          "programs", "slide 'Horovod Framework' (the second)",
          CONDITIONS + "; Horovod, set against the TF parameter-server port (slide 'Writing "
          "Distributed Deep Learning Algorithms': 10 % of the code)",
          "lines changed to port a single-GPU TensorFlow script to Horovod / lines changed to "
          "port it to TF parameter servers",
          "direction", 1.0, *side(1.0, "less"),
          "'few changes', set against the 10 % the PS port needs two slides before: fewer "
          "changed lines than the PS port (ratio below 1)",
          needs=PORTING.format(what="Horovod and its TensorFlow parameter-server"),
          direction="less"),
]

for _claim in CLAIMS:
    register_claim(_claim)
