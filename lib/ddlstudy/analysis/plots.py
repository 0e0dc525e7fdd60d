"""Seaborn figures, one function per figure kind; each reads only record tables.

Every function takes a tidy DataFrame as the run wrote it and returns a Figure, so a notebook,
the report and a test draw the same picture from the same records.

Long because: one module holds every chapter's figure kinds (one function each, grouped by
chapter), so the book's style (analysis.style) and tests/test_figures.py reach them all in one
place; splitting by chapter would scatter the shared helpers (bytes axes, projected curves).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from ddlstudy.analysis import style
from ddlstudy.analysis.validity import REPLAY_LAG_MAX, replay_lagged
from ddlstudy.records.store import SPEEDUP_COLUMNS

sns.set_theme(context="notebook", style="whitegrid")
# Where repeats sit under one point: the line is their median and the band seaborn's 95 %
# percentile-bootstrap interval of that median (fixed seed), as the verdicts use medians.
MEDIAN_CI: dict = {"estimator": "median", "errorbar": ("ci", 95), "seed": 0}


def save(fig: Figure, out_dir: str | Path, name: str) -> Path:
    """`<name>.png`, with `<name>.json` (caption: the figure's title; kind) and, when the
    figure function tagged its data (style.finish), `<name>.csv`: the book captions the figure
    and links its data. Where `<name>.csv` is already a chapter's table (a csv with no figure
    sidecar), the table stays: it is the figure's data when of the same shape, else ValueError
    (the figure's data, a subset say, would silently replace it)."""
    import json

    path = Path(out_dir) / f"{name}.png"
    data = getattr(fig, "ddlstudy_data", None)
    table = path.with_suffix(".csv")
    keep = (isinstance(data, pd.DataFrame) and table.exists()
            and not path.with_suffix(".json").exists())  # a chapter's table, not a figure's
    if keep and not _same_shape(pd.read_csv(table), data):
        raise ValueError(f"figure {name!r} would overwrite the table {table} with other data: "
                         "give the figure its own name")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    if isinstance(data, pd.DataFrame) and not keep:  # a table that is the figure's data stays
        data.to_csv(table, index=False)
    path.with_suffix(".json").write_text(json.dumps(
        {"caption": style.caption_of(fig), "kind": getattr(fig, "ddlstudy_kind", "")}))
    return path


def _same_shape(table: pd.DataFrame, data: pd.DataFrame) -> bool:
    """The table holds the figure's data: same columns, same number of rows."""
    return list(table.columns) == [str(c) for c in data.columns] and len(table) == len(data)


def _bytes_axis(ax: plt.Axes) -> None:
    ax.set_xscale("log", base=2)
    ticks = [t for t in (2.0 ** np.arange(0, 40, 4)) if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    ax.set_xticks(ticks, [human_bytes(t) for t in ticks])


def human_bytes(n: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n:g} B"


def collective_time_vs_size(df: pd.DataFrame, title: str = "") -> Figure:
    """Fourie 2019's figure: all-reduce time vs message size, log-log, one line per algorithm."""
    grid = sns.relplot(data=df, x="size_bytes", y="time_p50_s", hue="algorithm", col="ranks",
                       kind="line", marker="o", **MEDIAN_CI, height=3.6, aspect=1.2,
                       facet_kws={"sharey": True}, palette=style.palette(df["algorithm"]))
    grid.set_titles("{col_name} ranks")
    for ax in grid.axes.flat:
        style.log_if_decades(ax, df["time_p50_s"])
        _bytes_axis(ax)
        ax.set_xlabel("message size (bytes per rank)")
        ax.set_ylabel("time p50 (s)")
    style.title(grid.figure, title or "All-reduce time vs message size", facets=True)
    return style.finish(grid.figure, df, "measured")


def collective_busbw_vs_size(df: pd.DataFrame, p2p_GBps: float | None = None,
                             title: str = "") -> Figure:
    grid = sns.relplot(data=df, x="size_bytes", y="busbw_GBps", hue="algorithm", col="ranks",
                       kind="line", marker="o", **MEDIAN_CI, height=3.6, aspect=1.2,
                       palette=style.palette(df["algorithm"]))
    grid.set_titles("{col_name} ranks")
    for ax in grid.axes.flat:
        _bytes_axis(ax)
        ax.set_xlabel("message size (bytes per rank)")
        ax.set_ylabel("busbw (GB/s)")
        if p2p_GBps:
            ax.axhline(p2p_GBps, color="k", ls="--", lw=1)
            ax.annotate("point-to-point", (ax.get_xlim()[0], p2p_GBps), fontsize=8,
                        va="bottom")
    style.title(grid.figure, title or "Bus bandwidth (algbw x 2(n-1)/n)", facets=True)
    return style.finish(grid.figure, df, "measured")


def costmodel_residuals(err: pd.DataFrame, title: str = "") -> Figure:
    """Relative error of the fitted alpha-beta-gamma model, per algorithm and size."""
    grid = sns.relplot(data=err, x="size_bytes", y="rel_error", hue="algorithm", col="ranks",
                       kind="line", marker="o", height=3.4, aspect=1.2,
                       palette=style.palette(err["algorithm"]))
    grid.set_titles("{col_name} ranks")
    for ax in grid.axes.flat:
        _bytes_axis(ax)
        ax.axhline(0, color="k", lw=0.8)
        ax.set_xlabel("message size (bytes per rank)")
        ax.set_ylabel("(predicted - measured) / measured (fraction)")
    style.title(grid.figure, title or "Cost model fit residuals", facets=True)
    return style.finish(grid.figure, err, "measured")


def p2p_bandwidth(df: pd.DataFrame, title: str = "") -> Figure:
    """Wang (NCHC)'s Fig. 2: node-to-node bandwidth and latency vs message size."""
    fig, (bw, lat) = plt.subplots(1, 2, figsize=(10, 3.6))
    df = df.assign(peer=df["peer"].astype(str))
    sns.lineplot(data=df, x="size_bytes", y="bandwidth_GBps", hue="peer", marker="o", ax=bw,
                 **MEDIAN_CI)
    sns.lineplot(data=df, x="size_bytes", y="latency_us", hue="peer", marker="o", ax=lat,
                 **MEDIAN_CI)
    for ax in (bw, lat):
        _bytes_axis(ax)
        ax.set_xlabel("message size (bytes)")
    style.log_if_decades(lat, df["latency_us"])
    bw.set_ylabel("bandwidth (GB/s)")
    lat.set_ylabel("one-way latency (\u00b5s)")
    style.title(fig, title or "Rank 0 to each peer: ping-pong")
    return style.finish(fig, df, "measured")


def throughput_vs_workers(summary: pd.DataFrame, title: str = "",
                          order: list[int] | None = None) -> Figure:
    """Shi 2019 Figs 4.1/4.2: images/sec vs worker count, PS and ring in one panel per model
    (strategy colours from analysis.style); `order`: the worker counts on the x axis (default:
    those with a value)."""
    grid = sns.catplot(data=summary, x="workers", y="images_per_sec", hue="strategy",
                       col="model", kind="point", height=3.6, aspect=1.1, order=order,
                       palette=style.palette(summary["strategy"]), **MEDIAN_CI)
    grid.set_axis_labels("workers", "images / sec (all workers)")
    grid.set_titles("{col_name}")
    style.title(grid.figure, title or "Training throughput", facets=True)
    return style.finish(grid.figure, summary, "measured")


def ps_vs_ring(summary: pd.DataFrame, title: str = "", min_workers: int = 2,
               ncols: int = 3) -> Figure:
    """The study's answer in one figure: images/sec (cluster-equivalent when the clock was
    dilated) vs workers, PS and ring in each model's panel (up to `ncols` a row), median of runs
    and its interval. From `min_workers` (2: a 1-worker ring sends nothing, so its cell is not
    the same kind of step as the PS's and dwarfs the rest)."""
    y = "images_per_sec_cluster" if "images_per_sec_cluster" in summary and \
        summary["images_per_sec_cluster"].notna().any() else "images_per_sec"
    pair = summary["strategy"].isin(["ps_sync", "allreduce"])
    data = summary[pair] if pair.any() else summary
    data = data[data["workers"] >= min_workers].assign(strategy=data["strategy"].replace(
        {"ps_sync": "ps_sync (Parameter Server)", "allreduce": "allreduce (ring)"}))
    models = list(dict.fromkeys(data["model"]))
    cols = max(1, min(ncols, len(models)))
    rows = -(-len(models) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(max(7.0, 3.6 * cols), 2.9 * rows + 0.6),
                             squeeze=False)
    flat = list(axes.flat)
    for ax, model in zip(flat, models, strict=False):
        part = data[data["model"] == model]
        sns.lineplot(data=part, x="workers", y=y, hue="strategy", marker="o", ax=ax,
                     palette=style.palette(part["strategy"]), legend=ax is flat[0],
                     **MEDIAN_CI)
        style.integer_ticks(ax, part["workers"])
        ax.set_title(str(model), fontsize=10)
        ax.set_xlabel("workers")
        ax.set_ylabel("images / sec (cluster)")
        ax.set_ylim(bottom=0)
    for ax in flat[len(models):]:
        ax.set_visible(False)
    if flat[0].get_legend():
        sns.move_legend(flat[0], "lower left", fontsize=7, title=None)
    fig.tight_layout()
    style.title(fig, title, facets=True)
    return style.finish(fig, data, "emulated")


def add_speedup(summary: pd.DataFrame) -> pd.DataFrame:
    """Speed-up over the same model and strategy at 1 worker (Shi 2019 Figs 4.3/4.4)."""
    keys = ["model", "strategy"]
    summary = summary.drop(columns=list(SPEEDUP_COLUMNS), errors="ignore")
    base = (summary[summary["workers"] == 1].groupby(keys)["images_per_sec"].max()
            .rename("base_images_per_sec"))
    out = summary.join(base, on=keys)
    out["speedup"] = out["images_per_sec"] / out["base_images_per_sec"]
    out["efficiency"] = out["speedup"] / out["workers"]
    return out.sort_values([*keys, "workers"])


def speedup_vs_workers(summary: pd.DataFrame, title: str = "") -> Figure:
    """Speed-up over 1 worker per model and strategy; a strategy without a 1-worker cell has no
    baseline and is left out (said on the figure when none has one)."""
    data = add_speedup(summary).dropna(subset=["speedup"])
    if data.empty:
        fig, ax = plt.subplots(figsize=(5, 3))
        ax.text(0.5, 0.5, "no speed-up: no strategy ran a 1-worker cell (the baseline)",
                ha="center", va="center", transform=ax.transAxes, wrap=True)
        ax.set_axis_off()
        style.title(fig, title or "Speed-up")
        return style.finish(fig, data, "measured")
    grid = sns.relplot(data=data, x="workers", y="speedup", hue="strategy", col="model",
                       kind="line", marker="o", **MEDIAN_CI, height=3.6, aspect=1.1,
                       palette=style.palette(data["strategy"]))
    grid.set_titles("{col_name}")
    for ax in grid.axes.flat:
        top = data["workers"].max()
        ax.plot([1, top], [1, top], color="k", ls=":", lw=1, label="linear")
        ax.set_ylabel("speed-up over 1 worker (x)")
        style.integer_ticks(ax, data["workers"])
    style.title(grid.figure, title or "Speed-up", facets=True)
    return style.finish(grid.figure, data, "measured")


def step_breakdown(summary: pd.DataFrame, title: str = "") -> Figure:
    """Where a step's time goes: compute, communication, update, per worker count."""
    parts = [c for c in ("compute_s", "comm_s", "update_s") if c in summary]
    data = summary.copy()
    data["label"] = data["strategy"] + "\n" + data["workers"].astype(str) + "w"
    models = list(dict.fromkeys(data["model"]))
    fig, axes = plt.subplots(1, len(models), figsize=(4.5 * len(models), 3.8), squeeze=False)
    for ax, model in zip(axes[0], models, strict=True):
        sub = data[data["model"] == model].sort_values(["strategy", "workers"])
        bottom = np.zeros(len(sub))
        for part in parts:
            ax.bar(sub["label"], sub[part], bottom=bottom, label=part.removesuffix("_s"))
            bottom += sub[part].to_numpy()
        ax.set_title(model)
        ax.set_xlabel("strategy, workers")
        ax.set_ylabel("seconds per step (median, s)")
        ax.tick_params(axis="x", labelsize=8)
    axes[0][0].legend()
    style.title(fig, title or "Step time breakdown", facets=True)
    return style.finish(fig, summary, "measured")


def _nodes(mon: pd.DataFrame) -> pd.DataFrame:
    return mon.assign(node=mon["role"] + " " + mon["rank"].astype(str),
                      t=mon["t"] - mon["t"].min())


def utilization_over_time(mon: pd.DataFrame, title: str = "") -> Figure:
    """Shi 2019 Figs 4.5, 4.8, ...: CPU utilisation per node over time."""
    fig, ax = plt.subplots(figsize=(8, 3.4))
    sns.lineplot(data=_nodes(mon), x="t", y="cpu_pct", hue="node", ax=ax)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("CPU of the engine process (%)")
    ax.set_title(title or "Utilisation per node")
    return style.finish(fig, mon, "measured")


def packets_over_time(mon: pd.DataFrame, title: str = "") -> Figure:
    """Shi 2019 Figs 4.6-4.7, ...: packets received and sent per node over time."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.4))
    shared = "iface_shared" in mon and bool(mon["iface_shared"].fillna(False).any())
    for ax, col in zip(axes, ("packets_recv_per_s", "packets_sent_per_s"), strict=True):
        sns.lineplot(data=_nodes(mon), x="t", y=col, hue="node", ax=ax)
        ax.set_xlabel("time (s)")
        ax.set_ylabel(col.replace("_per_s", "").replace("_", " ") + " (per s)")
        ax.set_title(("received" if "recv" in col else "sent")
                     + (" (shared loopback: every engine's packets)" if shared else ""),
                     fontsize=9)
    style.title(fig, title or "Packets per node", facets=True)
    return style.finish(fig, mon, "measured")


def ps_setups_timeline(mon: pd.DataFrame, title: str = "") -> Figure:
    """Shi 2019 Fig 5.1: the PS server's traffic for each worker count, one after another."""
    server = mon[mon["role"] == "server"].copy()
    fig, ax = plt.subplots(figsize=(10, 3.4))
    offset = 0.0
    for workers, part in server.groupby("workers", sort=True):
        t = part["t"] - part["t"].min() + offset
        ax.plot(t, part["bytes_recv_per_s"] / 1e6, label=f"{workers} workers")
        offset = float(t.max()) + 1.0
    ax.set_xlabel("time (s), setups concatenated")
    shared = "iface_shared" in server and bool(server["iface_shared"].any())
    # On a shared lo the server's counter is every local engine's traffic: say so on the axis.
    ax.set_ylabel("loopback MB / s (all engines)" if shared else "server MB received / s")
    ax.legend()
    ax.set_title(title or "Parameter Server traffic as workers are added")
    return style.finish(fig, server, "measured")


def traffic_per_node(per_repeat: pd.DataFrame, title: str = "") -> Figure:
    """Shi 2019 Figs 4.5-4.22 in one panel: bytes per step through the PS server (received)
    and through one ring worker (sent), in model sizes, against workers (median of repeats,
    every repeat a dot), beside the ring's 2(N-1)/N (analytic)."""
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    series = [("ps_sync", "server_recv / model", "PS server (received)"),
              ("allreduce", "worker_sent / model", "ring worker (sent)")]
    for strategy, col, label in series:
        part = per_repeat[per_repeat["strategy"] == strategy]
        if part.empty:
            continue
        med = part.groupby("workers")[col].median()
        ax.plot(med.index, med.values, marker="o", color=style.colour(strategy), label=label)
        ax.scatter(part["workers"], part[col], color=style.colour(strategy), alpha=0.35, s=12)
    n = np.array(sorted(per_repeat["workers"].unique()))
    ax.plot(n, 2 * (n - 1) / n, "k--", lw=1, label="ring theory 2(N-1)/N (analytic)")
    style.integer_ticks(ax, per_repeat["workers"])
    ax.set(xlabel="workers", ylabel="bytes per step / model size")
    ax.legend(fontsize=8)
    ax.set_title(title or "Traffic per node per step: the PS server vs a ring worker",
                 fontsize=10)
    return style.finish(fig, per_repeat, "measured")


def drift_table_figure(drift: pd.DataFrame, title: str = "") -> Figure:
    fig, ax = plt.subplots(figsize=(6, 3))
    # points, not bars: a bar's length means nothing on a log axis (used when errors span decades)
    sns.stripplot(data=drift, x="algorithm", y="abs_error", hue="algorithm", ax=ax, size=7,
                  palette=style.palette(drift["algorithm"]), legend=False, jitter=False)
    style.log_if_decades(ax, drift["abs_error"])
    ax.set_xlabel("all-reduce algorithm")
    ax.set_ylabel("|float32 result - exact| (absolute)")
    ax.set_title(title or "Summation order ('bracketing') drift")
    ax.tick_params(axis="x", rotation=30)
    return style.finish(fig, drift, "measured")


# ----------------------------------------------------------------------------- chapter 06
def model_vs_measured(table: pd.DataFrame, title: str = "") -> Figure:
    """Step-time model validation: predicted vs measured seconds per step, one point per cell
    (fit cells hollow), the identity and a +-10 % band."""
    fig, ax = plt.subplots(figsize=(5.2, 4.6))
    lo = 0.8 * min(table["measured_s"].min(), table["predicted_s"].min())
    hi = 1.25 * max(table["measured_s"].max(), table["predicted_s"].max())
    xs = np.geomspace(lo, hi, 50)
    ax.plot(xs, xs, color="k", lw=1)
    ax.fill_between(xs, 0.9 * xs, 1.1 * xs, color="0.85", label="+-10 %")
    held = table[table["role"] == "validate"]
    sns.scatterplot(data=held, x="measured_s", y="predicted_s", hue="strategy", style="model",
                    ax=ax, s=45, palette=style.palette(held["strategy"]))
    fit = table[table["role"] == "fit"]
    ax.scatter(fit["measured_s"], fit["predicted_s"], facecolor="none", edgecolor="k",
               marker="s", s=70, label="fit cells")
    ax.set(xscale="log", yscale="log", xlabel="measured s per step (emulated clock)",
           ylabel="predicted s per step (model)",
           title=title or "Step-time model vs measured cells")
    ax.legend(fontsize=7, loc="upper left")
    return style.finish(fig, table, "emulated, projected")


def projected_curves(proj: pd.DataFrame, measured: pd.DataFrame | None, y: str, hue: str,
                     col: str | None = None, title: str = "", logx: bool = False,
                     ylabel: str = "", line_kind: dict[Any, str] | None = None) -> Figure:
    """Projected `y` vs workers as lines (one per `hue`, a panel per `col`), measured cells of
    the same configuration as points on them. line_kind: panel -> what its lines are, in the
    legend ('projected' where not given)."""
    cols = list(proj[col].unique()) if col else [None]
    fig, axes = plt.subplots(1, len(cols), figsize=(3.4 * len(cols) + 1.5, 3.6), squeeze=False,
                             sharey=y == "efficiency")
    palette = style.palette(proj[hue])
    for ax, key in zip(axes[0], cols, strict=True):
        part = proj if key is None else proj[proj[col] == key]
        for name, line in part.groupby(hue, sort=False):
            line = line.sort_values("workers")
            kind = (line_kind or {}).get(key, "projected")
            ax.plot(line["workers"], line[y], color=palette[name], label=f"{name} ({kind})")
        if measured is not None and len(measured):
            pts = measured if key is None else measured[measured[col] == key]
            for name, dots in pts.groupby(hue):
                ax.scatter(dots["workers"], dots[y], color=palette.get(name, "k"), marker="o",
                           edgecolor="k", zorder=3, label=f"{name} (measured, emulated)")
        if logx and style.spans_decades(proj["workers"], decades=1.0):
            ax.set_xscale("log", base=2)
        else:
            style.integer_ticks(ax, proj["workers"])
        if y == "efficiency":
            ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:.0%}"))
            ax.set_ylim(0, 1.05)
        ax.set(xlabel="workers", ylabel=ylabel or y, title="" if key is None else str(key))
        ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    style.title(fig, title, facets=col is not None)
    return style.finish(fig, proj, "projected")


# ----------------------------------------------------------------------------- chapter 10
def recovery_cost(fails: pd.DataFrame, order: list[str], title: str = "") -> Figure:
    """Time lost and steps redone per failing run: one dot per repeat, a bar at the median."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.4))
    for ax, col, label in [(axes[0], "time_lost_s", "time lost, s (one host)"),
                           (axes[1], "steps_redone", "steps redone")]:
        for i, s in enumerate(order):
            vals = fails[fails["strategy"] == s][col]
            ax.plot([i] * len(vals), vals, "o", alpha=0.6, color=style.colour(s))
            ax.plot([i - 0.2, i + 0.2], [vals.median()] * 2, "k-")
        ax.set_xticks(range(len(order)), order)
        ax.set_xlabel("strategy")
        ax.set_ylabel(label)
    style.title(fig, title)
    return style.finish(fig, fails, "measured")


# ----------------------------------------------------------------------------- chapter 09
def batch_sweep(part: pd.DataFrame, trained: bool, title: str = "") -> Figure:
    """One model's batch sweep: time per epoch and images/sec (and, when trained, test accuracy
    and loss) against batch size per worker, one line per worker count (`label`)."""
    cols = [("time_per_epoch_s", "time per epoch, s"), ("images_per_sec", "images / sec")]
    if trained:
        cols += [("test_accuracy", "test accuracy"), ("test_loss", "test loss")]
    fig, axes = plt.subplots(1, len(cols), figsize=(4.2 * len(cols), 3.5))
    for ax, (col, label) in zip(axes, cols, strict=True):
        sns.lineplot(data=part, x="batch_size", y=col, hue="label", marker="o",
                     estimator="median", errorbar=("ci", 95), ax=ax, legend=ax is axes[0])
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size per worker")
        ax.set_ylabel(label)
    fig.suptitle(title, y=1.03, fontsize=10)
    fig.subplots_adjust(wspace=0.35)
    return style.finish(fig, part, "measured")


def malik_batch(malik: pd.DataFrame, title: str = "") -> Figure:
    """Malik 2018's sweep: cluster-equivalent images/sec against batch size, one line a model."""
    fig, ax = plt.subplots(figsize=(6.5, 3.5))
    sns.lineplot(data=malik, x="batch_size", y="images_per_sec_cluster", hue="model",
                 marker="o", estimator="median", errorbar=("ci", 95), ax=ax)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size per worker")
    ax.set_ylabel("cluster-equivalent images / sec")
    ax.set_title(title, fontsize=9)
    return style.finish(fig, malik, "emulated")


