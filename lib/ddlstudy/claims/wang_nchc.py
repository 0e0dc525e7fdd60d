"""Wang (NCHC), *Performance Evaluation of Distributed Deep Learning Frameworks in Cloud
Environment*: Distributed TensorFlow vs Horovod, ResNet-50 on ImageNet, on Taiwan 2 / TWCC
(Sec. III, Table I; Sec. IV, Figs 2-5).

The paper's synchronous "Distributed TensorFlow" is Ring-AllReduce with the Mirrored Strategy
(Sec. II: "Synchronous uses Ring-AllReduce algorithm [13] and asynchronous uses parameter server
architecture"; "we use Mirrored Strategy in the benchmark"), so its Horovod comparison is tested
against ddlstudy's `tf_allreduce` (TF MultiWorkerMirrored), never against TF parameter servers.

Scaling claims are tested twice where the records exist: on the paper's testbed emulated
(chapter 03's `wang_nchc_ib` / `wang_nchc_10gbe` grids: V100 compute replayed, 8 GPUs per node;
the reproduction column) and on today's H100 replay (chapter 05, one GPU per node; the update).
"""

from __future__ import annotations

import pandas as pd

from ddlstudy import claims
from ddlstudy.claims import Claim, Measurement, Records, per_run, register_claim, runs, side

PAPER = "Wang (NCHC)"
TAIWAN2 = ("Taiwan 2 / TWCC nodes: 8 x V100 SXM2 32 GB, 2 x Xeon Gold 6154, 4 x IB EDR 100 Gb/s "
           "HCAs (Table I)")
RESNET = (f"{TAIWAN2}; ResNet-50 on ImageNet (ILSVRC2012), TF CNN benchmark; 3 epochs of 64-128 "
          "batches, the first not timed")
CH05, CH07, CH03E = "05_network_profiles", "07_frameworks", claims.EMULATED_03
HOROVOD = "horovod"
TF_MIRRORED = "tf_allreduce"  # the paper's synchronous Distributed TF (Mirrored Strategy)
RING = "allreduce"
RATE = "images_per_sec"
IB = "IB-EDR"
GBE = "10GbE"
TESTBEDS = {IB: "wang_nchc_ib", GBE: "wang_nchc_10gbe"}  # the paper's testbeds, emulated
STATED = 0.10  # a stated number is read as within 10 % (relative) of itself
SRC05 = "emulated (shaped links, H100 compute replayed, one GPU per node)"
SRC03 = "emulated paper testbed (shaped links, V100 compute replayed, 8 GPUs per node)"
READS_SCALING = ((CH05, "summary"), (CH03E, "summary"))


def _cell(df: pd.DataFrame, **where: object) -> pd.Series:
    return runs(df, RATE, **where)


def _ch05(rec: Records, profile: str) -> tuple[pd.DataFrame, int, str]:
    """Chapter 05's ring cells on `profile` links, their top worker count, '' or what is missing."""
    df = rec.table(CH05, "summary")
    if df.empty or "profile" not in df or profile not in set(df["profile"]):
        return pd.DataFrame(), 0, rec.missing(CH05, f"{profile} at 1 and >= 2 workers")
    part = df[df["profile"] == profile]
    top = int(part["workers"].max())
    if top < 2 or 1 not in set(part["workers"]):
        return part, top, rec.missing(CH05, f"{profile} at 1 and >= 2 workers")
    return part, top, ""


def _ch03(rec: Records, profile: str) -> tuple[pd.DataFrame, int, str]:
    """Chapter 03's ring cells on the paper's testbed for `profile` (emulated), their top worker
    count, '' or what is missing."""
    name = TESTBEDS[profile]
    need = (f"the ring (allreduce) at 1 and >= 2 workers on testbed {name} (the committed "
            f"reference's 03_ps_vs_ring-testbed-{name}-resnet50)")
    df = rec.table(CH03E, "summary")
    if df.empty or "testbed" not in df or name not in set(df["testbed"].astype(str)):
        return pd.DataFrame(), 0, rec.missing(CH03E, need)
    part = df[(df["testbed"].astype(str) == name) & (df["strategy"] == RING)]
    if "model" in part:
        part = part[part["model"] == "resnet50"]
    top = int(part["workers"].max()) if len(part) else 0
    if top < 2 or 1 not in set(part["workers"]):
        return part, top, rec.missing(CH03E, need)
    return part, top, ""


