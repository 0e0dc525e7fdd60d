"""Shi 2019 (MSc thesis, UIUC, "Comparison of Distributed Training Architecture for
Convolutional Neural Network in Cloud"): Parameter Server vs Ring All-Reduce on Google Cloud
Platform, one NVIDIA K80 GPU per node, CIFAR-10, mini-batch 32 per worker, 1-6 workers (Ch. 3).
The results are figures only (Figs 4.1-4.22, 5.1: no number in the text); the claims are the
thesis's own sentences: the abstract and Ch. 5 (Conclusion, from p. 30). Ch. 4 describes its
figures without stating a finding.

Scaling claims are tested on each strategy's own scaling (its N-worker cells over its own
smaller cells), never as a ratio of two strategies' speed-ups with unequal 1-worker baselines.
Chapter 03's emulated section is read on the paper's testbed (`shi2019`, K80 compute on 2 Gb/s
links: the reproduction) and on today's H100 replay (the update); another paper's testbed grid
(Wang's 8-GPU V100 nodes at 16 workers) is not Shi's condition and is skipped. Traffic claims
are read as the thesis's figures show traffic, a rate over time (GCP's packets per node), from
the bytes counted on the wire per step times the steps per second.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import pandas as pd

from ddlstudy import claims
from ddlstudy.claims import (
    Claim,
    Measurement,
    Records,
    per_run,
    ratio_of_runs,
    register_claim,
    runs,
    side,
    values,
)

PAPER = "Shi 2019"
CONDITIONS = ("Google Cloud Platform, an 8-node cluster, each node one Intel Xeon E5 virtual CPU, "
              "one NVIDIA K80 GPU, 3.75 GB memory, 10 GB disk, Ubuntu 16.04 (Sec. 3.3); Python "
              "2.7, CUDA 10.0, cuDNN 7.4.1.5, TensorFlow 1.12 (Sec. 3.3); PS: tf.train."
              "ClusterSpec, between-graph replication, a Parameter Server node beside the "
              "workers (Sec. 3.4, Figs 4.5-4.13), synchronous or asynchronous updates not "
              "stated; ring: TensorFlow's CollectiveAllReduceStrategy (Sec. 3.4); AlexNet, "
              "VGG16, VGG19, ResNet50, ResNet152 on CIFAR-10, mini-batch 32 per worker, SGD, "
              "learning rate 0.0001, 1 to 6 worker nodes (Table 3.2; Table 3.3: 2, 4, 6); "
              "network rate and zones not stated (Ch. 5: 'might be variously related to "
              "assigned accessed regions and bandwidths')")
TRAFFIC = (CONDITIONS + "; traffic: packets sent and received per node over time, from GCP's "
           "monitoring (Sec. 3.5, 4.3)")
CH03 = "03_ps_vs_ring"
CH07 = "07_frameworks"
READS_03 = ((CH03, "summary"), (claims.EMULATED_03, "summary"))
READS_TRAFFIC = (*READS_03, (CH07, "summary"))
RATE = "images_per_sec"
RING = "allreduce"
PS = "ps_sync"
SRC07 = "emulated; bytes counted on the wire (chapter 07)"


def _testbed_label(name: str, models: Iterable[str] = ()) -> tuple[str, str]:
    """(testbed label, column) of an emulated chapter 03 grid of `models` run on testbed
    `name` ('none': the study's own H100 replay, today's device: the update; '' column:
    another paper's)."""
    if name in ("", "none", "nan"):
        return claims.TESTBED_EMULATED, claims.UPDATE
    from ddlstudy.testbeds import catalog

    if name not in catalog.names():
        return name, ""  # not in the catalog: no paper to place it under
    tb = catalog.testbed(name)
    column = (claims.REPRODUCTION if tb.paper == PAPER
              else claims.UPDATE if tb.paper == "today" else "")
    return claims.emulated_testbed_label(name, models), column


def _by_label(name: str, part: pd.DataFrame) -> list[tuple[str, str, pd.DataFrame]]:
    """(label, column, rows) of testbed `name`'s cells, one group per distinct label: a model
    whose compute row is converted gets its own, so only its rows say so (every row is drawn
    from one model's cells)."""
    if "model" not in part or part.empty:
        return [(*_testbed_label(name), part)]
    labels = {m: _testbed_label(name, [str(m)]) for m in part["model"].unique()}
    return [(bed, col, part[part["model"].map(lambda m, b=bed: labels[m][0] == b)])
            for bed, col in dict.fromkeys(labels.values())]


def _sections(rec: Records) -> list[tuple[str, pd.DataFrame, str, str, str]]:
    """(chapter, summary, source, testbed, column) of chapter 03's one-host section and of its
    emulated section, one per testbed its cells ran on (column `testbed`; cells without it ran
    the study's own settings: an H100 replayed, today's device). Only Shi's testbed and today's
    are kept: another paper's testbed grid is not the thesis's condition."""
    out = [(CH03, rec.table(CH03, "summary"), "measured on one host (workers share its cores)",
            claims.TESTBED_HOST, "")]
    df = rec.table(claims.EMULATED_03, "summary")
    src = "emulated (shaped links, replayed compute)"
    if df.empty or "testbed" not in df:
        return [*out, (claims.EMULATED_03, df, src, claims.TESTBED_EMULATED,
                       claims.UPDATE if not df.empty else "")]
    for name, whole in claims.by_testbed(df):
        for bed, column, part in _by_label(name, whole):
            if column:
                out.append((claims.EMULATED_03, part, src, bed, column))
    return out


def _ratio(part: pd.DataFrame, strategy: str, workers: int) -> tuple[str, float] | None:
    """Compute / communication seconds per step of `strategy` at `workers` (medians over runs):
    the ratio that sets whether adding workers pays on this testbed."""
    cell = part[(part["strategy"] == strategy) & (part["workers"] == workers)]
    if cell.empty or not {"compute_s", "comm_s"} <= set(cell):
        return None
    comp, comm = float(cell["compute_s"].median()), float(cell["comm_s"].median())
    if not comm > 0:
        return None
    return (f"{strategy} compute / communication per step at {workers} workers", comp / comm)


def _scaling(rec: Records, strategy: str, lo_of: str) -> list[Measurement]:
    """Per model and section: images/sec at the top worker count over `lo_of` ('1': the
    1-worker cell times N; 'half': the cell at half the top count), one value per run."""
    rows = []
    for ch, df, src, bed, col in _sections(rec):
        need = (f"{strategy} at 1 worker and at >= 2 workers" if lo_of == "1" else
                f"{strategy} at the top worker count (>= 2) and at half of it")
        if df.empty or not {"strategy", "workers", RATE} <= set(df):
            rows.append(Measurement(f"{ch}", missing=rec.missing(ch, need), chapter=ch,
                                    testbed=bed))
            continue
        for model, part in df[df["strategy"] == strategy].groupby("model"):
            top = int(part["workers"].max())
            lo = 1 if lo_of == "1" else max(1, top // 2)
            counts = set(part["workers"])
            if top < 2 or lo not in counts or lo == top:
                rows.append(Measurement(f"{model}", missing=rec.missing(ch, need), chapter=ch,
                                        testbed=bed))
                continue
            hi_r = runs(part, RATE, workers=top)
            lo_r = runs(part, RATE, workers=lo)
            scale = top / lo if lo_of == "1" else 1.0
            got = ratio_of_runs(hi_r, lo_r, scale)
            label = (f"{model}: {strategy} images/sec at {top} workers / ({top} x at 1)"
                     if lo_of == "1" else
                     f"{model}: {strategy} images/sec at {top} workers / at {lo}")
            rows.append(Measurement(label, **got, source=rec.source(ch, src), testbed=bed,
                                    chapter=ch, column=col, ratio=_ratio(part, strategy, top)))
    return rows


def _levels_off(rec: Records) -> list[Measurement]:
    return _scaling(rec, PS, "half")


def _proportional(rec: Records) -> list[Measurement]:
    return _scaling(rec, RING, "1")


def _not_proportional(rec: Records) -> list[Measurement]:
    """Both architectures' scaling efficiency (the abstract's sentence is about distributed
    training, not one architecture): PS rows, then ring rows."""
    return _scaling(rec, PS, "1") + _scaling(rec, RING, "1")


def _ring_scales_better(rec: Records) -> list[Measurement]:
    """Per model: (ring top / ring half-top) / (PS top / PS half-top), per run; both baselines
    are cells where the strategy communicates (>= 2 workers at 4-6)."""
    rows = []
    for ch, df, src, bed, col in _sections(rec):
        need = "ps_sync and allreduce at the top and half the top worker count (>= 2)"
        if df.empty or not {"strategy", "workers", RATE} <= set(df):
            rows.append(Measurement(ch, missing=rec.missing(ch, need), chapter=ch, testbed=bed))
            continue
        for model, part in df.groupby("model"):
            top = int(part["workers"].max())
            half = top // 2
            cells = [runs(part, RATE, strategy=s, workers=w)
                     for s in (RING, PS) for w in (top, half)]
            if half < 2 or any(c.empty for c in cells):
                rows.append(Measurement(model, missing=rec.missing(ch, need), chapter=ch,
                                        testbed=bed))
                continue
            vals = per_run(lambda rt, rh, pt, ph: (rt / rh) / (pt / ph), *cells)
            rows.append(Measurement(f"{model}: ring gain {half}->{top} workers / PS gain "
                                    f"{half}->{top}", vals, source=rec.source(ch, src),
                                    testbed=bed, chapter=ch, column=col,
                                    ratio=_ratio(part, RING, top)))
    return rows


SERVER = ("wire_server_bytes_sent_per_step", "wire_server_bytes_recv_per_step")
WORKER = ("wire_bytes_sent_per_step", "wire_bytes_recv_per_step")


def _per_second(part: pd.DataFrame, cols: tuple[str, ...], n: int,
                rate: str = RATE) -> pd.Series:
    """Bytes sent + received per second of training at `n` workers, per run: the bytes
    counted on the wire per step times the steps per second (images/sec over n x batch).
    `rate`: the images/sec column (RATE: the host's seconds; images_per_sec_cluster: the
    emulated cluster's, comparable across link scales)."""
    per_step = [runs(part, c, workers=n) for c in cols]
    if any(b.empty for b in per_step):
        return pd.Series(dtype=float)
    batch = float(part["batch_size"].iloc[0]) if "batch_size" in part else 1.0
    steps = runs(part, rate, workers=n) / (n * batch)
    total = per_step[0]
    for b in per_step[1:]:
        total = total.add(b, fill_value=math.nan)
    return (total * steps).dropna()


def _traffic_rows(groups: list[tuple[str, pd.DataFrame]], strategy: str, server: bool,
                  where: dict) -> list[Measurement]:
    """Per subject (a model, a profile): the PS server's (`server`) or one ring worker's bytes
    sent + received per second at the top worker count over at half of it (else the lowest
    count >= 2, the thesis's smallest setup): for the server divided by the count ratio
    (1 = proportional), for a ring worker as it is (1 = constant). `where`: the Measurement's
    chapter, source, testbed, column and the section's summary (for the ratio)."""
    cols = SERVER if server else WORKER
    ch = where["chapter"]
    rows = []
    for subject, part in groups:
        part = part[part["strategy"] == strategy]
        counts = sorted(int(n) for n in part["workers"].unique()) if "workers" in part else []
        top = counts[-1] if counts else 0
        lower = [n for n in counts if 2 <= n < top]
        need = (f"{strategy} at two worker counts >= 2 with wire byte counts "
                f"({' and '.join(cols)})")
        if not lower or not set(cols) <= set(part) or part[list(cols)].isna().all().any():
            rows.append(Measurement(str(subject), missing=where["missing"](need), chapter=ch,
                                    testbed=where["testbed"]))
            continue
        lo = top // 2 if top // 2 in lower else lower[0]
        scale = top / lo if server else 1.0
        vals = per_run(lambda h, low, s=scale: h / (s * low), _per_second(part, cols, top),
                       _per_second(part, cols, lo))
        whose = "server" if server else "per-worker"
        label = (f"{subject}: {strategy} {whose} bytes sent + received per second at {top} "
                 "workers / " + (f"({top}/{lo} x at {lo})" if server else f"at {lo}"))
        ratio = _ratio(part, strategy, top) if ch != CH07 else None
        rows.append(Measurement(label, vals, source=where["source"], chapter=ch,
                                testbed=where["testbed"], column=where["column"],
                                ratio=ratio))
    return rows


def _traffic(rec: Records, server: bool) -> list[Measurement]:
    """Chapter 03 (per section: Shi's K80 testbed, today's H100 replay; the study's own PS and
    ring, per model) and chapter 07 (TensorFlow's PS and Horovod, per link profile)."""
    rows = []
    strategy = PS if server else RING
    for ch, df, src, bed, col in _sections(rec):
        if df.empty or not {"strategy", "workers", "model", RATE} <= set(df):
            need = f"{strategy} at two worker counts >= 2 with wire byte counts"
            rows.append(Measurement(ch, missing=rec.missing(ch, need), chapter=ch, testbed=bed))
            continue
        where = {"chapter": ch, "source": rec.source(ch, src + "; bytes counted on the wire"),
                 "testbed": bed, "column": col,
                 "missing": lambda need, ch=ch: rec.missing(ch, need)}
        rows += _traffic_rows(list(df.groupby("model")), strategy, server, where)
    df = rec.table(CH07, "summary")
    fw = "tf_ps_sync" if server else "horovod"
    if df.empty or not {"strategy", "workers", "profile", RATE} <= set(df):
        rows.append(Measurement(fw, missing=rec.missing(CH07, f"{fw} at two worker counts >= 2 "
                                                       "with wire byte counts"), chapter=CH07))
        return rows
    where = {"chapter": CH07, "source": rec.source(CH07, SRC07), "testbed": claims.TESTBED_EMULATED,
             "column": "", "missing": lambda need: rec.missing(CH07, need)}
    return rows + _traffic_rows(list(df.groupby("profile")), fw, server, where)


def _ps_traffic(rec: Records) -> list[Measurement]:
    return _traffic(rec, server=True)


def _ring_traffic(rec: Records) -> list[Measurement]:
    return _traffic(rec, server=False)


def _shaped_bytes_per_s(network: str, scale: float) -> float:
    """Bytes per second (the host's time) the emulator shaped one node's link to: the link
    profile's rate (a catalog testbed's own profile where the cell ran on one) x the cell's
    scale; NaN where the cell had no shaped link."""
    from ddlstudy.network.profiles import PROFILES
    from ddlstudy.testbeds import catalog, emulation

    profile = emulation.profile_for(network) if network in catalog.names() else network
    if profile not in PROFILES or not scale > 0:
        return math.nan
    return PROFILES[profile].rate_bps * scale / 8


LINK_COLS = ("wire_bytes_sent_per_step", "comm_s", "network", "network_scale")


def _full_bandwidth(rec: Records) -> list[Measurement]:
    """Per model and emulated section: one ring worker's wire bytes sent per step / (its
    communication seconds x its shaped link rate) at the top worker count, per run. Flat rings
    of one GPU per node only (a hierarchical ring's node link is shared by its GPUs); the
    one-host section has no shaped link to compare with."""
    need = ("allreduce at >= 2 workers on shaped links with " + ", ".join(LINK_COLS)
            + " (chapter 03's emulated grid)")
    rows = []
    for ch, df, src, bed, col in _sections(rec):
        if ch != claims.EMULATED_03:
            continue
        if df.empty or not {"strategy", "workers", "model", *LINK_COLS} <= set(df):
            rows.append(Measurement(ch, missing=rec.missing(ch, need), chapter=ch, testbed=bed))
            continue
        ring = df[(df["strategy"] == RING) & (df["workers"] >= 2)]
        if "gpus_per_node" in ring:
            ring = ring[ring["gpus_per_node"].fillna(1).astype(float) <= 1]
        for model, part in ring.groupby("model"):
            top = int(part["workers"].max())
            rate = [_shaped_bytes_per_s(str(n), float(x))
                    for n, x in zip(part["network"], part["network_scale"], strict=True)]
            part = part.assign(link_use=part["wire_bytes_sent_per_step"]
                               / (part["comm_s"] * pd.Series(rate, index=part.index)))
            vals = values(runs(part, "link_use", workers=top))
            label = (f"{model}: ring wire bytes sent per step / (communication seconds x shaped "
                     f"link rate) at {top} workers")
            if not vals:
                rows.append(Measurement(label, missing=rec.missing(ch, need), chapter=ch,
                                        testbed=bed))
                continue
            rows.append(Measurement(label, vals, source=rec.source(
                ch, src + "; bytes counted on the wire"), testbed=bed, chapter=ch, column=col,
                ratio=_ratio(part, RING, top)))
    return rows or [Measurement(claims.EMULATED_03, missing=rec.missing(claims.EMULATED_03, need),
                                chapter=claims.EMULATED_03)]


CLUSTER_RATE = "images_per_sec_cluster"
LINKS_CMD = ("python -m ddlstudy.report --params params/default.yaml --params "
             "params/reference.yaml --params params/reference-shi.yaml --params "
             "params/reference-shi-links.yaml --out DIR, then add-runs into "
             "results/reference/03_ps_vs_ring-testbed-shi2019_10g-resnet50")


def _link_only_pairs() -> list[tuple[str, str]]:
    """(what-if, base) testbeds of the catalog that change only Shi's testbed's links."""
    from ddlstudy.testbeds import catalog

    return [(t.name, str(t.base)) for t in catalog.testbeds("what-if")
            if t.base in catalog.names() and catalog.testbed(t.base).paper == PAPER
            and set((t.raw.get("what_if") or {}).get("changes", [])) == {"inter_node"}]


def _gbps(testbed: str) -> float:
    """The link rate (Gb/s) the emulator shapes for a catalog testbed's nodes."""
    from ddlstudy.network.profiles import PROFILES
    from ddlstudy.testbeds import emulation

    return PROFILES[emulation.profile_for(testbed)].rate_bps / 1e9


def _links_bed(base: str, what_if: str, models: list[str] | None = None) -> str:
    """A links-only row's testbed: the base's label, and what the what-if changed."""
    return (f"{claims.emulated_testbed_label(base, models)}; what-if {what_if}: the same with "
            f"{_gbps(what_if):g} Gb/s links instead of {_gbps(base):g}")


def _links_only(rec: Records) -> list[Measurement]:
    """Per model and what-if testbed that changes only the links of Shi's testbed: one ring
    worker's wire bytes sent + received per second of training (the emulated cluster's
    seconds, so two link scales compare) on the what-if / on Shi's testbed, at the top worker
    count (>= 2) both ran; the two sides are independent groups of runs."""
    ch = claims.EMULATED_03
    need = f"allreduce on testbed shi2019 and on its links-only what-if ({LINKS_CMD})"
    df = rec.table(ch, "summary")
    cols = {"strategy", "workers", "model", "testbed", "batch_size", CLUSTER_RATE, *WORKER}
    pairs = _link_only_pairs()
    if df.empty or not cols <= set(df) or not pairs:
        return [Measurement(ch, missing=rec.missing(ch, need), chapter=ch)]
    ring = df[df["strategy"] == RING]
    rows = []
    for what_if, base in pairs:
        fast, slow = (_gbps(n) for n in (what_if, base))
        if not (ring["testbed"] == what_if).any():
            rows.append(Measurement(ch, missing=rec.missing(ch, need), chapter=ch,
                                    testbed=_links_bed(base, what_if)))
        for model, a_part in ring[ring["testbed"] == what_if].groupby("model"):
            b_part = ring[(ring["testbed"] == base) & (ring["model"] == model)]
            both = sorted(set(a_part["workers"]) & set(b_part["workers"]))
            top = int(both[-1]) if both and both[-1] >= 2 else 0
            label = (f"{model}: ring per-worker bytes sent + received per second of training "
                     f"at {top or 'the same'} workers, {fast:g} Gb/s links / {slow:g} Gb/s")
            a = _per_second(a_part, WORKER, top, CLUSTER_RATE)  # top 0: no runs, empty
            b = _per_second(b_part, WORKER, top, CLUSTER_RATE)
            if a.empty or b.empty:
                rows.append(Measurement(label, missing=rec.missing(ch, need), chapter=ch,
                                        testbed=_links_bed(base, what_if, [str(model)])))
                continue
            rows.append(Measurement(label, values(a), values(b), source=rec.source(
                ch, "emulated (shaped links, replayed compute); bytes counted on the wire"),
                testbed=_links_bed(base, what_if, [str(model)]), chapter=ch,
                ratio=_ratio(b_part, RING, top)))
    return rows or [Measurement(ch, missing=rec.missing(ch, need), chapter=ch)]


RING_QUOTE = ("However, in Figures 4.15 and 4.18, we observe that the communication overhead "
              "between Worker nodes in Ring All-Reduce architecture is roughly the same. Each "
              "Worker node fully leverages the network bandwidth. And the packets sent and "
              "received remain constant as we increase or decrease the Worker nodes in the Ring "
              "All-Reduce cluster.")
CH5 = "Shi 2019, Ch. 5 (Conclusion), p. 30"
CH5_TRAFFIC = "Shi 2019, Ch. 5 (Conclusion), pp. 30-31"

CLAIMS = [
    Claim(PAPER, "shi_ps_levels_off",
          "PS speed-up is limited and levels off as workers are added",
          "We observed that performance improvement of training process on Parameter Server is "
          "limited. In Figure 4.3, as we increase the number of Worker nodes in the cluster "
          "under Parameter Server architecture, the speed-up of training process tends to "
          "level off.",
          f"{CH5}; Fig. 4.3", CONDITIONS,
          "PS images/sec at the top worker count / at half of it (each run; the PS's own "
          "scaling, both cells send the model): the slope of Fig. 4.3's speed-up curve over "
          "its upper half",
          "equivalence", 1.0, 1 / 1.15, 1.15,
          "the thesis gives no number (Fig. 4.3 only); 'tends to level off' = a plateau: "
          "doubling the workers (3 -> 6) changes throughput by under 15 % either way; "
          "proportional scaling would give 2.0, so the band is far from it",
          READS_03, _levels_off),
    Claim(PAPER, "shi_ring_proportional",
          "ring speed-up roughly proportional to the number of workers",
          "In Figure 4.4, on the other hand, the speed-up of the training process is roughly "
          "proportional to the number of nodes.",
          f"{CH5}; Fig. 4.4", CONDITIONS,
          "ring scaling efficiency: images/sec at the top worker count / (N x images/sec at 1 "
          "worker), the ring's own 1-worker baseline as in Fig. 4.4 (speed-up over 1 node)",
          "equivalence", 1.0, 0.8, 1.25,
          "the thesis gives no number (Fig. 4.4 only); its speed-up is over 1 node (Table 3.2: "
          "1 to 6 nodes), so 'proportional' is speed-up = N; 'roughly' = within 20 %: "
          "efficiency in [0.8, 1.25] (symmetric on the log scale, 1/1.25 = 0.8)",
          READS_03, _proportional),
    Claim(PAPER, "shi_ring_scales_better",
          "ring all-reduce scales out better than PS",
          "This observation implies the Ring All-Reduce architecture is better at scaling out "
          "than that of Parameter Server.",
          f"{CH5} (from Figs 4.3 and 4.4); restated in the Abstract", CONDITIONS,
          "(ring images/sec at N / at N/2) / (PS images/sec at N / at N/2), each run; "
          "both baselines communicate (N/2 >= 2)",
          "direction", 1.0, *side(1.0),
          "'better at scaling out' (the Abstract: the ring 'outperforms the Parameter Server "
          "architecture, a many-to-one architecture, on scalability') = the ring gains more "
          "from added workers than the PS: any ratio above 1 once the 95 % interval excludes "
          "1 (the thesis gives no size)",
          READS_03, _ring_scales_better),
    Claim(PAPER, "shi_not_directly_proportional",
          "speed-up below the number of machines (communication and other overheads)",
          "Due to the internode communication and other overheads in distributed computing "
          "infrastructure, the performance improvements are not directly proportional to the "
          "number of machines.",
          "Shi 2019, Abstract", CONDITIONS,
          "scaling efficiency of each architecture: images/sec at the top worker count / (N x "
          "images/sec at 1 worker), each run (PS rows, then ring rows); the cause named "
          "(communication) is not separated",
          "direction", 1.0, *side(1.0, "less"),
          "'not directly proportional' = the speed-up falls short of N: efficiency below 1 once "
          "the 95 % interval excludes 1 (no size stated); it does not contradict Ch. 5's "
          "'roughly proportional' ring, which allows a shortfall",
          READS_03, _not_proportional, direction="less"),
    Claim(PAPER, "shi_ps_traffic_proportional",
          "PS traffic proportional to the number of workers (dramatic increase)",
          "By concatenating Figures 4.7, 4.9, and 4.11 on the same timeline, we observe that "
          "the network traffic between Worker nodes and Parameter Server node is proportional "
          "the number of Worker nodes in the cluster. In Figure 5.1, the communication "
          "overheads dramatically increase as Worker nodes are added into the cluster.",
          f"{CH5_TRAFFIC}; Figs 4.7, 4.9, 4.11 and 5.1", TRAFFIC,
          "PS server bytes sent + received per second of training, counted on the wire, at "
          "the top worker count N / (N/n x at n), n = half of N (else the lowest count >= 2), "
          "each run: 1 = proportional",
          "equivalence", 1.0, 0.8, 1.25,
          "the thesis's figures are packets over time, so traffic is a rate (per step, the "
          "server's bytes are N x the gradient by the PS algorithm: fixed by the code, not the "
          "observation); 'proportional' has no qualifier and no number: within 20 % of "
          "proportional, as for 'roughly proportional'; the 'dramatic increase' of Fig. 5.1 "
          "is the same observation and proportional growth implies it",
          READS_TRAFFIC, _ps_traffic),
    Claim(PAPER, "shi_ring_traffic_same",
          "per-worker ring traffic remains constant as workers are added",
          RING_QUOTE,
          f"{CH5_TRAFFIC}; Figs 4.15 and 4.18", TRAFFIC,
          "one ring worker's bytes sent + received per second of training, counted on the "
          "wire, at the top worker count / at half of it (else the lowest count >= 2), each "
          "run (the thesis plots packets over time)",
          "equivalence", 1.0, 1 / 1.2, 1.2,
          "'roughly the same' / 'remain constant' = within 20 % either way (no number given); "
          "per-step bytes grow as 2(N-1)/N by the algorithm (+25 % from 3 to 6), so the rate "
          "is the quantity the thesis's packets-over-time figures show",
          READS_TRAFFIC, _ring_traffic),
    Claim(PAPER, "shi_ring_full_bandwidth",
          "each ring worker fully uses its network bandwidth",
          "Each Worker node fully leverages the network bandwidth.",
          f"{CH5_TRAFFIC}; Figs 4.15 and 4.18", TRAFFIC,
          "one ring worker's bytes on the wire per second while it communicates / its link's "
          "rate: wire bytes sent per step / (comm_s x the link rate the emulator shaped, "
          "profile rate x scale), each run, at the top worker count; comm_s runs from the first "
          "bucket handed to the ring to the last one reduced, so it includes waits for "
          "backward's next bucket (the thesis read its monitoring's averages over time)",
          "direction", 0.8, *side(0.8),
          "'fully leverages' = the link is near its rate while the ring communicates: above "
          "80 % once the 95 % interval excludes 0.8 (the thesis gives no number)",
          READS_03, _full_bandwidth),
    Claim(PAPER, "shi_ring_packets_set_by_compute",
          "a ring worker's packets depend only on its computational capacity",
          "The packets sent and received by each Worker node only depend on the computational "
          "capacity of each Worker node.",
          CH5_TRAFFIC, TRAFFIC,
          "one ring worker's wire bytes sent + received per second of training (the emulated "
          "cluster's seconds) with 10 Gb/s links / with Shi's 2 Gb/s, the same K80 compute, "
          "batch and worker count (a what-if testbed that changes only the links), each side "
          "its own independent runs",
          "equivalence", 1.0, 1 / 1.2, 1.2,
          "'only depend on the computational capacity' = not on the links: at fixed compute a "
          "5x faster link leaves the rate within 20 % either way (no number given; 20 % as for "
          "'roughly the same'). Bytes per step are set by the model, so the rate is bytes / "
          "step time and follows the compute by construction wherever the link does not bind; "
          "whether the link binds is what the cells decide",
          READS_03, _links_only),
]
assert all(math.isfinite(c.no_effect) for c in CLAIMS)

for _claim in CLAIMS:
    register_claim(_claim)
