"""Chapter 05 (network profiles): ring all-reduce training on IB-EDR-like vs 10GbE-like emulated
links, and the all-reduce alone on shaped links against the alpha-beta model, from the grid to
the prose, so the notebook only calls these in order.

Where network namespaces are not available (not root), the committed reference run's records
are shown instead, labelled as such (ddlstudy.records.reference), never as a measurement.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ddlstudy.analysis import costmodel, plots, stats, units
from ddlstudy.experiments.grid import base_config, dilate, emulated_cluster, run_grid, training_grid
from ddlstudy.network.emulated import netem
from ddlstudy.records import reference
from ddlstudy.records import store as records
from ddlstudy.train.trainer import TrainConfig, conditions

NAME = "05_network_profiles"
# the columns of summary.csv the notebook shows (the table keeps them all)
SUMMARY_VIEW = ["profile", "workers", "images_per_sec", "images_per_sec_cluster", "speedup",
                "efficiency", "step_time_p50_s", "compute_s", "comm_s", "comm_wait_s",
                "bytes_sent_per_step", "network_scale", "cpu_bound"]
GOAL = 0.15  # the goal for the alpha-beta model's median error on held-out points


@dataclass
class Network:
    """What the chapter's cells share: params, the resolved grid and bench settings, whether
    namespaces work here (`live`), the folder and the results."""

    P: Any
    profiles: list[str]
    workers: list[int]
    model: str
    bench: dict[str, Any]
    out: Path
    configs: list[TrainConfig]
    live: bool
    why_not: str
    nets: dict[str, dict[str, Any]] = field(default_factory=dict)
    ref_label: str = ""
    summary: pd.DataFrame = field(default_factory=pd.DataFrame)


def setup(P: Any, run_dir: str | Path | None, profiles: list[str] | None = None,
          workers: list[int] | None = None, model: str | None = None, steps: int | None = None,
          use_reference: bool = False, **bench: Any) -> Network:
    """The `network` section with the notebook's overrides (`bench_*`: the all-reduce bench on
    shaped links); says in one line when the reference run stands in for a measurement."""
    N = P.network
    profiles, workers, model = profiles or N.profiles, workers or N.workers, model or N.model
    bench = {k: v or getattr(N, k) for k, v in bench.items()}
    out = records.chapter_dir(run_dir, NAME, P.model_dump(mode="json"),
                              notebook={"profiles": profiles, "workers": workers, "model": model})
    base = base_config(P, model, batch_size=N.batch_size, steps=steps or N.steps,
                       warmup_steps=N.warmup_steps, compute="replay",
                       replay_source=N.replay_source, algorithm=N.algorithm, overlap=True)
    live, why_not = netem.available()
    if use_reference:
        live, why_not = False, "use_reference = True"
    if not live:  # one line, then the committed reference cells (never as if measured now)
        print(f"Emulated network not available here ({why_not}): showing the reference run's "
              "records from results/reference/05_network_profiles, not a measurement on this "
              "host.")
    return Network(P, profiles, workers, model, bench, out,
                   training_grid(base, [model], ["allreduce"], workers), live, why_not)


def _cluster_kw(S: Network) -> dict[str, Any]:
    """emulated_cluster's keywords from params (scale, offload, timeouts)."""
    P = S.P
    return dict(offload_off=not P.network.offload, start_timeout_s=P.cluster.start_timeout_s,
                collective_timeout_s=P.cluster.collective_timeout_s)


def _from_reference(S: Network) -> list[pd.DataFrame]:
    """The committed reference cells per profile; the grid becomes the reference's."""
    ref = reference.load(NAME)
    S.ref_label = reference.label(ref)
    assert not ref.empty, f"{S.ref_label}: no committed cells for chapter 05"
    S.model = str(ref["model"].iloc[0])  # the reference's grid, not this run's params
    S.workers = sorted(int(w) for w in ref["workers"].unique())
    S.configs = training_grid(base_config(S.P, S.model, batch_size=int(ref["batch_size"].iloc[0]),
                                          compute="replay",
                                          replay_source=str(ref["replay_source"].iloc[0]),
                                          algorithm=str(ref["algorithm"].iloc[0]), overlap=True,
                                          steps=int(ref["steps"].iloc[0])),
                              [S.model], ["allreduce"], S.workers)
    frames = []
    for profile, part in ref.groupby("network"):
        S.nets[profile] = {"profile": profile, "scale": float(part["network_scale"].iloc[0])}
        frames.append(plots.add_speedup(part.assign(profile=profile, error="")))
    return frames


