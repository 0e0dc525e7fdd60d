"""One slow worker: what it costs synchronous vs asynchronous training (issue 25, item 3).

A cell is an *arm* (a strategy, with its algorithm and ranks per node) at N workers, once
without and once with worker `rank` slowed (TrainConfig.straggler_*: replayed compute x factor,
or a fixed wait before each of its steps). Cells run interleaved through `grid.run_grid`, on
the emulated cluster with replayed compute (as chapter 03's emulated cells) or on local engines.

Why two rates: every worker runs the same number of steps per timed chunk, and a chunk ends at
a barrier, so the chunk window (`images_per_sec`) waits for the straggler even under async PS,
whose fast workers in fact sit idle at the barrier. `images_per_sec_sustained` = sum over
workers of batch / that worker's median step time is the rate each worker keeps up on its own:
equal to the window's rate for synchronous strategies (each step waits for all), and what async
PS would reach if its fast workers went on. Both go into the table; claims read the second.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from ddlstudy.analysis import stats
from ddlstudy.experiments import grid
from ddlstudy.records import store as records
from ddlstudy.train.config import TrainConfig


@dataclass(frozen=True)
class Arm:
    """A strategy as the straggler table names it: `gpus_per_node` > 1 puts k ranks on one
    (emulated) node, which the `hierarchical` algorithm needs to differ from a flat ring."""

    name: str
    strategy: str
    algorithm: str = "ring"
    gpus_per_node: int = 1


ARMS = {a.name: a for a in (
    Arm("ps_sync", "ps_sync"),
    Arm("ps_async", "ps_async"),
    Arm("ring", "allreduce", "ring_pipelined"),
    Arm("hierarchical", "allreduce", "hierarchical", gpus_per_node=2),
    Arm("zero1", "zero1"),
)}
TABLE_COLUMNS = ["arm", "strategy", "algorithm", "workers", "straggler_rank", "factor",
                 "delay_s", "repeat", "images_per_sec", "images_per_sec_cluster",
                 "images_per_sec_sustained", "step_time_p50_s", "straggler_step_s",
                 "others_step_s", "staleness_mean", "staleness_max", "gpus_per_node",
                 "compute_mode", "network", "error"]


def cells(base: TrainConfig, arms: Sequence[str], workers: Sequence[int],
          factors: Sequence[float], rank: int = 1, delay_s: float = 0.0
          ) -> list[tuple[Arm, TrainConfig]]:
    """Every arm x worker count x (no straggler, then each factor > 1): (arm, validated config).
    A factor of 1 with `delay_s` > 0 is the fixed-delay straggler."""
    out = []
    for name in arms:
        if name not in ARMS:
            raise ValueError(f"unknown straggler arm {name!r}; valid: {', '.join(ARMS)}")
        arm = ARMS[name]
        for n in workers:
            if rank >= n:
                raise ValueError(f"straggler rank {rank} needs more than {n} workers")
            plain = replace(base, strategy=arm.strategy, algorithm=arm.algorithm, workers=n,
                            servers=None, straggler_rank=None, straggler_factor=1.0,
                            straggler_delay_s=0.0)
            out.append((arm, plain.validate()))
            for f in factors:
                if f == 1.0 and not delay_s:
                    continue
                out.append((arm, replace(plain, straggler_rank=rank, straggler_factor=float(f),
                                         straggler_delay_s=float(delay_s)).validate()))
    return out


def _set_gpus_per_node(k: int) -> int:
    """On an engine: ranks per node for `hierarchical` (the env var its strategy falls back to)."""
    from ddlstudy.collectives.hierarchical import ENV

    os.environ[ENV] = str(int(k))
    return int(k)


def run_cells(cluster: Any, arm_configs: Sequence[tuple[Arm, TrainConfig]], out: str | Path,
              repeats: int = 1) -> pd.DataFrame:
    """The cells on one started cluster (ranks per node: the cluster's own, or on local engines
    set here from the arms, which must then agree); the tidy table (`table`)."""
    arms = {a.gpus_per_node for a, _ in arm_configs}
    if len(arms) > 1:
        raise ValueError(f"arms with different ranks per node {sorted(arms)} need separate "
                         "clusters: use run()")
    gpn = arms.pop() if arms else 1
    if not getattr(cluster, "emulated_network", None):
        cluster.run(_set_gpus_per_node, gpn, world_size=cluster.size)
    configs = grid.dilate([c for _, c in arm_configs], cluster)
    try:
        summary = grid.run_grid(cluster, configs, out, repeats=repeats)
    finally:
        if not getattr(cluster, "emulated_network", None):
            cluster.run(_set_gpus_per_node, 1, world_size=cluster.size)
    return table(summary, arm_configs, out, repeats, gpn)


def run(arm_configs: Sequence[tuple[Arm, TrainConfig]], out: str | Path, network: str = "none",
        scale: float | None = None, repeats: int = 1, offload_off: bool = False,
        **cluster_kwargs: Any) -> pd.DataFrame:
    """Every cell, one cluster per ranks-per-node group (emulated links when `network` names a
    profile, else local engines); the tidy table of all of them."""
    frames = []
    groups: dict[int, list[tuple[Arm, TrainConfig]]] = {}
    for arm, config in arm_configs:
        groups.setdefault(arm.gpus_per_node, []).append((arm, config))
    for gpn, part in groups.items():
        engines = grid.engines_needed([c for _, c in part])
        node_kw = {"gpus_per_node": gpn} if network != "none" else {}
        with grid.emulated_cluster(network, engines, scale, offload_off=offload_off,
                                   **node_kw, **cluster_kwargs) as cluster:
            frames.append(run_cells(cluster, part, out, repeats))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=TABLE_COLUMNS)


def sustained(steps: pd.DataFrame, slow_rank: int | None = None) -> tuple[float, float, float]:
    """From a run's steps table: (sum over workers of images per median step, the median step
    time of worker `slow_rank`, that of the other workers); NaN where absent."""
    w = steps[steps["role"] == "worker"] if "role" in steps else steps.iloc[0:0]
    if w.empty:
        return math.nan, math.nan, math.nan
    per = w.groupby("rank").agg(step_s=("step_s", "median"), images=("images", "median"))
    rate = float((per["images"] / per["step_s"]).sum())
    slow = w[w["rank"] == slow_rank]["step_s"]
    others = w[w["rank"] != slow_rank]["step_s"]
    return (rate, float(slow.median()) if len(slow) else math.nan,
            float(others.median()) if len(others) else math.nan)


def table(summary: pd.DataFrame, arm_configs: Sequence[tuple[Arm, TrainConfig]],
          out: str | Path, repeats: int, gpus_per_node: int = 1) -> pd.DataFrame:
    """One row per cell and repeat: the arm, the straggler, both rates, step times, staleness
    (async PS), the conditions; a failed run keeps its row with `error`."""
    rows = []
    by_label = {c.label: (a, c) for a, c in arm_configs}
    order = grid.interleaved([c for _, c in arm_configs], repeats)
    for (rep, config), (_, srow) in zip(order, summary.iterrows(), strict=True):
        arm, _ = by_label[config.label]
        folder = grid.repeat_dir(Path(out), config, rep, repeats)
        rate = slow_s = others_s = math.nan
        err = str(srow.get("error", "") or "")
        if err in ("", "nan") and (folder / "steps.csv").exists():
            steps = records.read_table(folder, "steps")
            rate, slow_s, others_s = sustained(steps, config.straggler_rank)
            err = ""
        rows.append({
            "arm": arm.name, "strategy": config.strategy,
            "algorithm": config.algorithm if arm.strategy == "allreduce" else "",
            "workers": config.workers, "straggler_rank": config.straggler_rank,
            "factor": config.straggler_factor if config.straggler_rank is not None else 1.0,
            "delay_s": config.straggler_delay_s, "repeat": rep,
            "images_per_sec": srow.get("images_per_sec", math.nan),
            "images_per_sec_cluster": srow.get("images_per_sec_cluster", math.nan),
            "images_per_sec_sustained": rate * config.time_dilation,
            "step_time_p50_s": srow.get("step_time_p50_s", math.nan),
            "straggler_step_s": slow_s, "others_step_s": others_s,
            "staleness_mean": srow.get("staleness_mean", math.nan),
            "staleness_max": srow.get("staleness_max", math.nan),
            "gpus_per_node": gpus_per_node, "compute_mode": config.compute,
            "network": srow.get("network", "none"), "error": err})
    return pd.DataFrame(rows, columns=TABLE_COLUMNS)


def slowdown(df: pd.DataFrame, column: str = "images_per_sec_sustained") -> pd.DataFrame:
    """Per arm, workers and straggler (factor, delay): `column` with the straggler / without,
    paired by repeat, its bootstrap interval and the runs behind it (cluster-equivalent rates
    where dilated: the ratio is the same)."""
    ok = df[df["error"].fillna("").astype(str) == ""]
    rows = []
    for (arm, n), part in ok.groupby(["arm", "workers"], sort=False):
        base = part[part["straggler_rank"].isna()].set_index("repeat")[column]
        slowed = part[part["straggler_rank"].notna()]
        for (f, d), cell in slowed.groupby(["factor", "delay_s"]):
            s = cell.set_index("repeat")[column]
            common = base.index.intersection(s.index)
            est = stats.ratio_ci(s.loc[common], base.loc[common], paired=True)
            rows.append({"arm": arm, "workers": n, "factor": f, "delay_s": d,
                         "ratio": est.value, "ci_low": est.low, "ci_high": est.high,
                         "runs": est.n, "quantity": f"{column} with / without the straggler"})
    return pd.DataFrame(rows, columns=["arm", "workers", "factor", "delay_s", "ratio", "ci_low",
                                       "ci_high", "runs", "quantity"])


def sentences(slow: pd.DataFrame) -> list[str]:
    """One line per slowed cell, computed from `slowdown`'s table."""
    lines = []
    for r in slow.itertuples():
        what = (f"x{r.factor:g}" if r.factor != 1 else "") + (
            f" +{r.delay_s * 1e3:g} ms/step" if r.delay_s else "")
        ci = (f" [{r.ci_low:.2f}, {r.ci_high:.2f}]" if math.isfinite(r.ci_low) else
              " (no interval)")
        lines.append(f"{r.arm} at {r.workers} workers, one worker slowed {what.strip()}: "
                     f"{r.ratio:.2f}{ci} of its rate without the straggler ({r.runs} runs).")
    return lines