def _nodes(part: pd.DataFrame, top: int) -> str:
    """' (K nodes x G GPUs)' for a testbed grid whose cells name their GPUs per node."""
    if "gpus_per_node" not in part or not part["gpus_per_node"].notna().any():
        return ""
    g = int(part["gpus_per_node"].dropna().iloc[0])
    return f" ({-(-top // g)} node(s) x {g} GPUs)" if g > 1 else ""


def _speedup(part: pd.DataFrame, top: int) -> pd.Series:
    """Per run: images/sec at `top` workers over at 1 (the 1-worker cell takes no link)."""
    hi, lo = _cell(part, workers=top), _cell(part, workers=1)
    common = hi.index.intersection(lo.index)
    return hi.loc[common] / lo.loc[common]


def _scaling(profile: str, per_worker: bool):  # noqa: ANN202 - returns a measure function
    """Ring efficiency (`per_worker`: speed-up / N) or speed-up at the top worker count on
    `profile` links: on the paper's testbed emulated, then on today's H100 replay."""
    what = "efficiency" if per_worker else "speed-up over 1 worker"

    def measure(rec: Records) -> list[Measurement]:
        rows = []
        for ch, pick, src, col in ((CH03E, _ch03, SRC03, claims.REPRODUCTION),
                                   (CH05, _ch05, SRC05, claims.UPDATE)):
            part, top, missing = pick(rec, profile)
            bed = (claims.emulated_testbed_label(TESTBEDS[profile]) if ch == CH03E
                   else claims.TESTBED_EMULATED)
            if missing:
                rows.append(Measurement(f"resnet50: {profile}", missing=missing, chapter=ch,
                                        testbed=bed))
                continue
            scale = top if per_worker else 1
            vals = per_run(lambda h, lo, s=scale: h / (s * lo), _cell(part, workers=top),
                           _cell(part, workers=1))
            where = ("; efficiency falls with N, so it bounds the 64-GPU value from above"
                     if per_worker else "")
            label = (f"resnet50: {profile}-like links, ring {what} at {top} workers"
                     f"{_nodes(part, top)} (paper: 64 GPUs)")
            rows.append(Measurement(label, vals, chapter=ch, testbed=bed, column=col,
                                    source=rec.source(ch, src + where)))
        return rows
    return measure


def _speed_ratio(rec: Records) -> list[Measurement]:
    """IB / 10GbE training speed at the same worker count, per run: each profile's speed-up over
    its own 1-worker cell (the same GPU's speed on both, no link), so the emulator's time
    dilation of each profile cancels."""
    rows = []
    for ch, pick, src, col in ((CH03E, _ch03, SRC03, claims.REPRODUCTION),
                               (CH05, _ch05, SRC05, claims.UPDATE)):
        (ib, _, ib_miss), (ge, _, ge_miss) = pick(rec, IB), pick(rec, GBE)
        bed = ("emulated testbeds wang_nchc_ib and wang_nchc_10gbe: V100 replayed, 8 GPUs per "
               "node" if ch == CH03E else claims.TESTBED_EMULATED)
        common = sorted((set(ib["workers"]) & set(ge["workers"])) - {1}) if not (
            ib_miss or ge_miss) else []
        if not common:
            why = ib_miss or ge_miss or rec.missing(ch, "IB-EDR and 10GbE at a common worker "
                                                        "count >= 2 and at 1 worker")
            rows.append(Measurement("resnet50: IB-EDR / 10GbE", missing=why, chapter=ch,
                                    testbed=bed))
            continue
        top = int(common[-1])
        vals = per_run(lambda a, b: a / b, _speedup(ib, top), _speedup(ge, top))
        rows.append(Measurement(f"resnet50: IB-EDR / 10GbE images/sec at {top} workers"
                                f"{_nodes(ib, top)}, each over its own 1-worker cell (paper: "
                                "64 GPUs)", vals, chapter=ch,
                                testbed=bed, column=col, source=rec.source(ch, src)))
    return rows


