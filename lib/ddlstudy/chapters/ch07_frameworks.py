"""Chapter 07 (frameworks): Horovod and TensorFlow's strategies beside ddlstudy's own on the same
engines and links, from the grid to the prose, so the notebook only calls these in order.

The per-profile runner and the comparisons are `ddlstudy.experiments.frameworks`; Horovod's
timeline is `ddlstudy.experiments.timeline`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from IPython.display import Markdown

from ddlstudy import frameworks
from ddlstudy.analysis import plots, stats, units
from ddlstudy.experiments import frameworks as compare
from ddlstudy.experiments import timeline as hvd_timeline
from ddlstudy.experiments.grid import base_config, training_grid
from ddlstudy.network.emulated import netem
from ddlstudy.records import store as records
from ddlstudy.train.trainer import TrainConfig, conditions

NAME = "07_frameworks"
# the columns of scaling.csv the notebook shows (the table keeps them all)
SCALING_VIEW = ["profile", "strategy", "workers", "images_per_sec_cluster", "efficiency",
                "step_time_p50_s", "compute_s", "comm_wait_s", "bytes_sent_per_step"]
# (a, b): the orders the prose reports, a's images/sec against b's
PAIRS = [("horovod", tf) for tf in ("tf_ps_sync", "tf_ps_async", "tf_allreduce")] + [
    ("horovod", "allreduce"), ("horovod", "ddp"), ("tf_ps_sync", "ps_sync"),
    ("allreduce", "ps_sync"), ("horovod_fp16", "horovod")]  # a pair not run is left out


@dataclass
class Frameworks:
    """What the chapter's cells share: params, the strategies and profiles left after the
    checks, the folder, the grid and its results."""

    P: Any
    model: str
    strategies: list[str]
    profiles: list[str]
    out: Path
    configs: list[TrainConfig]
    summary: pd.DataFrame = field(default_factory=pd.DataFrame)
    scaled: pd.DataFrame = field(default_factory=pd.DataFrame)


def setup(P: Any, run_dir: str | Path | None, strategies: list[str] | None = None,
          workers: list[int] | None = None, profiles: list[str] | None = None,
          model: str | None = None, steps: int | None = None) -> Frameworks:
    """The `frameworks` section with the notebook's overrides; strategies whose framework is
    not installed and emulated profiles without namespaces are left out, one line each."""
    F = P.frameworks
    strategies, workers = strategies or F.strategies, workers or F.workers
    profiles, model = profiles or F.profiles, model or F.model
    out = records.chapter_dir(run_dir, NAME, P.model_dump(mode="json"),
                              notebook={"strategies": strategies, "workers": workers,
                                        "profiles": profiles, "model": model})
    missing = {s: why for s in strategies if (why := frameworks.missing(s))}
    for s, why in missing.items():  # one line each; the chapter goes on without them
        print(f"{s} left out: {why}")
    strategies = [s for s in strategies if s not in missing]
    emulated = [p for p in profiles if p != "none"]
    live, why_not = netem.available() if emulated else (False, "")  # the probe makes a namespace
    if emulated and not live:
        print(f"Emulated profiles {emulated} left out: {why_not}. Loopback (unshaped) instead.")
        profiles = [p for p in profiles if p == "none"] or ["none"]
    base = base_config(P, model, dataset="synthetic", batch_size=F.batch_size,
                       steps=steps or F.steps, warmup_steps=F.warmup_steps, compute=F.compute,
                       replay_source=F.replay_source, algorithm=F.algorithm, overlap=True,
                       eval=False, momentum=0.0, weight_decay=0.0)
    return Frameworks(P, model, strategies, profiles, out,
                      training_grid(base, [model], strategies, workers))


def plan_table(S: Frameworks) -> pd.DataFrame:
    """The grid's cells and the engines each takes."""
    return pd.DataFrame([{"run": c.label, "engines": c.world_size} for c in S.configs])


def run(S: Frameworks) -> pd.DataFrame:
    """Every cell on every profile (summary.csv) and the scaling over 1 worker (scaling.csv)."""
    P = S.P
    frames = [compare.run_profile(
        S.configs, profile, S.out / "runs" / profile, repeats=P.frameworks.repeats,
        scale=P.network.scale, offload_off=not P.network.offload,
        start_timeout_s=P.cluster.start_timeout_s,
        collective_timeout_s=P.cluster.collective_timeout_s) for profile in S.profiles]
    summary = records.write_grid_summary(pd.concat(frames, ignore_index=True), S.out,
                                         ["profile", "strategy", "workers"])
    S.summary = summary
    S.scaled = compare.scaling(summary[~summary["cpu_bound"]])
    records.write_table(S.scaled, S.out, "scaling")
    return S.scaled[SCALING_VIEW]


