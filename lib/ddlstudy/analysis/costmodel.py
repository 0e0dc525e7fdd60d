"""Alpha-beta-gamma cost model of the all-reduce algorithms (Thakur, Rabenseifner & Gropp 2005).

T = (messages on the critical path) alpha + (bytes on the critical path) beta
    + (bytes reduced on the critical path) gamma

alpha: per-message latency (s), beta: per-byte transfer time (s/B, 1/bandwidth), gamma: per-byte
reduction time (s/B). n is the buffer size in bytes, p the number of ranks. The model is linear in
(alpha, beta, gamma), so the three can be fitted to measurements by (non-negative) least squares,
and the fitted machine can then be swapped for a named network (`NETWORKS`) to predict a cluster.

Non-powers of two: recursive doubling and Rabenseifner fold the 2r = 2(p - p') extra ranks onto the
largest power of two p' <= p (MPICH's scheme, what `collectives` implements): lg p' rounds plus
one full-buffer exchange in and one out (2 alpha + 2 n beta + n gamma). Thakur et al. write
ceil(lg p) for these; floor + fold is what the code does, so that is what is modelled. The binomial
tree works for any p with depth ceil(lg p).

On top of that, one training step of every strategy (`predict_step`): the replay table's compute
(forward, then backward producing gradients in reverse order), the model's gradient sizes in the
buckets `strategies.AllReduce` builds, each bucket all-reduced when ready (overlap) or after
backward, a parameter server's 2N/S models through each server's link, links from
`ddlstudy.network.emulated.netem.PROFILES`, and three per-host constants (`Constants`) fitted to
measured cells:

    python -m ddlstudy.costmodel validate results/reference outputs/<run> ...

reads every summary.csv below the folders, fits the constants on every third cell in order of
step time, prints measured vs predicted seconds per step for each cell and ends with
`median relative error: 0.NN` over the cells not fitted. `project` carries the validated model
to other worker counts, networks and what-ifs (chapter 06).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import math
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ddlstudy.collectives import PIPELINE_SEGMENT_BYTES
from ddlstudy.collectives.registry import ALGORITHMS as ALGORITHM_REGISTRY
from ddlstudy.collectives.registry import cost_terms
from ddlstudy.network.profiles import HEADER_BYTES, MTU, PROFILES
from ddlstudy.registry import LiveNames
from ddlstudy.strategies import BACKWARD_SHARE
from ddlstudy.strategies.registry import STRATEGIES, get_strategy, servers_for
from ddlstudy.workload.catalog import SHAPES

# The algorithms the model knows: every registered one (each carries its own cost terms).
ALGORITHMS = LiveNames(lambda: ALGORITHM_REGISTRY)

# Named links, alpha in s (small-message one-way latency) and beta in s/byte (1 / line rate), read
# from the one registry of real networks, ddlstudy.network.emulated.netem.PROFILES (rates and
# latencies with their
# sources there). Re-measure your own with `python -m ddlstudy.cluster --check` and fit() before
# trusting a prediction.
class _Links(Mapping[str, dict[str, float]]):
    """A live view of netem.PROFILES as {"alpha", "beta"}: a profile added there later (a test,
    a notebook) is a network here too, never a copy taken at import."""

    def __getitem__(self, name: str) -> dict[str, float]:
        p = PROFILES[name]
        return {"alpha": p.latency_s, "beta": 8 / p.rate_bps}

    def __iter__(self) -> Iterator[str]:
        return iter(list(PROFILES))

    def __len__(self) -> int:
        return len(PROFILES)


NETWORKS: Mapping[str, dict[str, float]] = _Links()


def terms(algorithm: str, nbytes: float, p: int,
          segment_bytes: int = PIPELINE_SEGMENT_BYTES) -> tuple[float, float, float]:
    """The (alpha, beta, gamma) coefficients: T = a*alpha + b*beta + g*gamma.

    Each algorithm carries its own terms in its registry entry (ddlstudy.collectives.registry;
    the formulas sit beside its code, e.g. collectives/ring.py).
    """
    return cost_terms(algorithm, nbytes, p, segment_bytes)


def predict(algorithm: str, nbytes: float, p: int, alpha: float, beta: float, gamma: float,
            segment_bytes: int = PIPELINE_SEGMENT_BYTES) -> float:
    """Predicted all-reduce time (s) of `nbytes` over p ranks."""
    a, b, g = terms(algorithm, nbytes, p, segment_bytes)
    return a * alpha + b * beta + g * gamma


def predict_network(algorithm: str, nbytes: float, p: int, network: str,
                    gamma: float = 0.0) -> float:
    """predict() on a named link from NETWORKS; gamma (s/B) is the node's, not the network's."""
    if network not in NETWORKS:
        raise ValueError(f"unknown network {network!r}; valid: {', '.join(NETWORKS)}")
    net = NETWORKS[network]
    return predict(algorithm, nbytes, p, net["alpha"], net["beta"], gamma)


def _nnls(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Exact non-negative least squares for few unknowns: best lstsq over every support set.

    With three unknowns that is seven small solves; no scipy needed, and unlike clamping an
    unconstrained solution it gives the true constrained optimum.
    """
    k = a.shape[1]
    best, best_res = np.zeros(k), float(np.sum(y**2))
    for size in range(1, k + 1):
        for support in itertools.combinations(range(k), size):
            cols = list(support)
            x, *_ = np.linalg.lstsq(a[:, cols], y, rcond=None)
            if np.any(x < 0):
                continue
            full = np.zeros(k)
            full[cols] = x
            res = float(np.sum((a @ full - y) ** 2))
            if res < best_res:
                best, best_res = full, res
    return best