def _horovod_vs_tf(rec: Records) -> list[Measurement]:
    """Chapter 07, per profile: Horovod images/sec / tf_allreduce images/sec at 2 workers
    (the paper's 2 nodes), two independent groups of runs."""
    df = rec.table(CH07, "summary")
    need = (f"{HOROVOD} and {TF_MIRRORED} (TF MultiWorkerMirrored, the paper's synchronous "
            "Distributed TF) at 2 workers in frameworks.strategies / frameworks.workers")
    if df.empty or "strategy" not in df:
        return [Measurement("2 workers", missing=rec.missing(CH07, need), chapter=CH07)]
    rows = []
    for profile, part in df.groupby("profile"):
        a = runs(part, RATE, strategy=HOROVOD, workers=2)
        b = runs(part, RATE, strategy=TF_MIRRORED, workers=2)
        batch = (f"batch {part['batch_size'].dropna().iloc[0]:g} per worker"
                 if "batch_size" in part and part["batch_size"].notna().any() else "batch ?")
        label = (f"{profile}: Horovod / TF mirrored (ring) images/sec at 2 workers, one GPU "
                 f"each (paper: 2 nodes), {batch} (paper: 128 and 256)")
        if a.empty or b.empty:
            has = sorted(set(part["strategy"]))
            rows.append(Measurement(label, missing=rec.missing(CH07, need) + f" (has {has})",
                                    chapter=CH07))
            continue
        rows.append(Measurement(label, tuple(a), tuple(b), chapter=CH07,
                                source=rec.source(CH07, f"emulated {profile} links, compute "
                                                  "replayed, batch as in frameworks.batch_size")))
    return rows


def _at_two_nodes(part: pd.DataFrame, top: int) -> int:
    """The worker count of 2 nodes (2 x the grid's GPUs per node) where the grid ran it, else
    its top count (the closest it has; the row names the nodes either way)."""
    g = 1
    if "gpus_per_node" in part and part["gpus_per_node"].notna().any():
        g = int(part["gpus_per_node"].dropna().iloc[0])
    return 2 * g if 2 * g in set(part["workers"].astype(int)) else top


def _comm_bound(rec: Records) -> list[Measurement]:
    """Exposed communication per step (comm_wait_s) / compute per step (compute_s), per run:
    on the paper's testbed emulated at its 2 nodes (else the grid's top count), and in
    chapter 07 for Horovod and TF mirrored at 2 workers per profile."""
    rows = []
    cols = {"comm_wait_s", "compute_s"}
    for profile in (IB, GBE):
        part, top, missing = _ch03(rec, profile)
        bed = claims.emulated_testbed_label(TESTBEDS[profile])
        if missing or not cols <= set(part):
            rows.append(Measurement(f"resnet50: {profile}", missing=missing or rec.missing(
                CH03E, "comm_wait_s and compute_s"), chapter=CH03E, testbed=bed))
            continue
        at = _at_two_nodes(part, top)
        vals = per_run(lambda c, k: c / k, runs(part, "comm_wait_s", workers=at),
                       runs(part, "compute_s", workers=at))
        label = (f"resnet50: ring at {at} workers{_nodes(part, at)} on {profile}-like links "
                 "(paper: 2 nodes)")
        rows.append(Measurement(label, vals, chapter=CH03E, testbed=bed,
                                column=claims.REPRODUCTION, source=rec.source(CH03E, SRC03)))
    df = rec.table(CH07, "summary")
    need = f"{HOROVOD} / {TF_MIRRORED} at 2 workers with comm_wait_s and compute_s"
    if df.empty or not {"strategy", "profile"} | cols <= set(df):
        return [*rows, Measurement("2 workers", missing=rec.missing(CH07, need), chapter=CH07)]
    for (profile, strategy), part in df[df["strategy"].isin([HOROVOD, TF_MIRRORED])].groupby(
            ["profile", "strategy"]):
        vals = per_run(lambda c, k: c / k, runs(part, "comm_wait_s", workers=2),
                       runs(part, "compute_s", workers=2))
        label = f"resnet50: {strategy} at 2 workers on {profile}-like links, one GPU each"
        rows.append(Measurement(label, vals, chapter=CH07, column=claims.UPDATE,
                                missing="" if vals else rec.missing(CH07, need),
                                source=rec.source(CH07, SRC05)))
    return rows


def _profiles_ratio(rec: Records) -> list[Measurement]:
    from ddlstudy.network.profiles import PROFILES

    ratio = PROFILES[IB].rate_bps / PROFILES[GBE].rate_bps
    return [Measurement("IB-EDR / 10GbE link rate", fixed=(
        f"set by configuration: the emulated links' rates are the profiles' line rates "
        f"(network/profiles.py: {ratio:g}x) scaled down; no NetPIPE run on real InfiniBand"))]


