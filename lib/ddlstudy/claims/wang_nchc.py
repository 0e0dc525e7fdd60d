"""Wang (NCHC), *Performance Evaluation of Distributed Deep Learning Frameworks in Cloud
Environment*: Distributed TensorFlow vs Horovod, ResNet-50 on ImageNet (Sec. IV, Figs 2-5).

The paper's synchronous "Distributed TensorFlow" is Ring-AllReduce with the Mirrored Strategy
(Sec. II: "Synchronous uses Ring-AllReduce algorithm [13] and asynchronous uses parameter server
architecture"; "we use Mirrored Strategy in the benchmark"), so its Horovod comparison is tested
against ddlstudy's `tf_allreduce` (TF MultiWorkerMirrored), never against TF parameter servers.
"""

from __future__ import annotations

from ddlstudy import claims
from ddlstudy.claims import Claim, Measurement, Records, per_run, register_claim, runs

PAPER = "Wang (NCHC)"
RESNET = ("ResNet-50, ImageNet (ILSVRC2012), TF CNN benchmark, GPU nodes with up to 8 GPUs, "
          "Docker/Singularity containers")
CH05, CH07 = "05_network_profiles", "07_frameworks"
HOROVOD = "horovod"
TF_MIRRORED = "tf_allreduce"  # the paper's synchronous Distributed TF (Mirrored Strategy)
IB = "IB-EDR"
GBE = "10GbE"
STATED = 0.10  # a stated number is read as within 10 % (relative) of itself


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
        a = runs(part, "images_per_sec", strategy=HOROVOD, workers=2)
        b = runs(part, "images_per_sec", strategy=TF_MIRRORED, workers=2)
        label = f"{profile}: Horovod / TF mirrored (ring) images/sec at 2 workers"
        if a.empty or b.empty:
            has = sorted(set(part["strategy"]))
            rows.append(Measurement(label, missing=rec.missing(CH07, need) + f" (has {has})",
                                    chapter=CH07))
            continue
        rows.append(Measurement(label, tuple(a), tuple(b), chapter=CH07,
                                source=rec.source(CH07, f"emulated {profile} links, compute "
                                                  "replayed, batch as in frameworks.batch_size")))
    return rows


def _efficiency(profile: str):  # noqa: ANN202 - returns a measure function
    def measure(rec: Records) -> list[Measurement]:
        """Chapter 05: ring scaling efficiency at its top worker count on `profile` links,
        images/sec at N / (N x at 1), per run."""
        df = rec.table(CH05, "summary")
        need = f"{profile} at 1 and >= 2 workers"
        if df.empty or "profile" not in df or profile not in set(df["profile"]):
            return [Measurement(profile, missing=rec.missing(CH05, need), chapter=CH05)]
        part = df[df["profile"] == profile]
        top = int(part["workers"].max())
        if top < 2:
            return [Measurement(profile, missing=rec.missing(CH05, need), chapter=CH05)]
        vals = per_run(lambda h, lo: h / (top * lo), runs(part, "images_per_sec", workers=top),
                       runs(part, "images_per_sec", workers=1))
        return [Measurement(f"{profile}-like links: ring efficiency at {top} workers (paper: 64 "
                            "GPUs)", vals, chapter=CH05, testbed=claims.TESTBED_EMULATED,
                            source=rec.source(CH05, "emulated (shaped links, H100 compute "
                                              "replayed); efficiency falls with N, so a "
                                              f"{top}-worker value bounds the 64-GPU one from "
                                              "above"))]
    return measure


def _profiles_ratio(rec: Records) -> list[Measurement]:
    from ddlstudy.network.profiles import PROFILES

    ratio = PROFILES[IB].rate_bps / PROFILES[GBE].rate_bps
    return [Measurement("IB-EDR / 10GbE link rate", fixed=(
        f"set by configuration: the emulated links' rates are the profiles' line rates "
        f"(network/profiles.py: {ratio:g}x) scaled down; no NetPIPE run on real InfiniBand"))]


def _speed_ratio(rec: Records) -> list[Measurement]:
    return [Measurement("IB-EDR / 10GbE images/sec", fixed=(
        "set by configuration: on emulated links both profiles are the same shaped link with "
        "compute stretched x1000 (IB-EDR) vs x100 (10GbE), so their throughput ratio is fixed "
        "by the two scales chosen; the paper's wording is also ambiguous (0.37x or 1.37x)"))]


def _magnitude(target: float) -> tuple[float, float, float]:
    return target, target * (1 - STATED), target * (1 + STATED)


