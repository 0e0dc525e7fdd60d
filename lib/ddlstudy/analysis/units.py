"""The unit an interval is drawn over, per training cell: interleaved repeats, else timed chunks.

A verdict needs at least two values per cell. Cells that ran two or more interleaved repeats
give one images/sec per repeat (independent runs). Emulated cells run once (`network.repeats:
1` keeps `make report` short), so their values are the run's timed chunks (ddlstudy.train.trainer:
barrier-to-barrier windows over every rank, one images/sec each). Chunks of one run are NOT
independent runs: their interval covers the step-to-step spread inside that run (link
scheduling, host noise), not run-to-run variation (a fresh cluster, another moment's load).
Every interval drawn over chunks says so (`UNIT_NOTE`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ddlstudy.analysis import stats
from ddlstudy.strategies.registry import arm_label

REPEATS, CHUNKS = "repeats", "timed chunks"
UNIT_NOTE = {
    REPEATS: "interleaved repeats (independent runs)",
    CHUNKS: "timed chunks of one run per cell (not independent runs: the interval covers the "
            "step-to-step spread inside each run, not run-to-run variation)",
}
# `servers` keeps a PS with S = 3 server nodes apart from the same strategy with S = 1 (chapter
# 03's testbed folders hold both) whenever a cell names its server count.
IDENTITY = ("strategy", "model", "workers", "servers", "network")


def label_arms(df: pd.DataFrame) -> pd.DataFrame:
    """`df` with each parameter server whose server count is not its strategy's default under a
    strategy name of its own (`ps_overlap (S = 3)`, strategies.registry.arm_label), so figures,
    medians and speed-ups never pool runs of one server with runs of three. A view only: records
    keep the registry's name and the `servers` column. Without `servers`: `df` unchanged."""
    if "servers" not in df or df.empty:
        return df
    return df.assign(strategy=[arm_label(a, b) for a, b in zip(df["strategy"], df["servers"],
                                                                 strict=True)])


def chunk_rates(runs_root: Path) -> pd.DataFrame:
    """Every timed chunk under a chapter's runs/ folder: the cell's identity (IDENTITY, cpu_bound,
    time_dilation), `part` (its repeat folder), `chunk` and cluster-equivalent images_per_sec
    (measured x time_dilation, the scale at which summaries compare cells)."""
    frames = []
    for path in sorted(Path(runs_root).rglob("chunks.csv")):
        summary_path = path.parent / "summary.csv"
        if not summary_path.exists():
            continue
        cell = pd.read_csv(summary_path).iloc[0]
        if str(cell.get("error", "") or "") not in ("", "nan"):
            continue
        chunks = pd.read_csv(path)
        if chunks.empty or "images_per_sec" not in chunks:
            continue
        dilation = float(cell.get("time_dilation", 1.0) or 1.0)
        ident = {k: cell.get(k) for k in IDENTITY}
        frames.append(chunks[["chunk", "images_per_sec"]].assign(
            images_per_sec=chunks["images_per_sec"] * dilation, part=path.parent.name,
            cpu_bound=str(cell.get("cpu_bound", False)).lower() == "true", **ident))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _select(df: pd.DataFrame, where: dict[str, Any]) -> pd.DataFrame:
    for key, val in where.items():
        if key in df:
            df = df[df[key] == val]
    return df


def cell_values(summary: pd.DataFrame, chunks: pd.DataFrame, cells: Sequence[dict[str, Any]],
                column: str = "images_per_sec") -> tuple[list[pd.Series], str]:
    """Per cell (a dict of identity columns), its values and the unit they share: every cell's
    per-repeat `column` when each has >= stats.MIN_REPEATS repeats, else every cell's timed
    chunks (one unit for all, so no comparison mixes runs with chunks); the repeats, however
    few, when some cell has no chunks on record (the verdict then says how few)."""
    by_repeat = []
    for where in cells:
        rows = _select(summary, where)
        rows = rows if "repeat" in rows else rows.assign(repeat=0)
        by_repeat.append(rows.groupby("repeat")[column].median() if len(rows)
                         else pd.Series(dtype=float))
    if all(len(s) >= stats.MIN_REPEATS for s in by_repeat):
        return by_repeat, REPEATS
    clean = chunks[~chunks["cpu_bound"]] if not chunks.empty else chunks
    timed = [_select(clean, where)["images_per_sec"].reset_index(drop=True)
             if not clean.empty else pd.Series(dtype=float) for where in cells]
    if any(s.empty for s in timed):  # no chunks on record: the repeats, however few
        return by_repeat, REPEATS
    return timed, CHUNKS


def speedup_ratio(summary: pd.DataFrame, chunks: pd.DataFrame, a: dict[str, Any],
                  b: dict[str, Any], top: int) -> tuple[stats.Interval, str]:
    """(a's images/sec at `top` over at 1 worker) / (b's, the same), with its interval and unit.

    Over repeats: per-repeat speed-ups, paired bootstrap (interleaved repeats were measured
    together). Over chunks: the four cells' chunks each resampled alone."""
    cells = [{**a, "workers": top}, {**a, "workers": 1}, {**b, "workers": top},
             {**b, "workers": 1}]
    values, unit = cell_values(summary, chunks, cells)
    if unit == REPEATS:
        sa, sb = values[0] / values[1], values[2] / values[3]
        common = sa.dropna().index.intersection(sb.dropna().index)
        return stats.ratio_ci(sa.loc[common], sb.loc[common]), unit
    return stats.ratio_of_ratios_ci(*values), unit