# ----------------------------------------------------------------------------- chapter 03
def throughput_with_excluded(summary: pd.DataFrame, title: str = "",
                             flag: str = "cpu_bound") -> Figure:
    """`throughput_vs_workers` over the runs the verdicts read, with the others marked where
    they fell: runs flagged `flag` (they asked more than the host moves) by a red x, lone
    replayed workers whose clock lagged (`analysis.validity.replay_lagged`: the host set their
    step) by an orange +. Medians and intervals leave the marked runs out, as the comparisons
    do; the figure's data (its csv) keeps every run, with an `excluded` column."""
    bad = {"cpu": summary[flag].eq(True), "lag": replay_lagged(summary)}
    excluded = bad["cpu"] | bad["lag"]
    slots = sorted(summary["workers"].unique())
    fig = throughput_vs_workers(
        summary.assign(images_per_sec=summary["images_per_sec"].where(~excluded)), title,
        order=slots)
    marks = {"cpu": ("x", "red", f"{'CPU-bound' if flag == 'cpu_bound' else flag} (excluded)"),
             "lag": ("P", "darkorange", f"replay lag > {REPLAY_LAG_MAX:.0%} (excluded)")}
    models = list(dict.fromkeys(summary["model"]))
    for ax, model in zip(fig.axes, models, strict=False):
        shown = False
        for key, (marker, colour, label) in marks.items():
            rows = summary[bad[key] & (summary["model"] == model)]
            if len(rows):
                ax.scatter([slots.index(w) for w in rows["workers"]], rows["images_per_sec"],
                           marker=marker, s=90, color=colour, zorder=5, label=label)
                shown = True
        if shown:
            ax.legend(loc="best", fontsize=8)
    return style.finish(fig, summary.assign(excluded=excluded), "measured")


