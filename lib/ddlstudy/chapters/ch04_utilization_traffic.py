"""Chapter 04 (utilisation and traffic): CPU, memory and packets per node over time while PS
and ring train, and the bytes per step each node moves (Shi 2019 Figs 4.5-4.22, 5.1).

`run` trains the grid with a sampler in every engine; `traffic` turns the bytes the strategies
counted into per-step tables; `text` says whether the PS server's bytes grow with N while a ring
worker's do not, with intervals.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.figure import Figure

from ddlstudy.analysis import plots, stats
from ddlstudy.experiments import grid
from ddlstudy.records import store as records
from ddlstudy.train.trainer import conditions

STRATEGIES = ["ps_sync", "allreduce"]
RATIOS = ("worker_sent_per_step_MB", "server_recv_per_step_MB", "worker_sent / model",
          "server_recv / model", "server_sent / model")


@dataclass
class Plan:
    """Worker counts, model, sampling interval (params' monitor section unless the notebook
    set them) and the grid of runs."""

    workers: list[int]
    model: str
    interval_s: float
    configs: list[Any]

    def meta(self) -> dict[str, Any]:
        """The notebook's settings as meta.json records them."""
        return {"workers": self.workers, "model": self.model, "interval_s": self.interval_s}


def plan(P: Any, workers: Sequence[int] | None = None, model: str | None = None,
         steps: int | None = None, interval_s: float | None = None) -> Plan:
    """The monitored grid: PS and ring at each worker count, one model."""
    M = P.monitor
    workers = list(workers or M.workers)
    model = model or M.models[0]
    base = grid.base_config(P, model, steps=steps or M.steps)
    configs = grid.training_grid(base, [model], STRATEGIES, workers)
    return Plan(workers, model, interval_s or M.interval_s, configs)


@dataclass
class Result:
    """Per-run summary, the samplers' time series, the links, the configs as run."""

    summary: pd.DataFrame
    mon: pd.DataFrame
    net: dict[str, Any]
    configs: list[Any]

    @property
    def shared(self) -> bool:
        """True when the engines' interface counters are shared (one host's loopback)."""
        return bool(self.mon["iface_shared"].any())

    @property
    def cond(self) -> str:
        return conditions(self.configs[0], self.net)

    def suffix(self) -> str:
        return f"\n{self.cond}" if self.cond else ""

    def link_line(self) -> str:
        """One line naming each node's shaped link ('' on plain engines or loopback)."""
        net = self.net
        if net.get("profile") in ("none", "loopback"):
            return ""
        return (f"each node on its own link: {net['profile']} x {net['scale']} "
                f"({net['emulated_rate_bps'] / 1e6:.0f} Mbit/s), {net['packet_counting']}")

    def usage(self) -> pd.DataFrame:
        """Mean CPU % and RSS per node."""
        return (self.mon.groupby(["strategy", "workers", "role", "rank"])[["cpu_pct", "rss_mb"]]
                .mean().round(1))


def run(P: Any, p: Plan, out: Path) -> Result:
    """Train the grid with the samplers on (each engine on its own shaped link when
    training.network names a profile); write `summary` and `monitor`."""
    with grid.emulated_cluster(P.training.network, grid.engines_needed(p.configs),
                               P.network.scale, **P.cluster.engine_kwargs(),
                               start_timeout_s=P.cluster.start_timeout_s,
                               collective_timeout_s=P.cluster.collective_timeout_s) as cluster:
        net = cluster.network_info or {"profile": "none"}
        configs = grid.dilate(p.configs, cluster)
        summary, mon = grid.run_monitored(cluster, configs, out / "runs", p.interval_s,
                                          repeats=P.repeats)
    records.write_table(summary, out, "summary")
    records.write_table(mon, out, "monitor")
    return Result(summary, mon, net, configs)


def timelines(r: Result, repeats: int, out: Path) -> list[Figure]:
    """CPU and packets per node over time for every (strategy, workers), repeat 0 (the tables
    pool all repeats); saved as `utilization-<s>-<n>w.png` and `packets-<s>-<n>w.png`."""
    figs = []
    first = r.mon[r.mon["repeat"] == 0]
    for (strategy, n), part in first.groupby(["strategy", "workers"]):
        fig = plots.utilization_over_time(
            part, f"{strategy}, {n} workers: CPU per node (repeat 0 of {repeats}){r.suffix()}")
        plots.save(fig, out, f"utilization-{strategy}-{n}w")
        figs.append(fig)
        fig = plots.packets_over_time(part, f"{strategy}, {n} workers: packets per node"
                                      + (" (interface shared by all local engines)" if r.shared
                                         else " (each node's own veth)") + r.suffix())
        plots.save(fig, out, f"packets-{strategy}-{n}w")
        figs.append(fig)
    return figs


def ps_timeline(r: Result, out: Path) -> Figure | None:
    """The PS server's traffic as workers are added (Shi 2019 Fig 5.1), saved as
    `ps_setups_timeline.png`; None when no run had a server."""
    mon = r.mon
    if not (mon["role"] == "server").any():
        return None
    fig = plots.ps_setups_timeline(
        mon[(mon["strategy"] == "ps_sync") & (mon["repeat"] == 0)],
        "Parameter Server traffic as workers are added (Shi 2019 Fig 5.1)"
        + ("\n(loopback shared by every local engine: the sum of all nodes' traffic)" if r.shared
           else ", from the server's own link counters") + r.suffix())
    plots.save(fig, out, "ps_setups_timeline")
    return fig


