"""Host contention beside measured cells: each repeat's host load when its record was written
at its end (its meta.json `host.load_avg`, 1-minute), the share of its timed chunks in which
some task on the host waited for a CPU (its summary's `host_cpu_pressure`, measured over the
chunks themselves; records written before 2026-11-27 lack it), its seconds per step, how far
apart its workers finished (steps.csv), and, per cell, how its step time moves with that load
across the repeats (least squares slope, correlation, the step at a given load: measured where
a repeat ran there, extrapolated otherwise).

Why: every emulated cell shares one small host with whatever else ran then, and the emulated
links are moved by that host's CPUs. A cell whose repeats all ran on a loaded host measures the
host as well as its links, and the step model (which charges links, latency and the fitted
host constants, not other jobs) cannot be expected to match it. Issue 21, item 5: the
co-located PS's repeats ran at 1-minute load 8.6-25.7 on 2 cores and its step time rises with
that load (r 0.97 / 0.99 at 3 / 6 workers), while the ring's and the naive PS's medians came
from repeats at load 3-10. Descriptive only: nothing here enters the step model's fit.

The finish spread (last worker's compute + wait minus the first's, per step, median) is the
other check: the step model shares a bottleneck equally among its flows, so every worker of a
parameter server gets its last pull at the same instant (spread 0); a spread of seconds says
TCP shared the server's link unequally.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ddlstudy.analysis.costmodel.cells import RecordsError

CELL = ["strategy", "algorithm", "model", "workers", "servers", "network"]


def _load_1m(meta: dict) -> float:
    loads = (meta.get("host") or {}).get("load_avg") or []
    return float(loads[0]) if loads else math.nan


def _finish_spread(steps: pd.DataFrame) -> float:
    """Median over steps of (last worker's compute + wait) - (first worker's)."""
    need = {"role", "step", "compute_s", "comm_wait_s"}
    if not need <= set(steps.columns):
        return math.nan
    w = steps[steps["role"] == "worker"]
    if w.empty:
        return math.nan
    end = w["compute_s"] + w["comm_wait_s"]
    spread = end.groupby(w["step"]).agg(lambda x: x.max() - x.min())
    return float(spread.median())


def repeat_table(dirs: Sequence[str | Path]) -> pd.DataFrame:
    """One row per measured repeat: every folder under `dirs` holding a one-cell summary.csv
    with its meta.json and steps.csv (a run folder; a chapter's summary of many cells, which
    has no steps.csv, is left out: its meta.json is the sitting's, not the cell's)."""
    rows = []
    for d in dirs:
        root = Path(d)
        if not root.exists():
            raise RecordsError(f"{root}: no such folder; pass run folders holding summary.csv")
        for f in sorted(root.rglob("summary.csv")):
            meta, steps = f.parent / "meta.json", f.parent / "steps.csv"
            if not (meta.exists() and steps.exists()):
                continue
            cell = pd.read_csv(f)
            if len(cell) != 1 or "error" in cell and str(cell["error"].iloc[0]) not in ("", "nan"):
                continue
            s = cell.iloc[0]
            m = json.loads(meta.read_text())
            row = {c: s.get(c, math.nan) for c in CELL}
            row.update(step_s=float(s["wall_s"]) / max(1, int(s["steps"])),
                       load_1m=_load_1m(m), cpu_count=(m.get("host") or {}).get("cpu_count"),
                       cpu_pressure=float(s.get("host_cpu_pressure", math.nan)),
                       server_update_s=float(s.get("server_update_s", math.nan)),
                       finish_spread_s=_finish_spread(pd.read_csv(steps)),
                       created=m.get("created", ""), source=str(f.parent))
            rows.append(row)
    if not rows:
        raise RecordsError(f"no run folder (summary.csv, meta.json, steps.csv) under "
                           f"{', '.join(map(str, dirs))}")
    return pd.DataFrame(rows)


def load_sensitivity(table: pd.DataFrame, at_load: float | None = None) -> pd.DataFrame:
    """Per cell: repeats, load range, step range, the step of its least loaded repeat,
    slope (s per unit of 1-minute load), Pearson r, median finish spread and, with `at_load`,
    the step read off the least-squares line there (labelled measured when a repeat ran within
    1 of that load, else extrapolated: a line, not a model; it knows no floor such as the
    link-bound time). Cells of one repeat or one load get no line."""
    if table.empty:
        return pd.DataFrame()
    out = []
    keys = ["|".join(map(str, row)) for row in table[CELL].itertuples(index=False)]
    for _, g in table.groupby(keys, sort=False):
        x, y = g["load_1m"].to_numpy(float), g["step_s"].to_numpy(float)
        ok = ~(np.isnan(x) | np.isnan(y))
        x, y = x[ok], y[ok]
        slope = r = at = math.nan
        if len(x) >= 2 and np.ptp(x) > 0:
            slope, icpt = np.polyfit(x, y, 1)
            r = float(np.corrcoef(x, y)[0, 1]) if np.ptp(y) > 0 else math.nan
            at = math.nan if at_load is None else float(slope * at_load + icpt)
        near = at_load is not None and len(x) and float(np.min(np.abs(x - at_load))) <= 1.0
        first = g.iloc[0]
        out.append({**{c: first[c] for c in CELL}, "repeats": int(len(x)),
                    "load_min": float(x.min()) if len(x) else math.nan,
                    "load_max": float(x.max()) if len(x) else math.nan,
                    "step_min_s": float(y.min()) if len(y) else math.nan,
                    "step_max_s": float(y.max()) if len(y) else math.nan,
                    "step_at_load_min_s": float(y[np.argmin(x)]) if len(x) else math.nan,
                    "slope_s_per_load": float(slope), "r": r,
                    "finish_spread_s": float(g["finish_spread_s"].median()),
                    "cpu_pressure_max": float(g["cpu_pressure"].max()),
                    "at_load": math.nan if at_load is None else float(at_load),
                    "step_at_load_s": at,
                    "at_load_is": "" if at_load is None else
                    ("measured" if near else "extrapolated")})
    return pd.DataFrame(out)


def main_contention(dirs: Sequence[str], at_load: float | None = None) -> int:
    """`python -m ddlstudy.costmodel contention DIR...`: the per-cell table, then one line per
    cell whose step time follows the host load (r >= 0.9)."""
    try:
        table = repeat_table(dirs)
    except (RecordsError, OSError, ValueError) as err:
        print(f"error: {err}")
        return 2
    sens = load_sensitivity(table, at_load)
    print(f"# host load (1-minute, when each repeat's record was written) against seconds per "
          f"step, per cell; "
          f"{len(table)} repeats; step_at_load_min_s: the least loaded repeat's; finish spread: "
          f"last minus first worker's end of step, median; cpu_pressure_max: the largest share "
          f"of a repeat's timed chunks in which some task waited for a CPU (blank: not recorded)"
          + ("" if at_load is None else f"; step at load {at_load:g} from each cell's "
             "least-squares line (measured: a repeat ran within 1 of it; else extrapolated)"))
    cols = ["strategy", "workers", "servers", "network", "repeats", "load_min", "load_max",
            "step_min_s", "step_max_s", "step_at_load_min_s", "slope_s_per_load", "r",
            "finish_spread_s", "cpu_pressure_max"]
    cols += [] if at_load is None else ["step_at_load_s", "at_load_is"]
    print(sens[cols].round(3).to_string(index=False))
    for row in sens[sens["r"] >= 0.9].itertuples():
        print(f"#   {row.strategy} x{row.workers} ({row.network}): step time follows host load "
              f"(r {row.r:.2f}, {row.slope_s_per_load:+.3f} s per unit over load "
              f"{row.load_min:g}-{row.load_max:g})")
    return 0
