"""Three checks of the step model, each ending in one median relative error (issue 21, item 7):

(a) `held_out_by_configuration`: constants fitted on the cells of one configuration (default:
    chapter 03's ring on 10GbE-like links, ResNet family) and predicted on cells of other
    configurations (other model family, other strategy, other network profile);
(b) `predict_published`: published scaling / throughput points (testbeds/published.csv) predicted
    from their testbed's compute and links alone: nothing is fitted on them, and the emulator's
    host constants are not carried over (they describe the emulator's Python host, not these
    clusters): `SETTINGS_ALONE`. Its headline error counts the multi-node points only (the
    inter-node tier, what the study's comparison and projections are about); the single-node
    points, which test the intra-node tier and mostly compute-bound scaling, are reported apart;
(c) `settings_alone`: the emulated cells predicted with every fitted constant at zero (link
    factor 1): what the configuration alone predicts, so the reader sees what the fit adds.

Everything predicted here is analytic.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

import ddlstudy.analysis.costmodel.step as _step
from ddlstudy.analysis.costmodel.cells import (
    RecordsError,
    Validation,
    _cell_step,
    _usable,
    cell_gpus_per_node,
    fit_constants,
)
from ddlstudy.analysis.costmodel.step import (
    GOODPUT,
    SETTINGS_ALONE,
    Constants,
    Link,
    StepTime,
    Tiers,
    predict_step,
)
from ddlstudy.network.profiles import PROFILES
from ddlstudy.testbeds import catalog
from ddlstudy.workload.catalog import SHAPES

# (a)'s fit configuration, chosen before looking at any error: one profile, one strategy, one
# model family, one GPU per node (all reference cells have one).
FIT_CONFIGURATION: dict[str, str] = {"network": "10GbE", "strategy": "allreduce",
                                     "family": "resnet", "gpus_per_node": "1"}


def family(model: str) -> str:
    """A model's family: its name without digits and suffixes (resnet50 -> resnet)."""
    return re.sub(r"[\d_].*$", "", str(model)) or str(model)


def _median_abs(x: pd.Series) -> float:
    return float(x.abs().median()) if len(x) else math.nan


def _measured(cells: pd.DataFrame) -> np.ndarray:
    return (cells["wall_s"] / cells["steps"]).to_numpy(dtype=float)


def held_out_by_configuration(cells: pd.DataFrame,
                              fit_on: Mapping[str, str] = FIT_CONFIGURATION
                              ) -> tuple[pd.DataFrame, Constants, str]:
    """(table, constants, what was fitted): constants fitted on the usable cells matching
    `fit_on` (network, strategy, model family, engines per node), every other usable cell
    predicted and labelled with what differs ("other family", "other strategy", "other
    network", "other gpus_per_node", joined by " + ").
    When no cell matches, the largest (network, strategy) group is the fit configuration and
    the description says so."""
    usable, _ = _usable(cells)
    if usable.empty:
        raise RecordsError("no cell has replayed compute on a shaped link profile")
    usable = usable.assign(family=usable["model"].map(family),
                           gpus_per_node=[str(cell_gpus_per_node(r))
                                          for r in usable.itertuples()])
    keys = {"network": "network", "strategy": "strategy", "family": "family",
            "gpus_per_node": "gpus_per_node"}
    match = pd.Series(True, index=usable.index)
    for k, v in fit_on.items():
        match &= usable[keys[k]].astype(str) == v
    what = ", ".join(f"{k} {v}" for k, v in fit_on.items())
    if match.sum() < 2:
        top = usable.groupby(["network", "strategy"]).size().idxmax()
        match = (usable["network"] == top[0]) & (usable["strategy"] == top[1])
        fit_on = {"network": top[0], "strategy": top[1]}
        what = (f"network {top[0]}, strategy {top[1]} (no cells of {what}: the largest "
                "configuration instead)")
    c = fit_constants(usable[match])
    differs = []
    for _, row in usable.iterrows():
        d = [f"other {k}" for k, v in fit_on.items() if str(row[keys[k]]) != v]
        differs.append(" + ".join(d) if d else "fit")
    usable["role"] = differs
    usable["measured_s"] = _measured(usable)
    usable["predicted_s"] = [_cell_step(r, c).total(c) for r in usable.itertuples()]
    usable["rel_error"] = (usable["predicted_s"] - usable["measured_s"]) / usable["measured_s"]
    cols = ["strategy", "algorithm", "model", "workers", "servers", "network", "role",
            "measured_s", "predicted_s", "rel_error"]
    return usable[cols].reset_index(drop=True), c, what


def settings_alone(cells: pd.DataFrame) -> pd.DataFrame:
    """Every usable cell predicted with no fitted constant (SETTINGS_ALONE)."""
    usable, _ = _usable(cells)
    if usable.empty:
        raise RecordsError("no cell has replayed compute on a shaped link profile")
    c = SETTINGS_ALONE
    usable["measured_s"] = _measured(usable)
    usable["predicted_s"] = [_cell_step(r, c).total(c) for r in usable.itertuples()]
    usable["rel_error"] = (usable["predicted_s"] - usable["measured_s"]) / usable["measured_s"]
    return usable[["strategy", "model", "workers", "network", "measured_s", "predicted_s",
                   "rel_error"]].reset_index(drop=True)