def run(S: Network) -> pd.DataFrame:
    """The grid on each profile's emulated cluster, or the reference cells (summary.csv)."""
    frames = []
    if S.live:
        for profile in S.profiles:
            with emulated_cluster(profile, max(S.workers), S.P.network.scale,
                                  **_cluster_kw(S)) as cluster:
                S.nets[profile] = net = cluster.network_info
                cells = dilate(S.configs, cluster)
                part = run_grid(cluster, cells, S.out / "runs" / profile,
                                repeats=S.P.network.repeats)
            part = part.assign(profile=profile, conditions=conditions(cells[0], net))
            frames.append(plots.add_speedup(part))
    else:
        frames = _from_reference(S)
    summary = records.write_grid_summary(pd.concat(frames, ignore_index=True), S.out,
                                         ["profile", "workers"])
    S.summary = summary
    return summary[SUMMARY_VIEW]


def _source_and_links(S: Network) -> tuple[str, str]:
    """Where the replayed compute came from, and how the links were shaped (or the reference)."""
    source = S.configs[0].replay_source
    source = "this host's CPU (measured)" if source == "measured" else source
    scales = {p: n.get("scale") for p, n in S.nets.items()}
    shaped = ("links shaped to " + ", ".join(f"{p} x {s:g}" for p, s in scales.items())
              if all(scales.values()) else "links NOT shaped (no namespaces here: loopback)")
    if S.ref_label:
        shaped += f"; {S.ref_label}"
    return source, shaped


def figure(S: Network) -> None:
    """Scaling efficiency and images/sec per profile (efficiency_by_profile.png)."""
    source, shaped = _source_and_links(S)
    fig = plots.efficiency_by_profile(
        S.summary, f"{S.model} {S.configs[0].algorithm} all-reduce: scaling efficiency per "
                   f"network (compute replayed from {source}; {shaped})")
    plots.save(fig, S.out, "efficiency_by_profile")


def text(S: Network) -> str:
    """Efficiency per profile at the most workers, IB-EDR / 10GbE against Wang (NCHC) with an
    interval, and what differs from the seed."""
    summary = S.summary
    source, shaped = _source_and_links(S)
    clean = summary[~summary["cpu_bound"]]
    top = clean["workers"].max()
    # the median of each profile's runs at the top count (a cell pooled from several sittings
    # or run with `network.repeats` > 1 has one row per run)
    cells = clean[clean["workers"] == top]
    runs = cells.groupby("profile").size()
    at_top = cells.groupby("profile", sort=False).median(numeric_only=True)
    lo, hi = int(runs.min()), int(runs.max())
    many = "" if hi == 1 else f", median of {lo if lo == hi else f'{lo}-{hi}'} runs"
    lines = [f"At {top} workers ({S.model}, batch {S.configs[0].batch_size} per worker, compute "
             f"replayed from {source}, {shaped}{many}): " + ", ".join(
                 f"{p} {r.efficiency:.0%} scaling efficiency ({r.images_per_sec_cluster:.0f} "
                 f"cluster-equivalent img/s; all-reduce waited {r.comm_wait_s:.2f} s of a "
                 f"{r.step_time_p50_s:.2f} s step)" for p, r in at_top.iterrows()) + "."]
    if S.ref_label:
        lines.insert(0, f"**{S.ref_label}** (not measured now: {S.why_not}).")
    if len(clean) < len(summary):
        lines.append(f"{len(summary) - len(clean)} cell(s) asked more of this host than its "
                     "measured aggregate link ceiling (`cpu_bound`, red x) and are left out.")
    if {"IB-EDR", "10GbE"} <= set(at_top.index) and top > 1:
        ib, eth = at_top.loc["IB-EDR"], at_top.loc["10GbE"]
        # the unit: interleaved repeats, else the timed chunks of each cell's one run
        runs = S.out / "runs" if S.live else reference.reference_dir() / NAME / "runs"
        est, unit = units.speedup_ratio(clean.assign(network=clean["profile"]),
                                        units.chunk_rates(runs), {"network": "IB-EDR"},
                                        {"network": "10GbE"}, int(top))
        lines.append(
            f"Wang (NCHC) reported 89% (InfiniBand) vs 65% (10 GbE) at 64 GPUs; here, at {top} "
            f"workers, {ib.efficiency:.0%} vs {eth.efficiency:.0%}. "
            + stats.reason(est, 1.0, +1, "IB-EDR / 10GbE scaling efficiency", ".2f")
            + f" (over {units.UNIT_NOTE[unit]}).")
    lines.append(
        "What differs from the seed: at most a handful of workers on one host (so the ring is "
        "short and 2(N-1)/N has not reached 2), kernel TCP over veth for both profiles (no "
        "RDMA, no GPUDirect), each profile's rate scaled and compute stretched by the same "
        "factor, and no emulated latency (only rates are shaped), which flatters small "
        "messages on the slower profile.")
    return " ".join(lines)