def _rows(records: pd.DataFrame, time_col: str) -> pd.DataFrame:
    need = {"algorithm", "ranks", "size_bytes", time_col}
    missing = need - set(records.columns)
    if missing:
        raise ValueError(f"records lack column(s) {sorted(missing)}; need {sorted(need)}")
    rows = records[records["ranks"] > 1]
    if "error" in rows.columns:
        rows = rows[rows["error"].isna() | (rows["error"] == "")]
    return rows[rows["algorithm"].isin(ALGORITHMS)]


def fit(records: pd.DataFrame, time_col: str = "time_p50_s", relative: bool = True,
        algorithms: Iterable[str] | None = None) -> dict[str, Any]:
    """Fit alpha, beta, gamma >= 0 to measured times over all algorithms' rows; `unresolved`
    names the constants the fit pinned at about 0 (< 0.1 % of every point: not resolved).

    relative=True weights each row by 1/measured, i.e. minimises relative error: sizes span
    8 B to 256 MiB, and an unweighted fit would ignore everything but the largest messages
    (and so alpha). Rows with ranks == 1 carry no communication and are skipped.
    """
    rows = _rows(records, time_col)
    if algorithms is not None:
        rows = rows[rows["algorithm"].isin(list(algorithms))]
    if rows.empty:
        raise ValueError("no usable rows to fit (need ranks > 1 and a known algorithm)")
    a = np.array([terms(r.algorithm, r.size_bytes, int(r.ranks))
                  for r in rows.itertuples()], dtype=float)
    y = rows[time_col].to_numpy(dtype=float)
    w = 1.0 / y if relative else np.ones_like(y)
    x = _nnls(a * w[:, None], y * w)
    pred = a @ x
    # a constant NNLS pinned at (or next to) 0, adding < 0.1 % to every point, is one the data
    # could not resolve, not a finding of 0 s/B
    share = (a * x[None, :] / y[:, None]).max(axis=0)
    unresolved = [k for k, v in zip(("alpha", "beta", "gamma"), share, strict=True) if v < 1e-3]
    return {"alpha": float(x[0]), "beta": float(x[1]), "gamma": float(x[2]),
            "rows": len(rows),
            "median_abs_rel_err": float(np.median(np.abs(pred - y) / y)),
            "unresolved": ", ".join(unresolved) or "none"}


def prediction_error_table(records: pd.DataFrame, params: dict[str, float],
                           time_col: str = "time_p50_s") -> pd.DataFrame:
    """Measured vs predicted per algorithm, ranks and size; rel_error = (pred - meas) / meas."""
    rows = _rows(records, time_col)
    out = rows[["algorithm", "ranks", "size_bytes", time_col]].rename(
        columns={time_col: "measured_s"}).reset_index(drop=True)
    out["predicted_s"] = [predict(r.algorithm, r.size_bytes, int(r.ranks), params["alpha"],
                                  params["beta"], params["gamma"]) for r in out.itertuples()]
    out["rel_error"] = (out["predicted_s"] - out["measured_s"]) / out["measured_s"]
    return out


def predict_table(algorithms: Sequence[str], sizes: Sequence[int], ranks: Sequence[int],
                  alpha: float, beta: float, gamma: float) -> pd.DataFrame:
    """Predicted time and busbw for a grid: for plotting a named network or a fitted machine."""
    rows: list[dict[str, Any]] = []
    for alg, n, p in itertools.product(algorithms, sizes, ranks):
        t = predict(alg, n, p, alpha, beta, gamma)
        algbw = n / t / 1e9 if t > 0 else float("nan")
        rows.append({"algorithm": alg, "size_bytes": n, "ranks": p, "predicted_s": t,
                     "algbw_gbps": algbw, "busbw_gbps": algbw * 2 * (p - 1) / p})
    return pd.DataFrame(rows)


# ============================================================================= one training step
# Units: a StepTime is in the seconds of whatever clock the inputs are in. `predict_cell` works in
# *emulated* seconds (what an emulated run measures: compute stretched by 1/scale, links at
# rate x scale, host work in host seconds); x scale gives cluster-equivalent seconds, the unit of
# `images_per_sec_cluster`. `project_step` works in cluster seconds directly (scale 1, the
# profile's real latency added).