# ----------------------------------------------------------------------------- published points
# Which testbed lends its intra-node link to a published point, by the device the source names
# (a testbed of the same device and interconnect where one exists; else the nearest, "assumed").
INTRA_FROM: tuple[tuple[str, str, str], ...] = (
    ("V100", "wang_nchc_ib", "NVLink 2.0 of Wang (NCHC)'s V100 SXM2 nodes"),
    ("P100 SXM2", "wang_nchc_ib", "assumed: NVLink 2.0 of Wang (NCHC)'s nodes (the DGX-1 P100 "
     "has NVLink 1.0, slower; no testbed carries it)"),
    ("K80", "malik2018_k80", "PCIe 3.0 x16 of Malik 2018's K80 nodes"),
    ("Pascal", "malik2018_p100", "assumed: PCIe 3.0 x16 of Malik 2018's P100 nodes (the source "
     "names neither the GPU model nor its interconnect)"),
)
RDMA_WORDS = ("RDMA", "InfiniBand")


def _intra(point: catalog.PublishedPoint) -> tuple[Link | None, str]:
    for word, name, why in INTRA_FROM:
        if word in point.device:
            tb = catalog.testbed(name).intra_node
            rate = float(tb.rate_Bps or 0.0) * 8
            return Link(rate, float(tb.latency_s or 0.0), goodput=1.0), why
    return None, "no intra-node link known for this device"


def _tcp_latency(rate_bps: float) -> float:
    """Kernel-TCP latency of the Ethernet profile nearest in rate (log scale)."""
    eth = [p for p in PROFILES.values() if "GbE" in p.name]
    best = min(eth, key=lambda p: abs(math.log(p.rate_bps / rate_bps)))
    return best.latency_s


def _inter(point: catalog.PublishedPoint, testbed: str | None) -> tuple[Link | None, str]:
    if testbed:
        tb = catalog.testbed(testbed).inter_node
        if tb.node_rate_bps:
            rdma = any(w in tb.kind for w in RDMA_WORDS)
            return (Link(tb.node_rate_bps, float(tb.latency_s or 0.0),
                         1.0 if rdma else GOODPUT), f"testbed {testbed}'s {tb.kind}")
    if point.network_bps is None:
        return None, "network rate not stated by the source"
    text = f"{point.network} {point.framework}"
    if any(w in text for w in RDMA_WORDS):
        return Link(point.network_bps, PROFILES["IB-EDR"].latency_s, 1.0), \
            "stated rate, RDMA (IB-EDR profile's 1 us latency)"
    lat = _tcp_latency(point.network_bps)
    return Link(point.network_bps, lat), f"stated rate, kernel TCP ({lat * 1e6:.0f} us)"


def _testbed_of(point: catalog.PublishedPoint) -> str | None:
    m = re.search(r"testbed (\w+)", point.notes)
    return m.group(1) if m else None


def _compute(point: catalog.PublishedPoint, testbed: str | None) -> tuple[float | None, str]:
    """Seconds per single-GPU step: the source's own single-GPU throughput, else the testbed's
    compute row of that model (and batch, where it has one)."""
    if point.single_gpu_images_per_sec:
        return (point.batch_per_gpu / point.single_gpu_images_per_sec,
                "the source's single-GPU images/sec")
    if testbed:
        rows = [r for r in catalog.testbed(testbed).compute if r.model == point.study_model]
        rows.sort(key=lambda r: r.batch_size != point.batch_per_gpu)
        if rows:
            return rows[0].step_s * point.batch_per_gpu / rows[0].batch_size, \
                f"testbed {testbed}'s compute row ({rows[0].source})"
    return None, "no single-GPU step time"


def _ps_servers(point: catalog.PublishedPoint) -> int:
    """Parameter servers of a multi-node PS point: the count its notes state ("parameter
    servers: S"), else one per node (tf_cnn_benchmarks' co-located launch)."""
    m = re.search(r"parameter servers: (\d+)", point.notes)
    return int(m.group(1)) if m else point.nodes


def placement_of(point: catalog.PublishedPoint) -> str:
    """How the point's parameter servers split the model: TensorFlow places whole variables
    ("variable"), the rest split bytes evenly ("even")."""
    return "variable" if "TensorFlow" in point.framework else "even"


def data_path(point: catalog.PublishedPoint) -> str:
    """The stack the point's gradients took, from its framework text: the step model charges
    links, not host copies, so its misses differ by path (the validate output splits them)."""
    text = point.framework.lower()
    if point.strategy == "ps":
        return "parameter servers"
    if "on cpu" in text:
        return "all-reduce on CPU"
    return "all-reduce on GPU"


