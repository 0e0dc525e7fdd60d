"""Chapter 03 (PS vs ring): one model's training grid over strategies and worker counts, on
this host or on emulated links with compute replayed (Shi 2019 Figs 4.1-4.4).

`plan` settles the parameters (the emulated section's own defaults, the run folder named by the
chapter registry, whether emulation works here), `run` runs the grid (or loads the committed
reference cells where it cannot, never as if measured now), and `text` says what the records
show, with the ring / PS comparison's interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from ddlstudy.analysis import plots, stats, units
from ddlstudy.analysis.validity import REPLAY_LAG_MAX, host_paced, replay_lagged
from ddlstudy.chapters.registry import get_chapter
from ddlstudy.experiments import grid
from ddlstudy.network.emulated import netem
from ddlstudy.records import reference
from ddlstudy.records import store as records
from ddlstudy.strategies.registry import STRATEGIES, arm_strategy
from ddlstudy.train.trainer import conditions

CHAPTER = "03_ps_vs_ring"
SUMMARY_COLUMNS = ["strategy", "workers", "images_per_sec", "images_per_sec_cluster", "speedup",
                   "efficiency", "step_time_p50_s", "compute_s", "comm_s", "update_s",
                   "bytes_sent_per_step", "server_bytes_recv_per_step", "cpu_bound", "loss_first",
                   "loss_last"]


@dataclass
class Plan:
    """What this notebook run will do: the training section (`T`), the model, the run folder,
    whether the emulated network is live here (else why not) and the grid of runs."""

    T: Any
    model: str
    emulated: bool
    name: str
    live: bool
    why_not: str
    configs: list[Any]
    testbed: Any = None  # ddlstudy.testbeds.emulation.EmulatedTestbed, or None
    gpus_per_node: int = 1
    latency: bool = False

    @property
    def reference_name(self) -> str:
        """The folder in results/reference holding this grid's cells: a testbed's grid sits
        beside the study's own (`03_ps_vs_ring-testbed-<testbed>-<model>`: not under
        `03_ps_vs_ring-emulated-*`, which holds the study's own settings)."""
        if self.testbed is None:
            return self.name
        return f"{CHAPTER}-testbed-{self.testbed.name}-{self.model}"

    @property
    def notice(self) -> str:
        """One line when the reference records stand in for a measurement ('' when live)."""
        if self.live:
            return ""
        return (f"Emulated network not available here ({self.why_not}): showing the reference "
                f"run's records from results/reference/{self.reference_name}, not a measurement "
                "on this host.")

    def meta(self) -> dict[str, Any]:
        """The notebook's settings as meta.json records them."""
        return {"model": self.model, **self.T.model_dump(mode="json"),
                "testbed": self.testbed.name if self.testbed else None,
                "gpus_per_node": self.gpus_per_node, "latency": self.latency}

    def runs(self) -> pd.DataFrame:
        """One row per run: its label and how many engines it takes."""
        return pd.DataFrame([{"run": c.label, "engines": c.world_size} for c in self.configs])


def plan(P: Any, model: str | None = None, emulated: bool = False, use_reference: bool = False,
         **overrides: Any) -> Plan:
    """The training section with the notebook's non-None overrides on top (the emulated section
    first lays its own defaults: shaped links, H100 compute replayed; or, with
    `network.chapter03_testbed`, the testbed's link, GPUs per node, latency and device at its
    row's shape and batch), and the grid it asks."""
    N = P.network
    bed, gpus_per_node, latency = None, 1, False
    if emulated:
        model = model or (N.chapter03_models or P.training.models)[0]
        own = dict(network=N.chapter03_profile, compute="replay", replay_source=N.replay_source,
                   workers=N.workers, steps=N.steps, warmup_steps=N.warmup_steps,
                   algorithm=N.algorithm)
        gpus_per_node, latency = N.gpus_per_node, N.latency
        if N.chapter03_testbed:
            from ddlstudy.testbeds import emulation

            bed = emulation.settings(N.chapter03_testbed, model, overrides.get("batch_size"))
            own.update(network=bed.profile, replay_source=bed.replay_source, shape=bed.shape,
                       batch_size=bed.batch_size)
            gpus_per_node, latency = bed.gpus_per_node, bed.latency
        overrides = {**own, **{k: v for k, v in overrides.items() if v is not None}}
    T = P.training.model_validate({**P.training.model_dump(),
                                   **{k: v for k, v in overrides.items() if v is not None}})
    model = model or T.models[0]
    name = get_chapter(CHAPTER).folders(*(([], [model]) if emulated else ([model], [])))[0]
    live, why_not = (True, "") if T.network == "none" else netem.available()
    if use_reference and T.network != "none":
        live, why_not = False, "use_reference = True"
    configs = grid.training_grid(grid.base_config(P, model, T), [model], T.strategies,
                                 T.workers, servers=T.servers)
    return Plan(T, model, emulated, name, live, why_not, configs, bed, gpus_per_node, latency)