# Payload per wire byte on a shaped link: tbf meters whole Ethernet frames, of which TCP carries
# MTU - (IP 20 + TCP 20 + timestamps 12) bytes of each MTU + 14 (Ethernet header).
GOODPUT = (MTU - (HEADER_BYTES - 14)) / (MTU + 14)
# Which strategies the step model covers, and how: each registry entry names its step function
# (StrategySpec.step_model); `unmodelled()` says which it cannot model and why.
STEP_STRATEGIES = LiveNames(lambda: (s.name for s in STRATEGIES.values() if s.step_model))
PS_STEP = LiveNames(lambda: (s.name for s in STRATEGIES.values() if s.step_model == "ps_step"))


def unmodelled() -> dict[str, str]:
    """Registered strategies the step model does not cover, each with the reason."""
    return {s.name: f"no step model: {s.name} registers step_model=None"
            + (f" ({s.framework}'s own scheduling is not modelled)" if s.framework else "")
            for s in STRATEGIES.values() if not s.step_model}


@dataclass(frozen=True)
class Constants:
    """The few per-host constants the step model fits (everything else is given).

    link_factor: measured / nominal wire time (1 = the shaped rate x GOODPUT exactly);
    host_s_per_byte: host memory work per byte touched (packing, reductions, the optimizer
    step, copying weights in); overhead_s: fixed seconds per step (engine call, barriers);
    host_s_per_message: the host's own cost of each message on the critical path (a pipelined
    ring's 1 MiB segments each pay a Python send/receive/reduce, during which the link idles).
    """

    link_factor: float = 1.0
    host_s_per_byte: float = 1e-9
    overhead_s: float = 0.0
    host_s_per_message: float = 0.0

    def to_cluster(self, scale: float) -> Constants:
        """The same host, its time expressed in cluster-equivalent seconds (x scale)."""
        return replace(self, host_s_per_byte=self.host_s_per_byte * scale,
                       overhead_s=self.overhead_s * scale,
                       host_s_per_message=self.host_s_per_message * scale)


@dataclass(frozen=True)
class StepTime:
    """One step's critical path split into what the model fits: total = compute_s + latency_s
    + link_factor x wire_s + host_s_per_byte x host_bytes + host_s_per_message x messages
    + overhead_s."""

    compute_s: float
    latency_s: float
    wire_s: float
    host_bytes: float
    messages: float = 0.0

    def total(self, c: Constants) -> float:
        return (self.compute_s + self.latency_s + c.link_factor * self.wire_s
                + c.host_s_per_byte * self.host_bytes + c.host_s_per_message * self.messages
                + c.overhead_s)


@dataclass(frozen=True)
class Link:
    """A node's full-duplex link: rate (bit/s on the wire) and one-way latency (s)."""

    rate_bps: float
    latency_s: float = 0.0

    @property
    def beta(self) -> float:
        """Seconds per payload byte."""
        return 8.0 / (self.rate_bps * GOODPUT)


def profile_link(profile: str, scale: float = 1.0, latency_s: float | None = None) -> Link:
    """A netem profile's link at `scale`; latency the profile's unless given (emulation adds
    none, so validation passes 0)."""
    if profile not in PROFILES:
        raise ValueError(f"unknown network profile {profile!r}; valid: {', '.join(PROFILES)}")
    p = PROFILES[profile]
    return Link(p.rate_bps * scale, p.latency_s if latency_s is None else latency_s)


@functools.lru_cache(maxsize=64)
def gradient_bytes(model: str, shape: str = "cifar") -> tuple[int, ...]:
    """Bytes of each trainable parameter's float32 gradient, in registration order (built on
    the meta device: no memory, no init cost)."""
    import torch

    from ddlstudy.workload.models import build_model

    with torch.device("meta"):
        net = build_model(model, shape)
    return tuple(p.numel() * 4 for p in net.parameters() if p.requires_grad)


def bucket_layout(sizes: Sequence[int], bucket_mb: float) -> list[tuple[int, int]]:
    """(bytes, index of its last gradient in backward order) per bucket, as
    strategies.make_buckets groups them (reverse parameter order, greedy up to bucket_mb)."""
    cap = int(bucket_mb * 2**20)
    buckets: list[list[int]] = []
    size = 0
    for i, nbytes in enumerate(reversed(sizes)):
        if not buckets or size + nbytes > cap and size > 0:
            buckets.append([0, i])
            size = 0
        buckets[-1][0] += nbytes
        buckets[-1][1] = i
        size += nbytes
    return [(b, last) for b, last in buckets]