def model_bytes(summary: pd.DataFrame) -> float:
    """The model's gradient in bytes (float32 parameters)."""
    return float(summary["params"].iloc[0] * 4)


def traffic(summary: pd.DataFrame, out: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Bytes per step per node, per repeat (`traffic_per_repeat`) and their medians beside the
    ring's 2(N-1)/N (`traffic_per_step`); the PS server vs a ring worker drawn as
    `traffic_per_node.png` (the chapter's headline figure)."""
    mb = model_bytes(summary)
    counted = (summary["bytes_source"] if "bytes_source" in summary
               else pd.Series("counted", index=summary.index))
    per_repeat = pd.DataFrame({
        "strategy": summary["strategy"], "workers": summary["workers"],
        "repeat": summary["repeat"], "bytes": counted,
        "worker_sent_per_step_MB": summary["bytes_sent_per_step"] / 1e6,
        "server_recv_per_step_MB": summary["server_bytes_recv_per_step"] / 1e6,
        "worker_sent / model": summary["bytes_sent_per_step"] / mb,
        "server_recv / model": summary["server_bytes_recv_per_step"] / mb,
        "server_sent / model": summary["server_bytes_sent_per_step"] / mb,
    })
    records.write_table(per_repeat, out, "traffic_per_repeat")
    per_step = per_repeat.groupby(["strategy", "workers", "bytes"], as_index=False).agg(
        repeats=("repeat", "nunique"), **{c: (c, "median") for c in RATIOS})
    per_step["ring theory 2(N-1)/N (analytic)"] = 2 * (per_step["workers"] - 1) / per_step[
        "workers"]
    records.write_table(per_step, out, "traffic_per_step")
    fig = plots.traffic_per_node(
        per_repeat, "Traffic per node per step: the PS server (received) vs a ring worker "
        "(sent), in model sizes, counted by the strategies")
    plots.save(fig, out, "traffic_per_node")
    plt.close(fig)
    return per_repeat, per_step


def _growth_text(ps: pd.DataFrame, ring: pd.DataFrame, lo: int, hi: int) -> str:
    """The server's bytes against N (slope), and ring vs server growth from lo to hi workers."""
    slope = stats.slope_ci(ps["workers"], ps["server_recv / model"])
    growth = {name: part[part["workers"] == hi].groupby("repeat")[col].median()
              / part[part["workers"] == lo].groupby("repeat")[col].median()
              for name, part, col in (("ps", ps, "server_recv / model"),
                                      ("ring", ring, "worker_sent / model"))}
    common = growth["ps"].index.intersection(growth["ring"].index)
    ratio = stats.ratio_ci(growth["ring"].loc[common], growth["ps"].loc[common])
    grows = stats.interval_verdict(slope, 0.0, 1)
    slower = stats.interval_verdict(ratio, 1.0, -1)
    return (
        "The PS server's bytes "
        + {"agrees": "grow with N", "differs": "shrink with N",
           "inconclusive": "show no clear trend with N",
           "not measured": "cannot be fitted with N here"}[grows]
        + f" (slope {slope.text('.2f')} models per added worker). From {lo} to {hi} workers "
        f"a ring worker's bytes grow {growth['ring'].median():.2f}x and the server's "
        f"{growth['ps'].median():.2f}x: the ring's growth "
        + {"agrees": "is smaller than the server's",
           "differs": "is larger than the server's",
           "inconclusive": "cannot be told apart from the server's",
           "not measured": "cannot be compared (too few repeats)"}[slower]
        + f" (ratio {ratio.text('.2f')}).")


def text(r: Result, per_repeat: pd.DataFrame, repeats: int) -> str:
    """Bytes per step per node against the model's size, and whether the server's grow with N
    faster than a ring worker's; where the counters came from."""
    ps = per_repeat[per_repeat["strategy"] == "ps_sync"]
    ring = per_repeat[per_repeat["strategy"] == "allreduce"]
    counts = sorted(n for n in set(ps["workers"]) & set(ring["workers"]) if n > 1)  # 1: no ring
    lines = [f"The model's gradient is {model_bytes(r.summary) / 1e6:.2f} MB; bytes below are "
             f"counted from the tensors each strategy sent, median of {repeats} repeat(s)."]
    for label, part, col in (("The PS server receives", ps, "server_recv / model"),
                             ("Each ring worker sends", ring, "worker_sent / model")):
        med = part.groupby("workers")[col].median()
        lines.append(f"{label} " + ", ".join(f"{v:.2f}x" for v in med)
                     + f" the model per step at {', '.join(map(str, med.index))} workers.")
    if len(counts) >= 2:
        lines.append(_growth_text(ps, ring, counts[0], counts[-1]))
    else:
        lines.append(f"Worker counts above 1 with both strategies: {counts or 'none'}; growth "
                     "with N is not measured in this run (monitor.workers needs two or more).")
    if "analytic" in set(per_repeat["bytes"].astype(str)):
        lines.append("Rows marked analytic (DDP) are 2(N-1)/N x the bucket bytes DDP handed to "
                     "all-reduce, not counted on the wire.")
    lines.append(
        "Here all engines share one host's loopback (measured: the interface is shared), so the "
        "interface counters in the timelines are the sum over all nodes; the per-node numbers in "
        "this table come from the bytes each strategy counted." if r.shared else
        f"Each node ran in its own namespace on its own link ({r.cond}), so the timelines are "
        "that node's own interface counters.")
    return " ".join(lines)