# ----------------------------------------------------------------------------- chapter 08
def convergence_curves(part: pd.DataFrame, time_label: str, title: str = "") -> Figure:
    """Test accuracy and training loss per epoch, and accuracy per second of `wall_s`, one line
    per strategy (median over seeds, 95 % bootstrap band of the median)."""
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.6))
    for ax, (x, y) in zip(axes, [("epoch", "test_accuracy"), ("epoch", "train_loss"),
                                 ("wall_s", "test_accuracy")], strict=True):
        sns.lineplot(data=part, x=x, y=y, hue="strategy", style="strategy", markers=True,
                     estimator="median", errorbar=("ci", 95), ax=ax,
                     err_kws={"alpha": 0.15}, legend=ax is axes[0],
                     palette=style.palette(part["strategy"]))
        ax.set_xlabel(time_label if x == "wall_s" else "epoch")
    fig.suptitle(title, y=1.03)
    fig.subplots_adjust(wspace=0.3)
    return style.finish(fig, part, "measured")


def staleness_shares(shares: pd.DataFrame, title: str = "") -> Figure:
    """Share of async PS updates at each staleness, one bar colour per worker count."""
    fig, ax = plt.subplots(figsize=(7, 3.4))
    sns.barplot(data=shares, x="staleness", y="share", hue="workers", ax=ax)
    ax.set_xlabel("staleness (updates behind)")
    ax.set_ylabel("share of updates (fraction)")
    ax.set_title(title)
    return style.finish(fig, shares, "measured")