def _collective(algorithm: str, nbytes: float, n: int,
                link: Link) -> tuple[float, float, float, float]:
    """(latency s, wire s, host bytes reduced, messages) of one all-reduce on the critical
    path."""
    a, b, g = terms(algorithm, nbytes, n)
    return a * link.latency_s, b * link.beta, g, a


def allreduce_step(sizes: Sequence[int], n: int, link: Link, compute_s: float, c: Constants,
                   algorithm: str = "ring_pipelined", bucket_mb: float = 25.0,
                   overlap: bool = True) -> StepTime:
    """Bucketed all-reduce: buckets reduced one after another on a communication thread, each
    launched when its last gradient is ready (backward = BACKWARD_SHARE of compute, gradients
    ready at even steps in reverse order, as replay does) or, without overlap, after backward.
    Then unpack + optimizer step over the model (2 x model bytes of host work)."""
    model_bytes = float(sum(sizes))
    forward = compute_s * (1 - BACKWARD_SHARE)
    count = len(sizes)
    # the chain of buckets ending at `end`: its start (compute), latency, wire, host, messages
    end, path = 0.0, (0.0, 0.0, 0.0, 0.0, 0.0)
    for nbytes, last in bucket_layout(sizes, bucket_mb) if n > 1 else []:
        ready = forward + compute_s * BACKWARD_SHARE * (last + 1) / count if overlap else compute_s
        lat, wire, host, msgs = _collective(algorithm, nbytes, n, link)
        if ready >= end:  # the link was idle: the chain restarts at this bucket's ready time
            path = (ready, lat, wire, host, msgs)
        else:
            path = (path[0], path[1] + lat, path[2] + wire, path[3] + host, path[4] + msgs)
        end = max(ready, end) + StepTime(0.0, lat, wire, host, msgs).total(
            replace(c, overhead_s=0.0))
    if end <= compute_s:  # every bucket finished under backward (or one worker)
        path = (compute_s, 0.0, 0.0, 0.0, 0.0)
    return StepTime(path[0], path[1], path[2], path[3] + 2 * model_bytes, path[4])


def ps_step(sizes: Sequence[int], n: int, servers: int, link: Link, compute_s: float,
            c: Constants, sync: bool = True) -> StepTime:
    """Parameter server, S servers each owning 1/S of the model. Sync: every worker pushes
    after backward, each server's link carries N x model/S in and then N x model/S out
    (a worker's own link the whole model each way), the server sums N shards and steps.
    Async: each server serves one worker at a time, so a worker's step is the longer of its own
    cycle and a server's turn round all N workers."""
    m = float(sum(sizes))
    shard = m / servers
    worker_host = 2 * m  # pack gradients, copy new weights in
    server_host = n * shard + shard  # sum N gradient shards, SGD on the shard
    if sync:
        wire = 2 * max(n * shard, m) * link.beta
        return StepTime(compute_s, 2 * link.latency_s, wire, worker_host + server_host, 2)
    own = StepTime(compute_s, 2 * link.latency_s, 2 * m * link.beta, worker_host + shard, 2)
    turn = StepTime(0.0, 2 * n * link.latency_s, 2 * n * shard * link.beta, n * 2 * shard,
                    2 * n)
    return own if own.total(c) >= turn.total(c) else turn


def predict_step(strategy: str, model: str, workers: int, link: Link, compute_s: float,
                 c: Constants = Constants(), *, servers: int | None = None,
                 algorithm: str = "ring_pipelined", bucket_mb: float = 25.0,
                 overlap: bool = True, shape: str = "cifar",
                 sizes: Sequence[int] | None = None) -> StepTime:
    """One step of `strategy` on `workers` workers: compute_s of forward + backward per worker
    (the replay table's time, in this clock), gradients of `model` (or explicit `sizes`)."""
    if strategy not in STEP_STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; valid: {', '.join(STEP_STRATEGIES)}")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    sizes = tuple(sizes) if sizes is not None else gradient_bytes(model, shape)
    spec = get_strategy(strategy)
    if spec.step_model == "allreduce_step":
        # Not algorithm-aware (ddp): the library's all-reduce, always overlapped with backward.
        aware = spec.algorithm_aware
        return allreduce_step(sizes, workers, link, compute_s, c,
                              algorithm if aware else "reference", bucket_mb,
                              overlap or not aware)
    s = servers_for(strategy, servers)
    return ps_step(sizes, workers, s, link, compute_s, c, sync=spec.sync)


def project_step(strategy: str, model: str, workers: int, profile: str, compute_s: float,
                 c: Constants = Constants(), latency_s: float | None = None,
                 **kw: Any) -> float:
    """Cluster seconds per step on a real `profile` network (its latency unless given)."""
    return predict_step(strategy, model, workers, profile_link(profile, 1.0, latency_s),
                        compute_s, c, **kw).total(c)


# ----------------------------------------------------------------------------- measured cells
CELL_COLUMNS = ("strategy", "model", "workers", "wall_s", "steps", "network", "network_scale",
                "compute_mode", "replay_s", "time_dilation")