def predict_point(point: catalog.PublishedPoint, c: Constants = SETTINGS_ALONE,
                  sizes: Sequence[int] | None = None) -> dict[str, Any]:
    """One published point predicted from its testbed's settings (analytic). Allreduce points:
    a flat ring over every GPU (NCCL's and Horovod's default then), buckets of 25 MiB overlapped
    with backward; PS points: TensorFlow's per-variable pushes during backward (the overlapped
    PS), each variable whole on one server (`step.variable_placement`, TensorFlow's greedy
    placement), one server per node co-located with the workers (tf_cnn_benchmarks' launch; or
    the count the point's notes state), or in one node the host CPU as the one server behind
    the GPUs' PCIe links. distributed_replicated points: each node first sums its GPUs'
    gradients over the intra-node link (a ring, its time beyond backward added), then pushes
    once for the node."""
    tb = _testbed_of(point)
    row: dict[str, Any] = {"point_id": point.point_id, "source": point.source_key,
                           "citation": point.citation.split(",")[0], "model": point.study_model,
                           "gpus": point.gpus, "gpus_per_node": point.gpus_per_node,
                           "strategy": point.strategy, "path": data_path(point),
                           "metric": point.metric,
                           "published": point.value, "predicted": math.nan,
                           "rel_error": math.nan, "assumed": point.assumed}
    compute, compute_why = _compute(point, tb)
    intra, intra_why = _intra(point)
    nodes = point.nodes
    inter, inter_why = _inter(point, tb) if nodes > 1 else (None, "one node")
    placement = placement_of(point)
    why = [compute_why, intra_why if point.gpus > 1 else "", inter_why,
           "whole variables per server (TensorFlow's placement)"
           if point.strategy == "ps" and nodes > 1 and placement == "variable" else ""]
    row["settings"] = "; ".join(w for w in why if w)
    if compute is None or (nodes > 1 and inter is None) or (point.gpus > 1 and intra is None):
        row["skipped"] = next(w for w, ok in ((compute_why, compute is not None),
                                              (inter_why, nodes == 1 or inter is not None),
                                              (intra_why, intra is not None)) if not ok)
        return row
    row["skipped"] = ""
    shape = point.shape if point.shape in SHAPES else "imagenet"  # a registered input shape
    sizes = tuple(sizes) if sizes is not None else _step.gradient_bytes(point.study_model, shape)
    k = min(point.gpus_per_node, point.gpus)
    if point.strategy == "allreduce":
        link = inter if inter is not None else intra
        step = predict_step("allreduce", point.study_model, point.gpus, link, compute, c,
                            algorithm="ring", sizes=sizes, tiers=Tiers(k, intra))
    elif nodes == 1:  # parameters on the host CPU: each GPU's PCIe link, one server behind one
        step = predict_step("ps_sync", point.study_model, point.gpus, intra, compute, c,
                            servers=1, sizes=sizes, ps_overlap=True)
    elif "distributed_replicated" in point.framework:  # local sum, then one push per node
        local = predict_step("allreduce", point.study_model, k, intra, compute, c,
                             algorithm="ring", sizes=sizes)
        step = predict_step("ps_sync", point.study_model, nodes, inter, compute, c,
                            servers=_ps_servers(point), sizes=sizes, ps_overlap=True,
                            colocated=True, placement=placement)
        exposed = max(0.0, local.total(c) - compute)  # the local sum's time beyond backward
        step = step + StepTime(exposed, 0.0, 0.0, 0.0)
    else:
        step = predict_step("ps_sync", point.study_model, point.gpus, inter, compute, c,
                            servers=_ps_servers(point), sizes=sizes, tiers=Tiers(k, intra),
                            ps_overlap=True, colocated=True, placement=placement)
    seconds = step.total(c)
    if point.metric == "images_per_sec":
        pred = point.gpus * point.batch_per_gpu / seconds
    else:
        pred = compute / seconds
    row.update(predicted=pred, rel_error=(pred - point.value) / point.value,
               step_s=seconds, compute_s=compute)
    return row


def predict_published(points: Sequence[catalog.PublishedPoint] | None = None,
                      c: Constants = SETTINGS_ALONE) -> pd.DataFrame:
    """Every published point on a study model, predicted (or skipped, with why)."""
    pts = catalog.published_points(study_models_only=True) if points is None else points
    return pd.DataFrame([predict_point(p, c) for p in pts])


def multi_node(table: pd.DataFrame) -> pd.Series:
    """Rows of a `predict_published` table whose GPUs span several nodes."""
    return table["gpus"] > table["gpus_per_node"]


def published_summary(table: pd.DataFrame, multi_node_only: bool = True
                      ) -> tuple[float, int, int]:
    """(median |relative error| over the predicted points, points, sources): the multi-node
    points (default) or all."""
    done = table[table["predicted"].notna()]
    if multi_node_only:
        done = done[multi_node(done)]
    return _median_abs(done["rel_error"]), len(done), int(done["source"].nunique())


def with_published(v: Validation) -> Validation:
    """`v` with the published multi-node check's error beside the emulated cells' (what a
    projection's label states)."""
    table = predict_published()
    med, n, s = published_summary(table)
    top = int(table[multi_node(table) & table["predicted"].notna()]["gpus"].max()) if n else 0
    return replace(v, published_error=med, published_points=n, published_sources=s,
                   published_max_gpus=top)
