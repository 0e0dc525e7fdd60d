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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from ddlstudy.collectives import PIPELINE_SEGMENT_BYTES
from ddlstudy.collectives.registry import ALGORITHMS as ALGORITHM_REGISTRY
from ddlstudy.collectives.registry import cost_terms
from ddlstudy.network.profiles import PROFILES
from ddlstudy.registry import LiveNames

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
                     "algbw_GBps": algbw, "busbw_GBps": algbw * 2 * (p - 1) / p})
    return pd.DataFrame(rows)
