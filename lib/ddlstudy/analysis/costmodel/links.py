"""All-reduce alone on shaped links (chapter 05): each (algorithm, ranks, size) point predicted as
(messages on the critical path) alpha + (bytes on it) / (link rate x GOODPUT); the rate is the
profile's emulated one (given, not fitted), alpha the host's own cost per message (the emulation
adds no latency), fitted on every third point in order of measured time and held out on the rest,
as `validate` does for steps.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ddlstudy.analysis.costmodel.alphabeta import ALGORITHMS, terms
from ddlstudy.analysis.costmodel.cells import RecordsError
from ddlstudy.analysis.costmodel.step import GOODPUT

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