def _magnitude(target: float) -> tuple[float, float]:
    return target * (1 - STATED), target * (1 + STATED)


FIG5 = "Sec. IV, Fig. 5"
FIG5_COND = RESNET + "; 1-64 GPUs (8 nodes of 8), framework not stated"
CLAIMS = [
    Claim(PAPER, "wang_horovod_17pct",
          "Horovod 17 % faster than (synchronous, mirrored) Distributed TensorFlow at 2 nodes",
          "We benchmarked Distributed TensorFlow and Horovod on 2 nodes against the "
          "convolutional neural network benchmark for the ResNet-50 model [...] It shows the "
          "training performance of Horovod is 17% faster than Distributed TensorFlow.",
          "Sec. IV, Fig. 4", RESNET + "; 2 nodes (GPUs per node and network not stated), batch "
          "128 (default) and 256, Distributed TF = Ring-AllReduce / Mirrored Strategy (Sec. II)",
          "Horovod images/sec / TF MultiWorkerMirrored images/sec at 2 workers (independent "
          "runs of each)",
          "magnitude", 1.0, *_magnitude(1.17),
          "'17% faster' = 1.17, a stated number read as within 10 % of itself: [1.053, 1.287]",
          ((CH07, "summary"),), _horovod_vs_tf),
    Claim(PAPER, "wang_resnet_comm_bound",
          "at 2 nodes ResNet-50 training is communication bound (the critical path)",
          "This can be explained by ResNet's high number of model parameters, caused by the use "
          "of fully connected layers combined with its small number of layers. These "
          "characteristics shifted the critical path from GPU computation to communication and "
          "created a networking bottleneck.",
          "Sec. IV, Fig. 4", RESNET + "; 2 nodes, Distributed TF and Horovod",
          "exposed communication per step (the wait after backward) / compute per step, per "
          "run, at 2 nodes",
          "direction", 1.0, *side(1.0),
          "'shifted the critical path from GPU computation to communication' = the step waits "
          "on communication longer than it computes: a ratio above 1 once the 95 % interval "
          "excludes 1 (no size stated)",
          ((CH03E, "summary"), (CH07, "summary")), _comm_bound),
    Claim(PAPER, "wang_ib_89pct",
          "89 % scaling efficiency at 64 GPUs over InfiniBand",
          "With 64 GPUs, we achieved 89% scaling efficiency due to overheads over the "
          "InfiniBand network",
          FIG5, FIG5_COND + "; InfiniBand EDR (RDMA)",
          "ring scaling efficiency on IB-EDR-like links at the top worker count: images/sec at "
          "N / (N x at 1 worker), per run",
          "magnitude", 1.0, *_magnitude(0.89),
          "'89%' read as within 10 % of itself: [0.801, 0.979]; tested at the study's top "
          "worker count, not 64 (labelled)",
          READS_SCALING, _scaling(IB, per_worker=True)),
    Claim(PAPER, "wang_ib_almost_linear",
          "InfiniBand scaling almost linear from 1 to 64 GPUs",
          "The efficiency of InfiniBand has achieved almost linear scaling from 1 to 64 GPUs",
          FIG5, FIG5_COND + "; InfiniBand EDR (RDMA)",
          "ring scaling efficiency on IB-EDR-like links at the top worker count, per run",
          "equivalence", 1.0, 0.85, 1 / 0.85,
          "'almost linear' for what the paper measured as 89 %: efficiency within 15 % of 1 "
          "([0.85, 1.18], symmetric on the log scale), so that 0.89 is inside; tested at the "
          "study's top worker count, not 64 (labelled)",
          READS_SCALING, _scaling(IB, per_worker=True)),
    Claim(PAPER, "wang_10gbe_65pct",
          "65 % scaling efficiency at 64 GPUs over 10 GbE",
          "but 65% scaling efficiency over 10b GbE",
          FIG5, FIG5_COND + "; 10 GbE",
          "ring scaling efficiency on 10GbE-like links at the top worker count: images/sec at "
          "N / (N x at 1 worker), per run",
          "magnitude", 1.0, *_magnitude(0.65),
          "'65%' read as within 10 % of itself: [0.585, 0.715]; tested at the study's top "
          "worker count, not 64 (labelled)",
          READS_SCALING, _scaling(GBE, per_worker=True)),
    Claim(PAPER, "wang_10gbe_slight_speedup",
          "10 GbE gives only a slight speed-up from 1 to 64 GPUs",
          "while 10 GbE has only a slight speedup.",
          FIG5, FIG5_COND + "; 10 GbE",
          "speed-up on 10GbE-like links: images/sec at the top worker count / at 1 worker, per "
          "run",
          "magnitude", 1.0, 1.0, 1.5,
          "'only a slight speedup' = faster than 1 GPU by under half: [1.0, 1.5]. The same "
          "paragraph's 65 % efficiency at 64 GPUs is a 41.6x speed-up, so the paper contradicts "
          "itself; the sentence is tested as written, at the study's top worker count",
          READS_SCALING, _scaling(GBE, per_worker=False)),
    Claim(PAPER, "wang_ib_speed_37pct",
          "training over InfiniBand 37 % faster than over 10 GbE",
          "On other hand, the training speed over InfiniBand was about 37% as fast as over "
          "10 GbE.",
          FIG5, FIG5_COND + "; InfiniBand vs 10 GbE at the same GPU count",
          "IB-EDR / 10GbE images/sec at the same worker count, each over its own 1-worker cell "
          "(the 1-GPU speed needs no link, so it is the same on both), per run",
          "magnitude", 1.0, *_magnitude(1.37),
          "'about 37%' read as 1.37x (37 % faster): the paper's own 89 % / 65 % efficiencies at "
          "64 GPUs give 0.89 / 0.65 = 1.37, and the literal 0.37x contradicts Fig. 5; within "
          "10 %: [1.233, 1.507]; tested at the study's top common worker count (labelled)",
          READS_SCALING, _speed_ratio),
    Claim(PAPER, "wang_netpipe_14x",
          "InfiniBand 14x the 10 GbE node-to-node bandwidth at 1000 KB",
          "the InfiniBand network is slightly better than 10 GbE network, which shows an "
          "average of 14 times faster than 10 GbE while the message size is 1000 Kbytes.",
          "Sec. IV, Fig. 2", "NetPIPE, two Taiwan 2 nodes (sender, receiver), InfiniBand EDR "
          "(4 x 100 Gb/s HCAs per node) vs 10 GbE",
          "IB-EDR / 10GbE point-to-point bandwidth at 1000 KB",
          "magnitude", 1.0, *_magnitude(14),
          "'14 times' read as within 10 % of itself: [12.6, 15.4] ('slightly better' in the "
          "same sentence is not a number and is not tested)",
          (), _profiles_ratio),
    Claim(PAPER, "wang_rdma_gain",
          "InfiniBand training gains efficiency from RDMA",
          "This benchmark demonstrates that training over InfiniBand network scales well and "
          "experience a significant efficiency gain when using RDMA (Remote Direct Memory "
          "Access) protocol.",
          FIG5, FIG5_COND + "; InfiniBand with RDMA",
          "scaling efficiency over InfiniBand with RDMA / without it (IPoIB, TCP), same GPUs",
          "direction", 1.0, *side(1.0),
          "'a significant efficiency gain' with no size: any ratio above 1 once the 95 % "
          "interval excludes 1",
          needs="not measured: the emulator shapes TCP over veth links and has no RDMA; needs "
                "InfiniBand nodes running the same ResNet-50 scaling with RDMA on (verbs / "
                "GPUDirect) and off (IPoIB)"),
    Claim(PAPER, "wang_singularity_10pct",
          "Singularity containers roughly 10 % faster than Docker",
          "The Singularity container runs roughly 10% faster than Docker either training with "
          "1 GPU or 8 GPUs per container.",
          "Sec. IV, Fig. 3", RESNET + "; 1 or 8 GPUs per container; mean epoch time over runs "
          "and epochs",
          "Docker epoch time / Singularity epoch time, same GPUs",
          "magnitude", 1.0, 1.0, 1.2,
          "'roughly 10%' = between no gain and 20 %: [1.0, 1.2]",
          needs="not measured: no chapter runs training inside containers (needs a GPU "
                "testbed with Docker and Singularity; no command measures it yet)"),
]

for _claim in CLAIMS:
    register_claim(_claim)