@dataclass
class Result:
    """The grid's summary (speed-up and cpu_bound added), the engines, the links, the configs
    as run, where the per-run records sit, and the reference label when not measured now."""

    summary: pd.DataFrame
    engines: pd.DataFrame
    net: dict[str, Any]
    configs: list[Any]
    runs_root: Path
    ref_label: str = ""
    testbed: str = ""  # the testbed's one-line label ('' for the study's own settings)

    @property
    def cond(self) -> str:
        """Compute mode and links, plus the reference label, for titles and text."""
        return (conditions(self.configs[0], self.net)
                + (f"; {self.testbed}" if self.testbed else "")
                + (f"; {self.ref_label}" if self.ref_label else ""))

    @property
    def dilated(self) -> bool:
        return bool(self.configs[0].time_dilation != 1)

    @property
    def contended(self) -> bool:
        """Real compute on one CPU host: the workers share its cores."""
        one_host = (self.engines["host"].nunique() == 1
                    and self.engines["device"].iloc[0] == "cpu")
        return bool(one_host and self.configs[0].compute == "real")

    def note(self) -> str:
        """Title note for contended runs."""
        return (f" (one host, {self.engines['threads'].iloc[0]} thread(s) per engine: workers "
                "share the cores)" if self.contended else "")

    def suffix(self) -> str:
        return f"\n{self.cond}" if self.cond else ""

    def view(self) -> pd.DataFrame:
        """The summary columns the chapter shows."""
        return self.summary[SUMMARY_COLUMNS]


def _engines_per_core(configs: Sequence[Any]) -> int:
    """Local engines per core the grid may start: more where every cell replays its compute
    (the engines sleep through it; each cell's record still says whether the host's CPUs were
    saturated)."""
    from ddlstudy.cluster.launchers import engines_per_core

    return engines_per_core([c.compute for c in configs])


def run(P: Any, p: Plan, out: Path) -> Result:
    """Run the grid on (emulated) engines, or load the committed reference cells where the
    network cannot be built; write `summary`; stop if any run failed."""
    N = P.network
    configs, ref_label = p.configs, ""
    if p.live:
        with grid.emulated_cluster(p.T.network, grid.engines_needed(configs), N.scale,
                                   offload_off=not N.offload, gpus_per_node=p.gpus_per_node,
                                   latency=p.latency,
                                   testbed=p.testbed.name if p.testbed else None,
                                   engines_per_core=_engines_per_core(configs),
                                   **P.cluster.engine_kwargs(),
                                   start_timeout_s=P.cluster.start_timeout_s,
                                   collective_timeout_s=P.cluster.collective_timeout_s
                                   ) as cluster:
            engines = pd.DataFrame(cluster.info())
            net = cluster.network_info or {"profile": "none"}
            configs = grid.dilate(configs, cluster)
            summary = grid.run_grid(cluster, configs, out / "runs",
                                    repeats=N.repeats if p.emulated else P.repeats)
        runs_root = out / "runs"
    else:
        summary = reference.load(p.reference_name)
        ref_label = reference.label(summary)
        assert not summary.empty, f"{ref_label}: no committed cells for {p.reference_name}"
        summary = summary.assign(error="")
        engines = pd.DataFrame([{"host": "reference", "device": "replay", "threads": 0}])
        net = {"profile": str(summary["network"].iloc[0]),
               "scale": float(summary["network_scale"].iloc[0])}
        configs = [c.__class__(**{**c.to_dict(), "time_dilation": float(
            summary["time_dilation"].iloc[0])}) for c in configs]
        runs_root = reference.reference_dir() / p.reference_name / "runs"
    summary = plots.add_speedup(arms(records.write_grid_summary(summary, out,
                                                                ["strategy", "workers"])))
    return Result(summary, engines, net, configs, runs_root, ref_label,
                  p.testbed.label if p.testbed else "")


# The chapter's view of its summary: a PS with a non-default server count as an arm of its own.
arms = units.label_arms


