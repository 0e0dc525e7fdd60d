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
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from ddlstudy.collectives import PIPELINE_SEGMENT_BYTES

ALGORITHMS = ("ring", "ring_pipelined", "recursive_doubling", "rabenseifner", "tree", "ps",
              "ps_sharded", "reference")

# Named links: alpha in s (small-message one-way latency), beta in s/byte (1 / line rate).
# Line rates are the standards' data rates (IEEE 802.3ab 1000BASE-T 1 Gb/s; 802.3ae 10 Gb/s;
# 802.3by 25 Gb/s; InfiniBand EDR 4x 100 Gb/s after 64b/66b coding); real goodput is 5-10% lower.
# Latencies are order-of-magnitude MPI ping-pong figures: TCP over Ethernet tens of us
# (kernel stack + NIC interrupt moderation), RDMA over InfiniBand about 1 us (Mellanox/NVIDIA
# ConnectX-4/5 EDR adapters quote sub-1 us, OSU micro-benchmarks show 1-1.5 us). Re-measure
# your own with `python -m ddlstudy.cluster --check` and fit() before trusting a prediction.
NETWORKS: dict[str, dict[str, float]] = {
    "1GbE": {"alpha": 50e-6, "beta": 8 / 1e9},
    "10GbE": {"alpha": 20e-6, "beta": 8 / 10e9},
    "25GbE": {"alpha": 10e-6, "beta": 8 / 25e9},
    "IB-EDR": {"alpha": 1.5e-6, "beta": 8 / 100e9},
}


def _lg(p: int) -> int:
    """floor(lg p): rounds of the power-of-two core."""
    return p.bit_length() - 1


def _clg(p: int) -> int:
    """ceil(lg p): depth of a binomial tree over p ranks."""
    return (p - 1).bit_length()


def terms(algorithm: str, nbytes: float, p: int,
          segment_bytes: int = PIPELINE_SEGMENT_BYTES) -> tuple[float, float, float]:
    """The (alpha, beta, gamma) coefficients: T = a*alpha + b*beta + g*gamma."""
    n = float(nbytes)
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; valid: {', '.join(ALGORITHMS)}")
    if p < 1:
        raise ValueError(f"p must be >= 1, got {p}")
    if p == 1:
        return 0.0, 0.0, 0.0
    frac = (p - 1) / p
    if algorithm in ("ring", "ps_sharded", "reference"):
        # reference: torch/gloo's CPU all_reduce is a ring for these sizes.
        return 2 * (p - 1), 2 * frac * n, frac * n
    if algorithm == "ring_pipelined":
        # S segments per chunk, each its own message; the reduction of a segment overlaps the
        # transfer of the next, so only one segment's reduction per step stays exposed.
        s = max(1, math.ceil(n / p / segment_bytes))
        return 2 * (p - 1) * s, 2 * frac * n, frac * n / s
    if algorithm == "tree":
        d = _clg(p)
        return 2 * d, 2 * d * n, d * n
    if algorithm == "ps":
        # The server's link carries p-1 buffers in and p-1 out, one after another.
        return 2 * (p - 1), 2 * (p - 1) * n, (p - 1) * n
    pof2 = 1 << _lg(p)
    fold = (2.0, 2 * n, n) if pof2 != p else (0.0, 0.0, 0.0)
    lg = _lg(p)
    if algorithm == "recursive_doubling":
        core = (lg, lg * n, lg * n)
    else:  # rabenseifner
        f = (pof2 - 1) / pof2
        core = (2 * lg, 2 * f * n, f * n)
    return core[0] + fold[0], core[1] + fold[1], core[2] + fold[2]


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
        algorithms: Iterable[str] | None = None) -> dict[str, float]:
    """Fit alpha, beta, gamma >= 0 to measured times over all algorithms' rows.

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
    return {"alpha": float(x[0]), "beta": float(x[1]), "gamma": float(x[2]),
            "rows": len(rows),
            "median_abs_rel_err": float(np.median(np.abs(pred - y) / y))}


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