def bracketing_accuracy(per_alg: pd.DataFrame, title: str = "") -> Figure:
    """Final test accuracy per all-reduce algorithm: median and its interval as error bars."""
    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    ax.errorbar(per_alg["algorithm"], per_alg["test_accuracy"],
                yerr=[per_alg["test_accuracy"] - per_alg["test_accuracy_ci_low"],
                      per_alg["test_accuracy_ci_high"] - per_alg["test_accuracy"]],
                fmt="o", capsize=4)
    ax.set_xlabel("all-reduce algorithm")
    ax.set_ylabel("final test accuracy (fraction)")
    ax.set_title(title, fontsize=9)
    return style.finish(fig, per_alg, "measured")


# ----------------------------------------------------------------------------- chapter 07
def frameworks_scaling(summary: pd.DataFrame, scaled: pd.DataFrame, titles: dict[str, str],
                       title: str = "") -> Figure:
    """Per profile (a row each, `titles`: profile -> panel title): cluster-equivalent
    images/sec (median and interval over repeats) and scaling efficiency per strategy."""
    profiles = list(titles)
    fig, axes = plt.subplots(len(profiles), 2, figsize=(11, 3.6 * len(profiles)), squeeze=False)
    for (ax_ips, ax_eff), profile in zip(axes, profiles, strict=True):
        part = summary[summary["profile"] == profile]
        sns.lineplot(data=part, x="workers", y="images_per_sec_cluster", hue="strategy",
                     marker="o", ax=ax_ips, palette=style.palette(part["strategy"]), **MEDIAN_CI)
        eff = scaled[scaled["profile"] == profile]
        sns.lineplot(data=eff, x="workers", y="efficiency", hue="strategy", marker="o",
                     ax=ax_eff, legend=False, palette=style.palette(eff["strategy"]))
        ax_eff.axhline(1.0, color="k", ls=":", lw=1)
        ax_eff.set_ylim(0, 1.2)
        ax_eff.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:.0%}"))
        ax_ips.set_ylabel("cluster-equivalent images / sec")
        ax_eff.set_ylabel("scaling efficiency")
        for ax in (ax_ips, ax_eff):
            ax.set_xticks(sorted(part["workers"].unique()))
            ax.set_title(titles[profile], fontsize=9)
    fig.suptitle(title, y=1.01)
    fig.tight_layout()
    return style.finish(fig, summary, "emulated")