def throughput_figure(r: Result, model: str, out: Path) -> Figure:
    """Images/sec (cluster-equivalent when dilated) vs workers, CPU-bound cells marked; saved as
    `throughput.png`."""
    shown = (r.summary.assign(images_per_sec=r.summary["images_per_sec_cluster"]) if r.dilated
             else r.summary)
    what = "cluster-equivalent images/sec (measured x dilation)" if r.dilated else "images/sec"
    fig = plots.throughput_with_excluded(
        shown, f"{model}: {what} vs workers{r.note()}{r.suffix()}")
    plots.save(fig, out, "throughput")
    return fig


def speedup_figure(r: Result, model: str, out: Path) -> Figure:
    """Speed-up over 1 worker, saved as `speedup.png`."""
    fig = plots.speedup_vs_workers(r.summary,
                                   f"{model}: speed-up over 1 worker{r.note()}{r.suffix()}")
    plots.save(fig, out, "speedup")
    return fig


def breakdown_figure(r: Result, model: str, out: Path) -> Figure:
    """Compute / communication / update per step, saved as `breakdown.png`."""
    fig = plots.step_breakdown(r.summary, f"{model}: where a step's time goes (median per "
                                          f"worker){r.suffix()}")
    plots.save(fig, out, "breakdown")
    return fig


def _replay_text(r: Result, model: str) -> str:
    """How replayed compute was done, and why dilated throughput is cluster-equivalent."""
    c, net = r.configs[0], r.net
    return (
        f"Workers did not compute: each waited {r.summary['replay_s'].iloc[0] * 1e3:.2f} ms "
        f"(the {c.replay_source} reference for {model}, batch {c.batch_size})"
        + (f" x {c.time_dilation:g}" if r.dilated else "")
        + " per step, then sent seeded random gradients of the model's real sizes, so the "
        "speed-up is set by communication, not by workers sharing this host's cores."
        + (f" Cluster-equivalent throughput is the measured one x {c.time_dilation:g}: the links "
           f"run at {net.get('scale')} of {net.get('profile')}'s rate, the waits 1/"
           f"{net.get('scale')} longer, so the ratio is that of the real cluster." if r.dilated
           else ""))


# The thesis's pair (Shi 2019): the naive one-server PS and the ring.
THESIS_PS = "ps_sync"
THESIS_RING = "allreduce"


def _ring_vs_ps(r: Result) -> list[str]:
    """Ring / PS images/sec at the most workers both ran, over interleaved repeats (else the
    timed chunks of each cell's one run: ddlstudy.analysis.units); CPU-bound runs and lone
    workers whose replayed clock lagged (analysis.validity) left out."""
    summary = r.summary
    lagged = replay_lagged(summary)
    clean = summary[~host_paced(summary)]
    lines = []
    if summary["cpu_bound"].any():
        lines.append(f"{(summary['cpu_bound']).sum()} run(s) asked more of this host than its "
                     "measured aggregate link ceiling (`cpu_bound`, red x): they are shown, left "
                     "out of the figure's medians and of the comparison below.")
    if lagged.any():
        lines.append(f"{int(lagged.sum())} one-worker run(s) took over {REPLAY_LAG_MAX:.0%} "
                     "longer than the replayed step (the host, not the replayed device, set "
                     "their pace: analysis.validity, orange +): they are shown, left out of the "
                     "medians and below.")
    tops = clean.groupby("strategy")["workers"].max()
    if THESIS_PS in tops and THESIS_RING in tops:
        n = int(min(tops[THESIS_PS], tops[THESIS_RING]))
        (ring, ps), unit = units.cell_values(clean, units.chunk_rates(r.runs_root),
                                             [{"strategy": THESIS_RING, "workers": n},
                                              {"strategy": THESIS_PS, "workers": n}])
        est = stats.ratio_ci(ring, ps, paired=unit == units.REPEATS and len(ring) == len(ps))
        lines.append(f"Ring vs PS at {n} workers, over {units.UNIT_NOTE[unit]}: " +
                     stats.reason(est, 1.0, +1, "ring / PS images/sec", ".2f") + ".")
    return lines + _best_vs_best(clean, r.runs_root)


def _best_arms(clean: pd.DataFrame, n: int) -> tuple[str, str, list[str], list[str]] | None:
    """At `n` workers: (best PS arm, best all-reduce arm, the PS arms, the all-reduce arms), best
    by median images/sec; None unless both kinds ran at `n` and the pair is not the thesis's
    (ps_sync, allreduce), which `_ring_vs_ps` already states."""
    at_n = clean[clean["workers"] == n]
    med = at_n.groupby("strategy")["images_per_sec"].median()
    specs = {arm: STRATEGIES.get(arm_strategy(arm)) for arm in med.index}
    ps = sorted(a for a, s in specs.items() if s is not None and s.ps_design and s.sync)
    ring = sorted(a for a, s in specs.items() if s is not None and s.family == "allreduce"
                  and not s.colocated_servers and s.sync)
    if not ps or not ring:
        return None
    if ps == [THESIS_PS] and ring == [THESIS_RING]:
        return None
    return med[ps].idxmax(), med[ring].idxmax(), ps, ring


