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

import numpy as np
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


def by_ranks_per_node(arm_configs: Sequence[tuple[Arm, TrainConfig]]
                      ) -> dict[int, list[tuple[Arm, TrainConfig]]]:
    """The cells grouped by their arm's ranks per node, in order: each group needs a cluster
    of its own (`run_cells` sets one ranks-per-node on local engines)."""
    groups: dict[int, list[tuple[Arm, TrainConfig]]] = {}
    for arm, config in arm_configs:
        groups.setdefault(arm.gpus_per_node, []).append((arm, config))
    return groups


def run(arm_configs: Sequence[tuple[Arm, TrainConfig]], out: str | Path, network: str = "none",
        scale: float | None = None, repeats: int = 1, offload_off: bool = False,
        **cluster_kwargs: Any) -> pd.DataFrame:
    """Every cell, one cluster per ranks-per-node group (emulated links when `network` names a
    profile, else local engines); the tidy table of all of them."""
    frames = []
    for gpn, part in by_ranks_per_node(arm_configs).items():
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


# ----------------------------------------------------------------------------- time to accuracy
# Throughput alone hides what async PS trades: its fast workers do not wait, but the straggler's
# gradients arrive stale. Time to a test accuracy fixed before the runs counts both. The runs
# train for real on a real data set (local engines, evaluation after every epoch), once per seed;
# `time_to_target_s` is the cumulative timed wall time (evaluation excluded) at the first
# evaluation at or above the target, inf when no evaluation reaches it.
TTA_COLUMNS = ["arm", "strategy", "workers", "straggler_rank", "delay_s", "factor", "seed",
               "target", "time_to_target_s", "epochs_to_target", "steps_to_target",
               "final_accuracy", "best_accuracy", "wall_s", "epochs", "error"]
TTA_RATIO_COLUMNS = ["arm", "versus", "workers", "delay_s", "factor", "ratio", "ci_low",
                     "ci_high", "runs", "not_reached", "quantity"]


def first_reaching(curve: pd.DataFrame, target: float) -> tuple[float, float, float]:
    """(wall_s, epoch, step) of the first evaluation of `curve` (dynamics.epoch_curve's columns)
    with test_accuracy >= target; all inf when none reaches it; all nan for an empty curve."""
    if curve.empty:
        return math.nan, math.nan, math.nan
    hit = curve[curve["test_accuracy"] >= target]
    if hit.empty:
        return math.inf, math.inf, math.inf
    first = hit.sort_values("step").iloc[0]
    return float(first["wall_s"]), float(first["epoch"]), float(first["step"])


def tta_row(arm: Arm, config: TrainConfig, folder: Path, target: float,
            error: str = "") -> dict[str, Any]:
    """One run's time-to-accuracy row from its folder (summary/steps/chunks/eval tables)."""
    from ddlstudy.experiments import dynamics

    curve = dynamics.epoch_curve(dynamics.read_run(folder)) if not error else pd.DataFrame()
    t, ep, step = first_reaching(curve, target) if not error else (math.nan,) * 3
    slowed = config.straggler_rank is not None
    return {"arm": arm.name, "strategy": config.strategy, "workers": config.workers,
            "straggler_rank": config.straggler_rank,
            "delay_s": config.straggler_delay_s if slowed else 0.0,
            "factor": config.straggler_factor if slowed else 1.0, "seed": config.seed,
            "target": target, "time_to_target_s": t, "epochs_to_target": ep,
            "steps_to_target": step,
            "final_accuracy": float(curve["test_accuracy"].iloc[-1]) if len(curve) else math.nan,
            "best_accuracy": float(curve["test_accuracy"].max()) if len(curve) else math.nan,
            "wall_s": float(curve["wall_s"].iloc[-1]) if len(curve) else math.nan,
            "epochs": float(curve["epoch"].iloc[-1]) if len(curve) else math.nan,
            "error": error}


def run_tta(cluster: Any, arm_configs: Sequence[tuple[Arm, TrainConfig]], seeds: Sequence[int],
            out: str | Path, target: float) -> pd.DataFrame:
    """Every cell once per seed (a folder per seed; cells interleaved within a seed) on one
    started cluster of local engines; one TTA_COLUMNS row per run."""
    rows = []
    for seed in seeds:
        part = [(a, replace(c, seed=int(seed)).validate()) for a, c in arm_configs]
        where = Path(out) / f"seed{seed}"
        runs = run_cells(cluster, part, where, repeats=1)
        for (arm, config), (_, r) in zip(part, runs.iterrows(), strict=True):
            err = str(r.get("error", "") or "")
            err = "" if err == "nan" else err
            rows.append(tta_row(arm, config, grid.repeat_dir(where, config, 0, 1), target, err))
    return pd.DataFrame(rows, columns=TTA_COLUMNS)