CELL_KEY = ["strategy", "algorithm", "overlap", "servers", "bucket_mb", "model", "shape",
            "workers", "batch_size", "network", "network_scale", "replay_source"]


class RecordsError(ValueError):
    """Measured records missing or unusable; the message names the folder and the fix."""


def read_cells(dirs: Sequence[str | Path]) -> pd.DataFrame:
    """Every summary.csv under `dirs` (recursively), one row per distinct measured cell.

    A chapter's summary repeats its cells' own summaries: rows equal on the cell key and wall
    time are one measurement. Failed cells (an error) are dropped."""
    frames = []
    for d in dirs:
        root = Path(d)
        if not root.exists():
            raise RecordsError(f"{root}: no such folder; pass run folders holding summary.csv")
        files = [root] if root.is_file() else sorted(root.rglob("summary.csv"))
        frames += [pd.read_csv(f).assign(source=str(f.parent)) for f in files]
    if not frames:
        raise RecordsError(f"no summary.csv under {', '.join(map(str, dirs))}; pass a run folder "
                           "(results/reference, outputs/<run>, a train --out folder)")
    cells = pd.concat(frames, ignore_index=True)
    missing = [c for c in CELL_COLUMNS if c not in cells.columns]
    if missing:
        raise RecordsError(f"summary.csv records lack column(s) {missing}: they predate compute "
                           "replay / emulated networks; rerun them with this version")
    if "error" in cells.columns:
        cells = cells[cells["error"].isna() | (cells["error"].astype(str) == "")]
    for col in CELL_KEY:
        if col not in cells.columns:
            cells[col] = math.nan
    cells = cells.drop_duplicates(subset=[*CELL_KEY, "wall_s"]).reset_index(drop=True)
    return _merge_repeats(cells)


def _merge_repeats(cells: pd.DataFrame) -> pd.DataFrame:
    """Repeats of one cell (same key, different wall times) as one row: the median seconds per
    step (wall_s / steps with steps 1), and how many repeats it came from."""
    per_step = (cells["wall_s"] / cells["steps"]).to_numpy(dtype=float)
    key = ["|".join(map(str, row)) for row in cells[CELL_KEY].itertuples(index=False)]
    groups: dict[str, list[int]] = {}
    for i, k in enumerate(key):
        groups.setdefault(k, []).append(i)
    first = cells.iloc[[rows[0] for rows in groups.values()]].copy()
    first["wall_s"] = [float(np.median(per_step[rows])) for rows in groups.values()]
    first["steps"] = 1
    first["repeats"] = [len(rows) for rows in groups.values()]
    return first.reset_index(drop=True)