@dataclass
class BestVsBest:
    """The best all-reduce arm over the best PS design at `workers`: `est` (ring / PS
    images/sec with its interval) over `unit`, and the arms each was chosen from."""

    workers: int
    best_ring: str
    best_ps: str
    rings: list[str]
    pss: list[str]
    est: stats.Interval
    unit: str


def best_vs_best(clean: pd.DataFrame, runs_root: Path) -> BestVsBest | None:
    """Best all-reduce vs best PS (issue 21: the PS users would deploy today, not only the
    thesis's naive one) at the most workers where more than the thesis's pair ran; None where
    only the thesis's pair (or one kind) ran. `clean`: usable runs, arms labelled (`arms`)."""
    if clean.empty:
        return None
    for n in sorted(clean["workers"].unique(), reverse=True):
        picked = _best_arms(clean, int(n))
        if picked is not None:
            break
    else:
        return None
    best_ps, best_ring, ps, ring = picked
    chunks = units.label_arms(units.chunk_rates(runs_root))
    (a, b), unit = units.cell_values(clean, chunks, [{"strategy": best_ring, "workers": n},
                                                     {"strategy": best_ps, "workers": n}])
    est = stats.ratio_ci(a, b, paired=unit == units.REPEATS and len(a) == len(b))
    return BestVsBest(int(n), best_ring, best_ps, ring, ps, est, unit)


def _best_vs_best(clean: pd.DataFrame, runs_root: Path) -> list[str]:
    """`best_vs_best` as the chapter's sentence (none where it is None)."""
    b = best_vs_best(clean, runs_root)
    if b is None:
        return []
    return [f"Best all-reduce ({b.best_ring}, of {', '.join(b.rings)}) vs best parameter server "
            f"({b.best_ps}, of {', '.join(b.pss)}) at {b.workers} workers, each the highest "
            f"median images/sec of its kind, over {units.UNIT_NOTE[b.unit]}: " +
            stats.reason(b.est, 1.0, +1, f"{b.best_ring} / {b.best_ps} images/sec", ".2f")
            + "."]


def text(r: Result, p: Plan) -> str:
    """At the most workers: each strategy's rate, speed-up, efficiency and communication share;
    the conditions; and the ring / PS ratio with its interval."""
    summary, net, cond = r.summary, r.net, r.cond
    top = summary["workers"].max()
    at_top = summary[summary["workers"] == top].groupby("strategy").median(numeric_only=True)
    lines = [f"At {top} workers (median of repeats): " + ", ".join(
        f"{s} {x.images_per_sec:.1f} img/s (speed-up {x.speedup:.2f}, efficiency "
        f"{x.efficiency:.0%}, communication {x.comm_s / x.step_time_p50_s:.0%} of a step)"
        for s, x in at_top.iterrows()) + "."]
    if cond:
        lines.append(f"Conditions: {cond}.")
    if r.configs[0].compute == "replay":
        lines.append(_replay_text(r, p.model))
    delay = float(net.get("latency_emulated_s") or 0.0)
    if net.get("profile") not in (None, "none", "loopback") and delay > 0:
        lines.append(f"Latency is emulated in the transport: each inter-node message waits "
                     f"{delay * 1e3:.2f} ms (the link's one-way latency x 1/scale); the rate is "
                     "shaped by tc tbf.")
    elif net.get("profile") not in (None, "none", "loopback"):
        lines.append("Latency is not emulated (the records say latency_emulated = "
                     f"{net.get('latency_emulated', False)}): only bandwidth is shaped (tc tbf).")
    elif net.get("profile") == "loopback":
        lines.append(f"An emulated {net.get('requested')} network was asked for but cannot be "
                     f"built here ({net.get('reason')}); the engines ran on loopback, unshaped.")
    if r.contended:
        lines.append(
            "All engines run on one host and share its cores, so adding workers adds compute "
            "contention as well as communication: the speed-up here is bounded by the core "
            "count, not by the network. Setting `compute='replay'` and a `network` profile "
            "(params/emulated.yaml) replays per-step compute from a reference device and shapes "
            "each worker's link, which is how a cluster of independent accelerators behaves.")
    if r.ref_label:
        lines.insert(0, f"**{r.ref_label}** (not measured now: {p.why_not}).")
    return " ".join(lines + _ring_vs_ps(r))
