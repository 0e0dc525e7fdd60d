"""The regime map (issue 21, item 8), analytic: for one model, the ring's scaling efficiency at N
workers and the best parameter server's step time over the ring's, on a grid of compute time per
step (x) and inter-node bandwidth (y); each testbed as a point, measured cells as markers.

The efficiency lines are the papers' words, at the margins the claims fixed before any run
(ddlstudy.claims; copied here because analysis may not import claims, and
tests/test_costmodel_regime.py checks that the copies still equal the claims' margins):
Shi 2019's "roughly proportional" (shi_ring_proportional: efficiency >= 0.8) and Malik 2018's
"almost linear" (malik_horovod_linear_*: efficiency >= 0.9).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

import ddlstudy.analysis.costmodel.step as _step
from ddlstudy.analysis.costmodel.cells import _usable
from ddlstudy.analysis.costmodel.step import (
    FLAT,
    SETTINGS_ALONE,
    Constants,
    Link,
    Tiers,
    predict_step,
)
from ddlstudy.network.profiles import PROFILES
from ddlstudy.testbeds import catalog

WORDS: dict[str, float] = {"roughly proportional (Shi 2019)": 0.8,
                           "almost linear (Malik 2018)": 0.9}
# The PS variants "best PS" ranges over: (label, servers rule, overlapped, co-located).
PS_VARIANTS: tuple[tuple[str, str, bool, bool], ...] = (
    ("naive, 1 server", "1", False, False),
    ("naive, S = nodes co-located", "nodes", False, True),
    ("overlapped, 1 server", "1", True, False),
    ("overlapped, S = nodes co-located", "nodes", True, True),
)


@dataclass(frozen=True)
class RegimeMap:
    """The map's data: `grid` (compute_s, bandwidth_bps, ring_efficiency, ps_over_ring,
    best_ps), `points` (testbeds and measured cells: kind, name, compute_s, bandwidth_bps,
    efficiency), the efficiency `words`, and the settings."""

    model: str
    workers: int
    gpus_per_node: int
    latency_s: float
    grid: pd.DataFrame
    points: pd.DataFrame
    words: dict[str, float] = field(default_factory=lambda: dict(WORDS))

    def table(self) -> pd.DataFrame:
        """Grid and points in one frame (column `kind`: grid, testbed, cell), for a CSV."""
        grid = self.grid.assign(kind="grid", name="", label=TESTBED_LABEL)
        return pd.concat([grid, self.points], ignore_index=True).assign(
            model=self.model, workers=self.workers, gpus_per_node=self.gpus_per_node,
            latency_s=self.latency_s, source="analytic (projected) except kind=cell")


def ring_and_best_ps(sizes: Sequence[int], workers: int, compute_s: float, link: Link,
                     tiers: Tiers = FLAT, c: Constants = SETTINGS_ALONE
                     ) -> tuple[float, float, float, str]:
    """(ring efficiency, ring step s, best PS step s, best PS variant) at one setting."""
    ring = predict_step("allreduce", "", workers, link, compute_s, c, sizes=sizes,
                        algorithm="ring", tiers=tiers).total(c)
    alone = predict_step("allreduce", "", 1, link, compute_s, c, sizes=sizes).total(c)
    nodes = len(tiers.nodes(workers))
    best, which = np.inf, ""
    for label, rule, overlap, colocated in PS_VARIANTS:
        s = 1 if rule == "1" else nodes
        t = predict_step("ps_sync", "", workers, link, compute_s, c, sizes=sizes, servers=s,
                         tiers=tiers, ps_overlap=overlap, colocated=colocated).total(c)
        if t < best:
            best, which = t, label
    return alone / ring, ring, float(best), which


# How every point of the map is labelled (issue 21: nothing on it may pass for a measurement).
TESTBED_LABEL = "projected (analytic)"
CELL_LABEL = "measured (emulated)"


def _testbed_points(model: str, shape: str) -> pd.DataFrame:
    """Every testbed of ddlstudy.testbeds as a point, labelled projected (analytic): x = its
    published (or measured) step time for `model` (the row at the paper's batch first, then
    at `shape`, then the largest batch), y = its inter-node rate per node. A testbed with no
    step time for `model` keeps compute_s NaN (drawn at the map's edge, rate only); a one-node
    testbed (no inter-node link) is placed at its intra-node rate per GPU, the link its
    collectives cross, and says so."""
    rows = []
    for tb in catalog.testbeds():
        bw, where = tb.inter_node.node_rate_bps, "inter-node rate per node"
        if not bw and tb.intra_node.rate_Bps:
            bw, where = 8 * tb.intra_node.rate_Bps, "one node: its intra-node rate per GPU"
        comp = [r for r in catalog.compute_table(tb.name) if r["model"] == model]
        paper = str(tb.framework.get("batch_per_worker") or tb.framework.get("batch_per_gpu")
                    or "")
        comp.sort(key=lambda r: (str(r["batch_size"]) != paper, r["shape"] != shape,
                                 -int(r["batch_size"])))
        gpn = f"{tb.gpus_per_node.value} GPU(s) per node" + (
            f"; what-if of {tb.base}" if tb.base else "")
        if comp:
            x, what = float(comp[0]["compute_s_p50"]), (f"{comp[0]['shape']} batch "
                                                        f"{comp[0]['batch_size']}")
        else:
            x, what = np.nan, f"no {model} step time for its device (rate only)"
        rows.append({"kind": "testbed", "name": tb.name, "compute_s": x,
                     "bandwidth_bps": float(bw) if bw else np.nan, "efficiency": np.nan,
                     "label": TESTBED_LABEL, "note": f"{what}, {gpn}; {where}"})
    return pd.DataFrame(rows)


def _cell_points(cells: pd.DataFrame, model: str, workers: int) -> pd.DataFrame:
    """Measured ring cells of `model` at one engine per node (the map's setting): x = the
    replayed compute in cluster seconds (replay_s x time_dilation x network_scale), y = the
    profile's rate; efficiency measured against the 1-worker cell of the same profile and
    replayed device (a testbed's cells never mix with the study's own on the same profile)."""
    usable, _ = _usable(cells)
    ring = usable[(usable["strategy"] == "allreduce") & (usable["model"] == model)]
    gpn = ring["gpus_per_node"].fillna(1).astype(int) if "gpus_per_node" in ring else 1
    ring = ring[gpn == 1]
    rows = []
    for (net, _src), part in ring.groupby(["network", ring["replay_source"].fillna("")]):
        per = (part["wall_s"] / part["steps"]).groupby(part["workers"].astype(int)).median()
        if 1 not in per.index or workers not in per.index:
            continue
        top = part[part["workers"].astype(int) == workers].iloc[0]
        x = float(top["replay_s"]) * float(top["time_dilation"]) * float(top["network_scale"])
        rows.append({"kind": "cell", "name": f"measured {net}, {workers} workers",
                     "compute_s": x, "bandwidth_bps": PROFILES[net].rate_bps,
                     "efficiency": float(per[1] / per[workers]), "label": CELL_LABEL,
                     "note": "emulated"})
    return pd.DataFrame(rows)


def regime_map(model: str, *, workers: int = 6, gpus_per_node: int = 1,
               intra: Link | None = None, latency_s: float = 10e-6, shape: str = "cifar",
               compute_s: Sequence[float] | None = None,
               bandwidth_bps: Sequence[float] | None = None,
               sizes: Sequence[int] | None = None, cells: pd.DataFrame | None = None,
               c: Constants = SETTINGS_ALONE,
               words: Mapping[str, float] | None = None) -> RegimeMap:
    """The regime map of `model` (analytic, SETTINGS_ALONE constants unless given): ring
    efficiency at `workers` and best PS / ring on the grid, testbeds from ddlstudy.testbeds,
    measured ring cells from `cells` (read_cells output) as markers. The inter-node link is
    kernel TCP (GOODPUT) with `latency_s` everywhere on the grid."""
    xs = np.geomspace(1e-3, 10.0, 36) if compute_s is None else np.asarray(compute_s, float)
    ys = np.geomspace(1e8, 4e12, 36) if bandwidth_bps is None else np.asarray(bandwidth_bps,
                                                                              float)
    sizes = tuple(sizes) if sizes is not None else _step.gradient_bytes(model, shape)
    tiers = Tiers(gpus_per_node, intra)
    rows = []
    for y in ys:
        link = Link(float(y), latency_s)
        for x in xs:
            eff, ring, ps, which = ring_and_best_ps(sizes, workers, float(x), link, tiers, c)
            rows.append({"compute_s": float(x), "bandwidth_bps": float(y),
                         "ring_efficiency": eff, "ring_step_s": ring, "best_ps_step_s": ps,
                         "ps_over_ring": ps / ring, "best_ps": which})
    points = [_testbed_points(model, shape)]
    if cells is not None and len(cells):
        points.append(_cell_points(cells, model, workers))
    pts = pd.concat([p for p in points if len(p)], ignore_index=True) if any(
        len(p) for p in points) else pd.DataFrame(
        columns=["kind", "name", "compute_s", "bandwidth_bps", "efficiency", "label", "note"])
    return RegimeMap(model, workers, gpus_per_node, latency_s, pd.DataFrame(rows), pts,
                     dict(WORDS if words is None else words))


# Chapter 11's arms on the same grid (issue 25, item 4): (label, strategy, bytes factor). fp16
# buckets halve the ring's bytes (the cast's compute is not charged); PowerSGD and top-k are
# left out: their compression compute is not in the step model, only their bytes are measured.
WINNER_ARMS: tuple[tuple[str, str, float], ...] = (
    ("ring all-reduce", "allreduce", 1.0),
    ("ring, fp16 buckets", "allreduce", 0.5),
    ("ZeRO-1", "zero1", 1.0),
    ("ZeRO-3", "zero3", 1.0),
)
BEST_PS = "best parameter server"
TIE = 1.02  # a winner by less than 2 % is no winner: the step model's own error is larger
NO_WINNER = "none by 2 % or more"


def winners_map(model: str, *, workers: int = 4, gpus_per_node: int = 1,
                latency_s: float = 10e-6, shape: str = "cifar",
                compute_s: Sequence[float] | None = None,
                bandwidth_bps: Sequence[float] | None = None,
                c: Constants = SETTINGS_ALONE) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Where each strategy wins (analytic, SETTINGS_ALONE constants unless given): on the
    regime map's grid, the predicted step of every WINNER_ARMS arm and of the best parameter
    server (`ring_and_best_ps`), and the fastest (`winner`, NO_WINNER when it leads the
    runner-up by less than TIE; `winner_uncompressed` likewise without fp16). Returns
    (grid, testbeds): each testbed of ddlstudy.testbeds with a step time
    for `model` at its compute and inter-node rate, with the winner there."""
    xs = np.geomspace(1e-3, 10.0, 30) if compute_s is None else np.asarray(compute_s, float)
    ys = np.geomspace(1e8, 4e12, 30) if bandwidth_bps is None else np.asarray(bandwidth_bps,
                                                                              float)
    sizes = _step.gradient_bytes(model, shape)
    tiers = Tiers(gpus_per_node, None)

    def steps(x: float, y: float) -> dict[str, float]:
        link = Link(float(y), latency_s)
        out = {BEST_PS: ring_and_best_ps(sizes, workers, x, link, tiers, c)[2]}
        for label, strategy, factor in WINNER_ARMS:
            arm_sizes = None if strategy == "zero3" and factor == 1.0 else tuple(
                max(1, int(b * factor)) for b in sizes)
            out[label] = predict_step(strategy, model, workers, link, x, c, shape=shape,
                                      sizes=arm_sizes, algorithm="ring_pipelined",
                                      tiers=tiers).total(c)
        return out

    def first(t: dict[str, float]) -> tuple[str, str, float]:
        ranked = sorted(t.items(), key=lambda kv: kv[1])
        margin = ranked[1][1] / ranked[0][1]
        return (ranked[0][0] if margin >= TIE else NO_WINNER), ranked[1][0], margin

    def row(x: float, y: float) -> dict[str, Any]:
        t = steps(x, y)
        win, second, margin = first(t)
        plain = first({k: v for k, v in t.items() if "fp16" not in k})[0]
        return {"compute_s": x, "bandwidth_bps": y, **{f"step_s: {k}": v for k, v in t.items()},
                "winner": win, "runner_up": second, "margin": margin,
                "winner_uncompressed": plain}

    grid = pd.DataFrame([row(float(x), float(y)) for y in ys for x in xs])
    tb = _testbed_points(model, shape)
    tb = tb[tb["compute_s"].notna() & tb["bandwidth_bps"].notna()]
    placed = pd.DataFrame([{**r, **row(float(r["compute_s"]), float(r["bandwidth_bps"]))}
                           for r in tb.to_dict("records")])
    return grid.assign(label=TESTBED_LABEL), placed