def bytes_per_node(at_top: pd.DataFrame, title: str = "") -> Figure:
    """Bytes each worker sent per step, per strategy and profile (median and interval)."""
    fig, ax = plt.subplots(figsize=(9, 3.4))
    sns.barplot(data=at_top, x="strategy", y="bytes_sent_per_step", hue="profile", ax=ax,
                palette=style.palette(at_top["profile"]), **MEDIAN_CI)
    ax.set_ylabel("sent per worker per step (bytes)")
    ax.set_title(title, fontsize=8)
    return style.finish(fig, at_top, "emulated")


# ----------------------------------------------------------------------------- chapter 05
def efficiency_by_profile(summary: pd.DataFrame, title: str = "") -> Figure:
    """Scaling efficiency and cluster-equivalent images/sec against workers, one line per
    link profile; cells marked `cpu_bound` drawn as red crosses (no verdict on them)."""
    fig, (ax_eff, ax_ips) = plt.subplots(1, 2, figsize=(11, 3.8))
    sns.lineplot(data=summary, x="workers", y="efficiency", hue="profile", marker="o", ax=ax_eff,
                 palette=style.palette(summary["profile"]))
    ax_eff.axhline(1.0, color="k", ls=":", lw=1)
    ax_eff.set_ylim(0, 1.1)
    ax_eff.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:.0%}"))
    ax_eff.set_ylabel("scaling efficiency")
    sns.lineplot(data=summary, x="workers", y="images_per_sec_cluster", hue="profile",
                 marker="o", ax=ax_ips, palette=style.palette(summary["profile"]))
    ax_ips.set_ylabel("cluster-equivalent images / sec")
    bad = summary[summary["cpu_bound"]]  # asked more than this host moves: marked, no verdict
    if len(bad):
        ax_eff.scatter(bad["workers"], bad["efficiency"], marker="x", s=90, color="red",
                       zorder=5, label="CPU-bound (excluded)")
        ax_eff.legend(fontsize=8)
    fig.subplots_adjust(wspace=0.3)
    for ax in (ax_eff, ax_ips):
        ax.set_xticks(sorted(summary["workers"].unique()))
    fig.suptitle(title, y=1.02)
    return style.finish(fig, summary, "emulated")