CLAIMS = [
    Claim(PAPER, "wang_horovod_17pct",
          "Horovod 17 % faster than (synchronous, mirrored) Distributed TensorFlow at 2 nodes",
          "We benchmarked Distributed TensorFlow and Horovod on 2 nodes against the "
          "convolutional neural network benchmark for the ResNet-50 model [...] It shows the "
          "training performance of Horovod is 17% faster than Distributed TensorFlow.",
          "Sec. IV, Fig. 4", RESNET + "; 2 nodes, batch 128 and 256, Distributed TF = "
          "Ring-AllReduce / Mirrored Strategy (Sec. II)",
          "Horovod images/sec / TF MultiWorkerMirrored images/sec at 2 workers (independent "
          "runs of each)",
          "magnitude", 1.0, *_magnitude(1.17)[1:],
          "'17% faster' = 1.17, a stated number read as within 10 % of itself: [1.053, 1.287]",
          ((CH07, "summary"),), _horovod_vs_tf),
    Claim(PAPER, "wang_ib_89pct",
          "89 % scaling efficiency at 64 GPUs over InfiniBand",
          "With 64 GPUs, we achieved 89% scaling efficiency due to overheads over the "
          "InfiniBand network",
          "Sec. IV, Fig. 5", RESNET + "; 1-64 GPUs, InfiniBand (RDMA)",
          "ring scaling efficiency on IB-EDR-like links at the top worker count",
          "magnitude", 1.0, *_magnitude(0.89)[1:],
          "'89%' read as within 10 % of itself: [0.801, 0.979]; tested at the study's top "
          "worker count, not 64 (labelled)",
          ((CH05, "summary"),), _efficiency(IB)),
    Claim(PAPER, "wang_10gbe_65pct",
          "65 % scaling efficiency at 64 GPUs over 10 GbE",
          "but 65% scaling efficiency over 10b GbE",
          "Sec. IV, Fig. 5", RESNET + "; 1-64 GPUs, 10 GbE",
          "ring scaling efficiency on 10GbE-like links at the top worker count",
          "magnitude", 1.0, *_magnitude(0.65)[1:],
          "'65%' read as within 10 % of itself: [0.585, 0.715]; tested at the study's top "
          "worker count, not 64 (labelled)",
          ((CH05, "summary"),), _efficiency(GBE)),
    Claim(PAPER, "wang_netpipe_14x",
          "InfiniBand 14x the 10 GbE node-to-node bandwidth at 1000 KB",
          "the InfiniBand network is slightly better than 10 GbE network, which shows an "
          "average of 14 times faster than 10 GbE while the message size is 1000 Kbytes.",
          "Sec. IV, Fig. 2", "NetPIPE, two nodes (sender, receiver), InfiniBand vs 10 GbE",
          "IB-EDR / 10GbE point-to-point bandwidth at 1000 KB",
          "magnitude", 1.0, 14 * (1 - STATED), 14 * (1 + STATED),
          "'14 times' read as within 10 % of itself: [12.6, 15.4]",
          (), _profiles_ratio),
    Claim(PAPER, "wang_ib_speed_37pct",
          "training speed over InfiniBand vs over 10 GbE",
          "On other hand, the training speed over InfiniBand was about 37% as fast as over "
          "10 GbE.",
          "Sec. IV, Fig. 5", RESNET + "; 64 GPUs",
          "IB-EDR / 10GbE images/sec at the same worker count",
          "magnitude", 1.0, 1.37 * (1 - STATED), 1.37 * (1 + STATED),
          "'about 37%' read as 1.37x (37 % faster; the literal 0.37x contradicts Fig. 5), "
          "within 10 %",
          (), _speed_ratio),
    Claim(PAPER, "wang_singularity_10pct",
          "Singularity containers roughly 10 % faster than Docker",
          "The Singularity container runs roughly 10% faster than Docker either training with "
          "1 GPU or 8 GPUs per container.",
          "Sec. IV, Fig. 3", RESNET + "; 1 or 8 GPUs per container",
          "images/sec in Singularity / in Docker, same GPUs",
          "magnitude", 1.0, 1.0, 1.2,
          "'roughly 10%' = between no gain and 20 %: [1.0, 1.2]",
          needs="not measured: no chapter runs training inside containers (needs a GPU "
                "testbed with Docker and Singularity; no command measures it yet)"),
]

for _claim in CLAIMS:
    register_claim(_claim)