def _usable(cells: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(cells the model can predict, the rest with a reason): replayed compute on shaped links."""
    why = pd.Series("", index=cells.index)
    why[cells["compute_mode"] != "replay"] = "real compute (contended on one host)"
    why[~cells["network"].isin(list(PROFILES))] = "no shaped link profile"
    why[~(cells["network_scale"].astype(float) > 0)] = "no link scale"
    why[~cells["strategy"].isin(STEP_STRATEGIES)] = "strategy not modelled"
    for col in ("cpu_bound", "cpu_bound_risk"):
        if col in cells.columns:
            why[cells[col].fillna(False).astype(bool)] = "CPU-bound emulation (flagged)"
    return cells[why == ""].copy(), cells[why != ""].assign(skipped=why[why != ""])


def _cell_step(row: Any, c: Constants) -> StepTime:
    """The model's step for one measured cell, in emulated seconds (latency not emulated)."""
    link = profile_link(row.network, float(row.network_scale), latency_s=0.0)
    servers = None if pd.isna(row.servers) or not row.servers else int(row.servers)
    overlap = str(row.overlap).strip().lower() not in ("false", "0", "0.0")
    bucket = 25.0 if pd.isna(row.bucket_mb) else float(row.bucket_mb)
    algorithm = row.algorithm if isinstance(row.algorithm, str) and row.algorithm else "ring"
    shape = row.shape if isinstance(row.shape, str) and row.shape in SHAPES else "cifar"
    return predict_step(row.strategy, row.model, int(row.workers), link,
                        float(row.replay_s) * float(row.time_dilation), c, servers=servers,
                        algorithm=algorithm, bucket_mb=bucket, overlap=overlap, shape=shape)


def fit_constants(cells: pd.DataFrame, rounds: int = 8) -> Constants:
    """Fit the Constants to cells by relative least squares, every constant >= 0 and the link
    factor >= 1 (a shaped link never carries more than its rate x GOODPUT). The critical path
    depends on the constants (overlap), so fit, re-derive the paths, fit again.

    At least two fit cells per constant: with k fit cells only the first max(1, k // 2) of
    (link_factor, overhead_s, host_s_per_byte, host_s_per_message) are fitted, the rest keep
    their defaults, as does a constant no fit cell depends on (no wire time among them, say)."""
    c = Constants()
    if cells.empty:
        return c
    y = (cells["wall_s"] / cells["steps"]).to_numpy(dtype=float)
    w = 1.0 / y
    for _ in range(rounds):
        parts = [_cell_step(r, c) for r in cells.itertuples()]
        cols = np.array([[p.wire_s, 1.0, p.host_bytes, p.messages] for p in parts])
        # the link factor is fitted as 1 + excess, excess >= 0
        vals = np.array([c.link_factor - 1, c.overhead_s, c.host_s_per_byte,
                         c.host_s_per_message])
        free = [j for j in range(4) if np.any(cols[:, j] > 0)][:max(1, len(cells) // 2)]
        fixed_cols = [j for j in range(4) if j not in free]
        rest = np.array([p.compute_s + p.latency_s + p.wire_s for p in parts])
        rest += cols[:, fixed_cols] @ vals[fixed_cols]
        vals[free] = _nnls(cols[:, free] * w[:, None], (y - rest) * w)
        new = Constants(link_factor=1 + float(vals[0]), overhead_s=float(vals[1]),
                        host_s_per_byte=float(vals[2]), host_s_per_message=float(vals[3]))
        if new == c:
            break
        c = new
    return c


def split_cells(cells: pd.DataFrame) -> pd.Series:
    """Deterministic fit/validate split: in order of measured step time, the 2nd, 5th, 8th, ...
    shortest cells fit the constants (at most a third of the cells), the rest only validate.
    Spreading the fit over the range of step times lets it see both the short cells, where the
    host's overheads show, and the long, link-bound ones."""
    order = (cells["wall_s"] / cells["steps"]).sort_values(kind="stable").index
    fit = pd.Series(False, index=cells.index)
    fit[order[1::3][:len(cells) // 3]] = True
    return fit


def validate(cells: pd.DataFrame) -> tuple[pd.DataFrame, Constants]:
    """Measured vs predicted seconds per step for every usable cell, constants fitted on the
    split's fit cells; rel_error = (predicted - measured) / measured."""
    usable, _ = _usable(cells)
    if usable.empty:
        raise RecordsError("no cell has replayed compute on a shaped link profile: nothing the "
                           "model can predict (run an emulated grid, e.g. params/emulated.yaml)")
    usable["role"] = np.where(split_cells(usable), "fit", "validate")
    c = fit_constants(usable[usable["role"] == "fit"])
    usable["measured_s"] = usable["wall_s"] / usable["steps"]
    usable["predicted_s"] = [_cell_step(r, c).total(c) for r in usable.itertuples()]
    usable["rel_error"] = (usable["predicted_s"] - usable["measured_s"]) / usable["measured_s"]
    usable["images_per_sec_cluster"] = (usable["workers"] * usable["batch_size"]
                                        / (usable["measured_s"] * usable["network_scale"]))
    cols = ["strategy", "algorithm", "overlap", "model", "workers", "servers", "network",
            "network_scale", "role", "measured_s", "predicted_s", "rel_error", "shape",
            "batch_size", "replay_source", "images_per_sec_cluster", "source"]
    return usable[cols].reset_index(drop=True), c


def validation_summary(table: pd.DataFrame) -> tuple[float, int]:
    """(median |relative error| over the validation cells, their count); NaN if none."""
    held = table[table["role"] == "validate"]["rel_error"].abs()
    return (float(held.median()) if len(held) else math.nan), int(len(held))


@dataclass(frozen=True)
class Validation:
    """What a projection states beside its curves: the validated constants (or none) and how
    well the model matched the held-out cells."""

    table: pd.DataFrame
    constants: Constants
    median_error: float
    n_cells: int
    scale: float
    note: str

    def cluster_constants(self) -> Constants:
        """The constants for a real cluster, in its seconds: the link factor as fitted, the host
        overheads x scale (cluster-equivalent), and no per-message host cost: on the emulator it
        stands in for the latency the links lack, on a cluster the profile's latency is that
        cost. Analytic constants when not validated."""
        if self.n_cells == 0:
            return Constants(host_s_per_byte=0.0)
        return replace(self.constants.to_cluster(self.scale), host_s_per_message=0.0)

    @property
    def label(self) -> str:
        """'projected (model validated to X % on N cells)', or why it is not."""
        if self.n_cells == 0:
            return f"projected (model not validated: {self.note})"
        return (f"projected (model validated to {self.median_error:.0%} median relative error on "
                f"{self.n_cells} held-out cells)")


def validation_for(dirs: Sequence[str | Path]) -> Validation:
    """validate() over the existing folders among `dirs`; an empty Validation (analytic
    constants) with the reason when they hold no predictable cell."""
    found = [d for d in dirs if Path(d).exists()]
    where = ", ".join(str(d) for d in dirs) or "no folder"
    try:
        if not found:
            raise RecordsError(f"none of {where} exists")
        table, c = validate(read_cells(found))
    except RecordsError as err:
        why = str(err) if str(err).startswith("none of") else (
            f"no measured cell with replayed compute on shaped links in {where}")
        return Validation(pd.DataFrame(), Constants(host_s_per_byte=0.0), math.nan, 0, 1.0, why)
    med, n = validation_summary(table)
    scale = float(table["network_scale"].astype(float).median())
    if n == 0:
        return Validation(table, c, math.nan, 0, scale, "every measured cell went to the fit")
    return Validation(table, c, med, n, scale, "")


def project(models: Sequence[str], strategies: Sequence[str], workers: Sequence[int],
            profiles: Sequence[str], c: Constants, *, replay_source: str = "gpu",
            shape: str = "cifar", batch_size: int = 32, servers: Sequence[int | None] = (None,),
            bucket_mb: Sequence[float] = (25.0,), algorithm: str = "ring_pipelined",
            latency_s: float | None = None, compute_scale: float = 1.0) -> pd.DataFrame:
    """Projected cluster seconds per step, images/sec and scaling efficiency for a grid.

    Compute per worker step is the replay table's forward + backward (x compute_scale, a
    what-if); efficiency is images/sec over N x one worker alone (forward, backward and
    update, no communication: the single-GPU baseline of Wang (NCHC) and Malik 2018).
    servers: PS server counts to try (None: the strategy's default; 0: S = N, the BytePS
    arrangement)."""
    from ddlstudy.workload import replay

    table = replay.load_table(replay_source)
    rows = []
    for model, strategy, profile, b in itertools.product(models, strategies, profiles, bucket_mb):
        compute = replay.compute_time(table, model, shape, batch_size) * compute_scale
        sizes = gradient_bytes(model, shape)
        link = profile_link(profile, 1.0, latency_s)
        alone = predict_step("allreduce", model, 1, link, compute, c, sizes=sizes).total(c)
        for s in servers if strategy in PS_STEP else ("",):
            for n in sorted({1, *workers}):
                nserv = (n if s == 0 else s) if strategy in PS_STEP else None
                step = predict_step(strategy, model, n, link, compute, c, servers=nserv,
                                    algorithm=algorithm, bucket_mb=b, sizes=sizes).total(c)
                rows.append({"model": model, "strategy": strategy, "profile": profile,
                             "servers": nserv or 0,
                             "servers_rule": "N" if s == 0 else str(s or ""),
                             "bucket_mb": b, "workers": n, "compute_s": compute, "step_s": step,
                             "images_per_sec": n * batch_size / step,
                             "efficiency": alone / step})
    out = pd.DataFrame(rows)
    out["speedup"] = out["efficiency"] * out["workers"]
    out = out[out["workers"].isin(list(workers))]
    return out.assign(source="projected").reset_index(drop=True)


# ============================================================================= all-reduce alone
# Chapter 05's check of the collective formulas on shaped links: each (algorithm, ranks, size)
# point predicted as (messages on the critical path) alpha + (bytes on it) / (link rate x
# GOODPUT); the rate is the profile's emulated one (given, not fitted), alpha the host's own cost
# per message (the emulation adds no latency), fitted on every third point in order of measured
# time and held out on the rest, as `validate` does for steps.
LINK_COLUMNS = ("algorithm", "ranks", "size_bytes", "time_p50_s", "link_bps")


def fit_alpha(points: pd.DataFrame) -> float:
    """Least-squares alpha >= 0 (relative weights) of time - bytes x beta over `points`."""
    a = points["messages"].to_numpy(float)
    y = (points["time_p50_s"] - points["wire_s"]).to_numpy(float)
    w = 1.0 / points["time_p50_s"].to_numpy(float) ** 2
    denom = float((w * a * a).sum())
    return max(0.0, float((w * a * y).sum() / denom)) if denom > 0 else 0.0


def validate_collectives(bench: pd.DataFrame) -> tuple[pd.DataFrame, float]:
    """Measured vs alpha-beta time per point (see the block comment); returns the table (role
    fit/validate, rel_error = (pred - meas) / meas) and the fitted alpha in seconds."""
    missing = set(LINK_COLUMNS) - set(bench)
    if missing:
        raise RecordsError(f"collectives records lack {', '.join(sorted(missing))}: run the "
                           "bench on shaped links (chapter 05's emulated all-reduce section)")
    err = bench["error"].astype(object) if "error" in bench else pd.Series("", index=bench.index)
    ok = bench[(err.fillna("").astype(str).isin(["", "nan"])) & (bench["ranks"] > 1)
               & bench["algorithm"].isin(list(ALGORITHMS))]
    ok = ok[ok["algorithm"] != "reference"]  # gloo's own algorithm: its schedule is not ours
    pts = (ok.groupby(["algorithm", "ranks", "size_bytes"], as_index=False)
           .agg(time_p50_s=("time_p50_s", "median"), link_bps=("link_bps", "median"),
                repeats=("time_p50_s", "size")))
    if len(pts) < 3:
        raise RecordsError(f"{len(pts)} usable all-reduce point(s) on shaped links: need 3 or "
                           "more (two algorithms or sizes)")
    coef = [terms(r.algorithm, r.size_bytes, int(r.ranks)) for r in pts.itertuples()]
    pts["messages"] = [c[0] for c in coef]
    pts["wire_s"] = [c[1] * 8 / (r.link_bps * GOODPUT) for c, r in zip(coef, pts.itertuples(),
                                                                       strict=True)]
    order = pts["time_p50_s"].rank(method="first").astype(int) - 1
    pts["role"] = np.where(order % 3 == 1, "fit", "validate")
    alpha = fit_alpha(pts[pts["role"] == "fit"])
    pts["predicted_s"] = pts["messages"] * alpha + pts["wire_s"]
    pts["rel_error"] = (pts["predicted_s"] - pts["time_p50_s"]) / pts["time_p50_s"]
    return pts.rename(columns={"time_p50_s": "measured_s"}), alpha


def read_link_bench(dirs: Sequence[str | Path]) -> pd.DataFrame:
    """Every collectives_emulated.csv below `dirs` (chapter 05's all-reduce on shaped links)."""
    paths = [p for d in dirs for p in sorted(Path(d).rglob("collectives_emulated.csv"))]
    if not paths:
        raise RecordsError(f"no collectives_emulated.csv under {', '.join(map(str, dirs))}: "
                           "run chapter 05 as root (its all-reduce-on-shaped-links section)")
    return pd.concat([pd.read_csv(p) for p in paths], ignore_index=True)


def _main_collectives(dirs: Sequence[str]) -> int:
    """`validate-collectives DIR...`: one row per point, then the median relative error line."""
    try:
        table, alpha = validate_collectives(read_link_bench(dirs))
    except (RecordsError, OSError, pd.errors.ParserError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    fit_n = int((table["role"] == "fit").sum())
    print(f"# all-reduce on shaped links: beta from each point's emulated link rate x goodput "
          f"{GOODPUT:.3f} (not fitted); alpha {alpha * 1e3:.2f} ms per message fitted on "
          f"{fit_n} of {len(table)} points (every third by measured time)")
    show = table[["algorithm", "ranks", "size_bytes", "link_bps", "measured_s", "predicted_s",
                  "rel_error", "role"]].round({"measured_s": 4, "predicted_s": 4,
                                               "rel_error": 3})
    print(show.to_string(index=False))
    held = table.loc[table["role"] == "validate", "rel_error"].abs()
    print(f"median relative error: {held.median():.2f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m ddlstudy.costmodel validate DIR...`: the step model against measured cells."""
    parser = argparse.ArgumentParser(prog="python -m ddlstudy.costmodel",
                                     description="Validate the step-time model on measured "
                                     "summary.csv records (emulated seconds per step).")
    sub = parser.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("validate", help="measured vs predicted seconds per step, per cell")
    v.add_argument("dirs", nargs="+", help="run folders, searched recursively for summary.csv")
    vc = sub.add_parser("validate-collectives", help="all-reduce alone on shaped links: "
                        "measured vs alpha-beta at the link's emulated rate, per point")
    vc.add_argument("dirs", nargs="+", help="folders searched for collectives_emulated.csv")
    args = parser.parse_args(argv)
    if args.cmd == "validate-collectives":
        return _main_collectives(args.dirs)
    try:
        cells = read_cells(args.dirs)
        table, c = validate(cells)
    except (RecordsError, OSError, pd.errors.ParserError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    skipped = _usable(cells)[1]
    fit_n = int((table["role"] == "fit").sum())
    print(f"# seconds per step as measured (emulated clock; x network_scale = cluster-equivalent)"
          f"; constants fitted on {fit_n} of {len(table)} cells (every third in order of step "
          f"time, from the 2nd shortest): link_factor {c.link_factor:.3f}, "
          f"host {c.host_s_per_byte * 1e9:.3f} ns/B, {c.host_s_per_message * 1e3:.2f} ms per "
          f"message, overhead {c.overhead_s:.3f} s; "
          f"{len(skipped)} record(s) skipped")
    show = table.drop(columns=["source", "shape", "batch_size", "replay_source",
                               "images_per_sec_cluster"]).assign(
        measured_s=table["measured_s"].round(3), predicted_s=table["predicted_s"].round(3),
        rel_error=table["rel_error"].round(3))
    print(show.to_string(index=False))
    med, n = validation_summary(table)
    if n == 0:
        print("error: every usable cell went to the fit; measure at least 2 cells more",
              file=sys.stderr)
        return 2
    print(f"median relative error: {med:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