def collectives_on_links(table: pd.DataFrame, title: str = "") -> Figure:
    """All-reduce on shaped links: measured seconds (points) and the alpha-beta prediction
    (lines) against bytes per rank, one colour per (algorithm, ranks)."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for (alg, p), part in table.groupby(["algorithm", "ranks"]):
        line, = ax.plot(part["size_bytes"], part["predicted_s"], lw=1,
                        color=style.colour(alg), ls=["-", "--", ":", "-."][int(p) % 4])
        ax.scatter(part["size_bytes"], part["measured_s"], color=line.get_color(), s=18,
                   label=f"{alg}, {p} ranks")
    ax.set(xscale="log", yscale="log", xlabel="message size (bytes per rank)",
           ylabel="all-reduce time (s, emulated)")
    ax.legend(fontsize=7, ncol=2)
    ax.set_title(title, fontsize=9)
    return style.finish(fig, table, "emulated")


def regime_map(grid: pd.DataFrame, points: pd.DataFrame, words: dict[str, float], *,
               workers: int = 6, title: str = "") -> Figure:
    """The regime map (analytic): compute seconds per step (x) vs inter-node bandwidth (y), both
    log. Solid lines: where the ring's scaling efficiency at `workers` reaches each of the
    papers' words (`words`: label -> efficiency); dashed: where the best parameter server's step
    equals the ring's (PS faster below-left of it where ps_over_ring < 1). `grid`: compute_s,
    bandwidth_bps, ring_efficiency, ps_over_ring; `points`: kind ('testbed' or 'cell'), name,
    compute_s, bandwidth_bps (and efficiency for cells)."""
    fig, ax = plt.subplots(figsize=(8, 5.5))
    xs = np.sort(grid["compute_s"].unique())
    ys = np.sort(grid["bandwidth_bps"].unique())
    eff = grid.pivot_table(index="bandwidth_bps", columns="compute_s",
                           values="ring_efficiency").reindex(index=ys, columns=xs).to_numpy()
    ratio = grid.pivot_table(index="bandwidth_bps", columns="compute_s",
                             values="ps_over_ring").reindex(index=ys, columns=xs).to_numpy()
    gbps = ys / 1e9
    shade = ax.contourf(xs, gbps, eff, levels=np.linspace(0, 1, 11), cmap="Greys", alpha=0.35)
    fig.colorbar(shade, ax=ax, label=f"ring scaling efficiency at {workers} workers (analytic)")
    handles: list = []
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (label, level) in enumerate(sorted(words.items(), key=lambda kv: kv[1])):
        color = colors[i % len(colors)]
        if np.nanmin(eff) < level < np.nanmax(eff):
            ax.contour(xs, gbps, eff, levels=[level], colors=[color], linewidths=2)
        handles.append(plt.Line2D([], [], color=color, lw=2,
                                  label=f"ring efficiency = {level:.2f}: {label}"))
    lo, hi = float(np.nanmin(ratio)), float(np.nanmax(ratio))
    crosses = lo < 1 < hi
    if crosses:
        ax.contour(xs, gbps, ratio, levels=[1.0], colors=["black"], linestyles="--",
                   linewidths=1.5)
    handles.append(plt.Line2D([], [], color="black", ls="--", label=(
        "best PS step = ring step" if crosses else
        f"best PS step = ring step: not on this grid (best PS / ring {lo:.2f}-{hi:.2f})")))
    tb = points[points["kind"] == "testbed"] if len(points) else points
    if len(tb):  # every testbed; one without a step time for this model sits at the left edge
        tb = tb[tb["bandwidth_bps"].notna()]
        placed, edge = tb[tb["compute_s"].notna()], tb[tb["compute_s"].isna()]
        _testbed_markers(ax, placed)
        handles.append(plt.Line2D([], [], marker="o", ls="", color="tab:red",
                                  label="testbed (its compute, inter-node rate): projected "
                                        "(analytic)"))
        if len(edge):
            ax.scatter(np.full(len(edge), xs.min()), edge["bandwidth_bps"] / 1e9, marker=">",
                       s=60, facecolor="none", edgecolor="tab:red", zorder=5, clip_on=False)
            for r in edge.itertuples():
                ax.annotate(f"{r.name} (rate only)", (xs.min(), r.bandwidth_bps / 1e9),
                            fontsize=7, xytext=(6, -3), textcoords="offset points")
            handles.append(plt.Line2D([], [], marker=">", ls="", markerfacecolor="none",
                                      markeredgecolor="tab:red",
                                      label="testbed with no published step time for this "
                                            "model: its rate, at the edge (analytic)"))
    cells = points[points["kind"] == "cell"] if len(points) else points
    if len(cells):
        ax.scatter(cells["compute_s"], cells["bandwidth_bps"] / 1e9, marker="*", s=160,
                   color="tab:blue", edgecolor="black", zorder=6)
        for r in cells.itertuples():
            ax.annotate(f"{r.efficiency:.0%} measured", (r.compute_s, r.bandwidth_bps / 1e9),
                        fontsize=7, xytext=(4, -10), textcoords="offset points")
        handles.append(plt.Line2D([], [], marker="*", ls="", color="tab:blue", markersize=11,
                                  markeredgecolor="black",
                                  label="measured cell (emulated), cluster-equivalent"))
    ax.set(xscale="log", yscale="log", xlabel="compute time per step per worker (s)",
           ylabel="inter-node bandwidth per node (Gb/s)")
    ax.legend(handles=handles, fontsize=7, loc="lower right")
    ax.set_title(title or f"regime map (analytic), {workers} workers", fontsize=9)
    return fig


def _testbed_markers(ax: Any, placed: pd.DataFrame) -> None:
    """Each testbed (compute_s, bandwidth_bps) as a red dot with its name."""
    ax.scatter(placed["compute_s"], placed["bandwidth_bps"] / 1e9, marker="o", s=45,
               color="tab:red", zorder=5)
    for r in placed.itertuples():
        ax.annotate(r.name, (r.compute_s, r.bandwidth_bps / 1e9), fontsize=7,
                    xytext=(4, 3), textcoords="offset points")


def winners_map(grid: pd.DataFrame, testbeds: pd.DataFrame, *, column: str = "winner",
                title: str = "") -> Figure:
    """Where each strategy's predicted step is the fastest (analytic): compute seconds per step
    (x) vs inter-node bandwidth (y), both log, one colour per winner (`column` of `grid`); each
    testbed a red dot."""
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    fig, ax = plt.subplots(figsize=(8, 5.5))
    xs = np.sort(grid["compute_s"].unique())
    ys = np.sort(grid["bandwidth_bps"].unique())
    names = sorted(grid[column].unique())
    code = {n: i for i, n in enumerate(names)}
    z = grid.assign(code=grid[column].map(code)).pivot_table(
        index="bandwidth_bps", columns="compute_s", values="code").reindex(
        index=ys, columns=xs).to_numpy()
    colors = [("#dddddd" if n.startswith("none") else plt.cm.tab10(i % 10))
              for i, n in enumerate(names)]
    ax.pcolormesh(xs, ys / 1e9, z, cmap=ListedColormap(colors), vmin=-0.5,
                  vmax=len(names) - 0.5, shading="nearest", alpha=0.6)
    if len(testbeds):
        _testbed_markers(ax, testbeds)
    handles = [Patch(color=colors[code[n]], alpha=0.6, label=n) for n in names]
    handles.append(plt.Line2D([], [], marker="o", ls="", color="tab:red",
                              label="testbed (its compute, inter-node rate): projected"))
    ax.set(xscale="log", yscale="log", xlabel="compute time per step per worker (s)",
           ylabel="inter-node bandwidth per node (Gb/s)")
    ax.legend(handles=handles, fontsize=7, loc="lower right")
    ax.set_title(title or "fastest strategy (analytic)", fontsize=9)
    return fig