def bench(S: Network, run_collectives_bench: Callable[..., tuple[pd.DataFrame, Any]],
          size_grid: Callable[..., list[int]]) -> str:
    """All-reduce alone on links shaped to `bench_profile` (collectives_emulated.csv), or the
    reference's records; the alpha-beta model fitted on every third point and checked on the
    rest (collectives_validation.csv, collectives_emulated_fit.png); the finding as prose.

    The bench's two functions are passed in (`ddlstudy.bench.collectives`'s, from the
    notebook): that layer sits above the chapters, as in chapter 02."""
    B, P = S.bench, S.P
    link_bench, link_label = pd.DataFrame(), ""
    ref_csv = reference.reference_dir() / NAME / "collectives_emulated.csv"
    if S.live:
        with emulated_cluster(B["bench_profile"], max(B["bench_ranks"]), P.network.scale,
                              **_cluster_kw(S)) as cluster:
            link_net = cluster.network_info
            bench_df, _ = run_collectives_bench(
                cluster, B["bench_ranks"],
                size_grid(B["bench_sizes"][0], B["bench_sizes"][-1], 4),
                B["bench_algorithms"], iters=B["bench_iters"], warmup=1, check=False,
                timeout_s=P.cluster.collective_timeout_s)
        link_bench = bench_df.assign(profile=B["bench_profile"],
                                     network_scale=link_net.get("scale"),
                                     link_bps=link_net.get("emulated_rate_bps"))
        records.write_table(link_bench, S.out, "collectives_emulated")
    elif ref_csv.exists():
        link_bench = pd.read_csv(ref_csv)
        link_label = f"reference run (results/reference/{NAME}), not measured now"
    if link_bench.empty:
        return (f"All-reduce on shaped links: not measured here ({S.why_not}) and no "
                "reference records of it are committed.")
    link_table, alpha = costmodel.validate_collectives(link_bench)
    records.write_table(link_table, S.out, "collectives_validation")
    held = link_table[link_table["role"] == "validate"]
    med = float(held["rel_error"].abs().median())
    worst = held.loc[held["rel_error"].abs().idxmax()]
    rate = float(link_bench["link_bps"].median())
    fig = plots.collectives_on_links(
        link_table, f"all-reduce on {B['bench_profile']}-like links x "
                    f"{link_bench['network_scale'].iloc[0]} ({rate / 1e6:.0f} Mbit/s, emulated): "
                    "measured (points) vs alpha-beta (lines)"
                    + (f"\n{link_label}" if link_label else ""))
    # not "collectives_emulated": plots.save writes <name>.csv beside the png, which would
    # overwrite the bench's own table with the figure's data
    plots.save(fig, S.out, "collectives_emulated_fit")
    return ((f"**{link_label}.** " if link_label else "")
            + f"All-reduce alone on {B['bench_profile']}-like links at {rate / 1e6:.0f} Mbit/s "
            f"per link (emulated): {len(link_table)} points "
            f"({', '.join(sorted(link_table['algorithm'].unique()))}; "
            f"{', '.join(map(str, sorted(link_table['ranks'].unique())))} ranks). With the "
            f"link's rate given and one fitted cost per message ({alpha * 1e3:.2f} ms, on "
            f"{len(link_table) - len(held)} points), the alpha-beta model predicts the "
            f"{len(held)} held-out points with median relative error **{med:.2f}** "
            f"({'within' if med <= GOAL else 'above'} the {GOAL} this check aims for); the "
            "worst is "
            f"{worst.algorithm} on {int(worst.ranks)} ranks at "
            f"{plots.human_bytes(int(worst.size_bytes))} ({worst.rel_error:+.0%}). One run per "
            f"point (times are the median of {B['bench_iters']} iterations): the error is a "
            "spread of points, not of repeats.")