def figures(S: Frameworks) -> None:
    """Images/sec and scaling efficiency per profile (images_per_sec.png)."""
    cond = {p: conditions(S.configs[0], {"profile": p, "scale": s})
            for p, s in S.summary.groupby("profile")["network_scale"].first().items()}
    titles = {p: f"{p}: {cond.get(p) or 'loopback, unshaped, compute real'}"
              for p in S.profiles}
    fig = plots.frameworks_scaling(
        S.summary, S.scaled, titles,
        f"{S.model}, batch {S.configs[0].batch_size} per worker: frameworks vs ddlstudy's own "
        "(median and 95 % bootstrap interval over repeats)")
    plots.save(fig, S.out, "images_per_sec")


def bytes_figure(S: Frameworks) -> None:
    """Bytes sent per worker per step at each profile's most workers (bytes_per_node.png)."""
    summary = S.summary
    at_top = summary[summary["workers"] == summary.groupby("profile")["workers"].transform(
        "max")]
    sources = ", ".join(sorted(f"{s}: {b}" for s, b in at_top.groupby("strategy")["bytes_source"]
                               .first().items()))
    fig = plots.bytes_per_node(at_top, f"at the most workers per profile; bytes_source "
                                       f"{sources}")
    plots.save(fig, S.out, "bytes_per_node")


def text(S: Frameworks) -> str:
    """The comparisons with an interval each (over repeats, else the timed chunks), Horovod's
    efficiency against Malik 2018's 'almost linear', and what differs from the papers."""
    summary = S.summary
    clean = summary[~summary["cpu_bound"]]
    chunks = units.chunk_rates(S.out / "runs")
    lines = [compare.summary_text(S.scaled)]
    if (tuned := compare.tuning_text(summary)):  # Horovod's tuning as its records carry it
        lines.append(tuned)
    for a, b in PAIRS:
        for f in compare.pair(clean, chunks, a, b):
            lines.append(compare.order_text(f))
    for f in compare.efficiency_estimates(clean, chunks):
        lines.append(f"Horovod's scaling efficiency at {f['top']} workers, "
                     f"{compare.source(f['profile'])}: "
                     + stats.reason(f["est"], compare.NEAR_LINEAR, +1, "efficiency", ".2f")
                     + f" (Malik 2018: 'almost linear', read as above "
                       f"{compare.NEAR_LINEAR:.0%}).")
    tf_missing = [s for s in ("tf_ps_sync", "tf_allreduce") if s not in S.strategies]
    if tf_missing:
        lines.append(f"Not run here: {', '.join(tf_missing)} (not in this run's "
                     "frameworks.strategies), so the TensorFlow comparisons above are absent.")
    lines.append(
        "What differs from the papers: one host's CPUs drive every node (compute is replayed, "
        "not run, under emulation), kernel TCP over veth for every profile (no RDMA), rates "
        "shaped and scaled but no latency added, and at most a handful of workers.")
    return " ".join(lines)


def timeline(S: Frameworks) -> Markdown | None:
    """Horovod's own timeline of the smallest multi-worker Horovod cell on the first profile
    (horovod_timeline.csv and .png) and its description; prints why when there is none."""
    P = S.P
    multi = [c for c in S.configs if c.strategy == "horovod" and c.workers > 1]
    if not (P.frameworks.timeline and multi):
        print("No Horovod timeline: frameworks.timeline is off or no multi-worker Horovod cell.")
        return None
    cell = min(multi, key=lambda c: c.workers)
    events = hvd_timeline.record(cell, S.profiles[0], S.out / "timeline", scale=P.network.scale,
                                 offload_off=not P.network.offload,
                                 start_timeout_s=P.cluster.start_timeout_s,
                                 collective_timeout_s=P.cluster.collective_timeout_s)
    records.write_table(events, S.out, "horovod_timeline")
    fig = hvd_timeline.plot(events, f"Horovod timeline: {cell.label} on {S.profiles[0]}")
    plots.save(fig, S.out, "horovod_timeline")
    return Markdown(hvd_timeline.describe(events))