def _paired(a: pd.Series, b: pd.Series) -> tuple[stats.Interval, int, int]:
    """Ratio a / b paired by index over the runs where both reached the target; also the
    number of pairs and of pairs where one side never reached it."""
    common = a.index.intersection(b.index)
    a, b = a.loc[common], b.loc[common]
    both = np.isfinite(a) & np.isfinite(b)
    return stats.ratio_ci(a[both], b[both], paired=True), len(common), int((~both).sum())


def tta_ratios(df: pd.DataFrame) -> pd.DataFrame:
    """Per arm: time to the target with the straggler / without (paired by seed); then, with the
    straggler, each arm / the first arm (paired by seed). Runs where either side never reached
    the target are left out of the ratio and counted in `not_reached`."""
    ok = df[df["error"].fillna("").astype(str) == ""]
    col = "time_to_target_s"
    out = []
    arms = list(dict.fromkeys(ok["arm"]))
    for (arm, n), part in ok.groupby(["arm", "workers"], sort=False):
        base = part[part["straggler_rank"].isna()].set_index("seed")[col]
        for (d, f), cell in part[part["straggler_rank"].notna()].groupby(["delay_s", "factor"]):
            est, _, miss = _paired(cell.set_index("seed")[col], base)
            out.append({"arm": arm, "versus": "no straggler", "workers": n, "delay_s": d,
                        "factor": f, "ratio": est.value, "ci_low": est.low, "ci_high": est.high,
                        "runs": est.n, "not_reached": miss,
                        "quantity": "time to the target accuracy with / without the straggler"})
    slowed = ok[ok["straggler_rank"].notna()]
    if arms:
        first = arms[0]
        for (arm, n, d, f), cell in slowed.groupby(["arm", "workers", "delay_s", "factor"],
                                                   sort=False):
            ref = slowed[(slowed["arm"] == first) & (slowed["workers"] == n)
                         & (slowed["delay_s"] == d) & (slowed["factor"] == f)]
            if arm == first or ref.empty:
                continue
            est, _, miss = _paired(cell.set_index("seed")[col], ref.set_index("seed")[col])
            out.append({"arm": arm, "versus": first, "workers": n, "delay_s": d, "factor": f,
                        "ratio": est.value, "ci_low": est.low, "ci_high": est.high,
                        "runs": est.n, "not_reached": miss,
                        "quantity": f"time to the target accuracy / {first}'s, both with the "
                                    "straggler"})
    return pd.DataFrame(out, columns=TTA_RATIO_COLUMNS)


def tta_sentences(runs: pd.DataFrame, ratios: pd.DataFrame) -> list[str]:
    """One line per arm and straggler setting (median time to target, how many runs reached
    it) and per ratio, computed from the two tables."""
    lines = []
    ok = runs[runs["error"].fillna("").astype(str) == ""] if len(runs) else runs
    for (arm, slow), part in ok.groupby(["arm", ok["straggler_rank"].notna()], sort=False):
        t = part["time_to_target_s"]
        reached = int(np.isfinite(t).sum())
        target = float(part["target"].iloc[0])
        med = float(np.median(t[np.isfinite(t)])) if reached else math.nan
        what = "with the straggler" if slow else "without a straggler"
        when = f"median {med:.2f} s of timed steps" if reached else "never"
        lines.append(f"{arm} {what}: test accuracy {target:g} reached in {reached} of "
                     f"{len(part)} runs ({when}).")
    for r in ratios.itertuples():
        ci = (f" [{r.ci_low:.2f}, {r.ci_high:.2f}]" if math.isfinite(r.ci_low)
              else " (no interval)")
        miss = f"; {r.not_reached} run(s) left out, target not reached" if r.not_reached else ""
        lines.append(f"{r.arm} vs {r.versus}: time to the target x{r.ratio:.2f}{ci} "
                     f"({r.runs} paired runs{miss}).")
    return lines
