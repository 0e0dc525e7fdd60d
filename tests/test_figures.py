"""Every figure function of analysis.plots drawn on small synthetic records: each visible panel
has axis labels, a figure with several series has a legend, worker axes tick at whole numbers,
the figure's title does not overlap a panel's title, strategies keep one colour everywhere
(analysis.style), and plots.save writes the caption and the data beside the PNG."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.colors import to_hex  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from ddlstudy.analysis import plots, style  # noqa: E402

RNG = np.random.default_rng(0)
STRATEGIES = ["ps_sync", "allreduce"]


def _summary() -> pd.DataFrame:
    rows = []
    for model in ("alexnet", "resnet50"):
        for strategy in STRATEGIES:
            for workers in (1, 2, 4):
                for repeat in range(2):
                    ips = 100 * workers ** (0.9 if strategy == "allreduce" else 0.4)
                    rows.append({"model": model, "strategy": strategy, "workers": workers,
                                 "repeat": repeat, "images_per_sec": ips * (1 + 0.01 * repeat),
                                 "images_per_sec_cluster": ips * 50, "compute_s": 0.1,
                                 "comm_s": 0.02 * workers, "update_s": 0.01,
                                 "cpu_bound": workers == 4 and strategy == "ps_sync"})
    return pd.DataFrame(rows)


def _collectives() -> pd.DataFrame:
    return pd.DataFrame([{"algorithm": a, "ranks": r, "size_bytes": s, "repeat": k,
                          "time_p50_s": 1e-5 * s ** 0.8 * (2 if a == "tree" else 1),
                          "busbw_GBps": s / 1e6, "rel_error": 0.05 * (k - 0.5)}
                         for a in ("ring", "tree") for r in (2, 4) for s in (8, 1024, 65536)
                         for k in range(2)])


def _monitor() -> pd.DataFrame:
    return pd.DataFrame([{"role": role, "rank": rank, "t": t, "workers": w, "cpu_pct": 50.0 + t,
                          "packets_recv_per_s": 100.0 + t, "packets_sent_per_s": 90.0 + t,
                          "bytes_recv_per_s": 1e6 * (1 + t), "iface_shared": True}
                         for role, rank in (("server", 0), ("worker", 1)) for w in (1, 2)
                         for t in range(5)])


def _projection() -> tuple[pd.DataFrame, pd.DataFrame]:
    proj = pd.DataFrame([{"strategy": s, "model": m, "workers": w,
                          "images_per_sec": 100 * w ** (0.9 if s == "allreduce" else 0.5),
                          "efficiency": 0.9 ** np.log2(w)}
                         for s in STRATEGIES for m in ("alexnet", "vgg16") for w in (1, 2, 4, 6)])
    return proj, proj[proj["workers"] <= 2]


def _frameworks() -> tuple[pd.DataFrame, pd.DataFrame]:
    rows = [{"profile": p, "strategy": s, "workers": w, "repeat": k,
             "images_per_sec_cluster": 100.0 * w, "efficiency": 0.9, "bytes_sent_per_step": 1e6}
            for p in ("10GbE", "IB-EDR") for s in ("horovod", "tf_ps_sync") for w in (1, 2, 4)
            for k in range(2)]
    df = pd.DataFrame(rows)
    return df, df


CASES: dict[str, Callable[[], Figure]] = {
    "collective_time_vs_size": lambda: plots.collective_time_vs_size(_collectives(), "t"),
    "collective_busbw_vs_size": lambda: plots.collective_busbw_vs_size(_collectives(), 1.0),
    "costmodel_residuals": lambda: plots.costmodel_residuals(_collectives()),
    "p2p_bandwidth": lambda: plots.p2p_bandwidth(pd.DataFrame(
        [{"peer": p, "size_bytes": s, "bandwidth_GBps": s / 1e5, "latency_us": 5 + s / 1e3}
         for p in (1, 2) for s in (8, 1024, 1 << 20)])),
    "throughput_vs_workers": lambda: plots.throughput_vs_workers(_summary(), "throughput"),
    "throughput_with_excluded": lambda: plots.throughput_with_excluded(_summary(), "t"),
    "ps_vs_ring": lambda: plots.ps_vs_ring(_summary(), "PS vs ring (emulated)"),
    "speedup_vs_workers": lambda: plots.speedup_vs_workers(_summary(), "speed-up"),
    "step_breakdown": lambda: plots.step_breakdown(_summary()),
    "utilization_over_time": lambda: plots.utilization_over_time(_monitor()),
    "packets_over_time": lambda: plots.packets_over_time(_monitor()),
    "ps_setups_timeline": lambda: plots.ps_setups_timeline(_monitor()),
    "drift_table_figure": lambda: plots.drift_table_figure(pd.DataFrame(
        {"algorithm": ["ring", "tree", "reference"], "abs_error": [1e-7, 3e-6, 1e-9]})),
    "model_vs_measured": lambda: plots.model_vs_measured(pd.DataFrame(
        [{"measured_s": m, "predicted_s": m * 1.05, "strategy": s, "model": "resnet50",
          "role": r} for m, s, r in ((0.1, "ps_sync", "fit"), (0.2, "allreduce", "validate"),
                                     (0.4, "ps_sync", "validate"))])),
    "projected_curves": lambda: plots.projected_curves(
        *_projection(), "images_per_sec", "strategy", col="model", ylabel="images / sec",
        title="Shi's grid, projected"),
    "projected_curves_efficiency": lambda: plots.projected_curves(
        _projection()[0], None, "efficiency", "strategy", logx=True, ylabel="efficiency"),
    "recovery_cost": lambda: plots.recovery_cost(pd.DataFrame(
        [{"strategy": s, "time_lost_s": 1.0 + k, "steps_redone": k} for s in STRATEGIES
         for k in range(3)]), STRATEGIES, "recovery"),
    "batch_sweep": lambda: plots.batch_sweep(pd.DataFrame(
        [{"batch_size": b, "label": f"{w} workers", "time_per_epoch_s": 10 / b,
          "images_per_sec": 10.0 * b, "test_accuracy": 0.9, "test_loss": 0.3}
         for b in (8, 16, 32) for w in (1, 2)]), trained=True, title="sweep"),
    "malik_batch": lambda: plots.malik_batch(pd.DataFrame(
        [{"batch_size": b, "model": m, "images_per_sec_cluster": 10.0 * b}
         for b in (8, 16, 32) for m in ("alexnet", "resnet50")]), "malik"),
    "convergence_curves": lambda: plots.convergence_curves(pd.DataFrame(
        [{"strategy": s, "epoch": e, "seed": k, "test_accuracy": 0.5 + 0.1 * e,
          "train_loss": 1.0 / (e + 1), "wall_s": 10.0 * e} for s in STRATEGIES
         for e in range(3) for k in range(2)]), "wall-clock (s)", "curves"),
    "staleness_shares": lambda: plots.staleness_shares(pd.DataFrame(
        [{"staleness": st, "share": 0.5, "workers": w} for st in (0, 1) for w in (2, 4)]),
        "staleness"),
    "bracketing_accuracy": lambda: plots.bracketing_accuracy(pd.DataFrame(
        {"algorithm": ["ring", "tree"], "test_accuracy": [0.9, 0.91],
         "test_accuracy_ci_low": [0.88, 0.89], "test_accuracy_ci_high": [0.92, 0.93]}), "b"),
    "frameworks_scaling": lambda: plots.frameworks_scaling(
        *_frameworks(), {"10GbE": "10GbE-like", "IB-EDR": "IB-EDR-like"}, "frameworks"),
    "bytes_per_node": lambda: plots.bytes_per_node(_frameworks()[0], "bytes"),
    "traffic_per_node": lambda: plots.traffic_per_node(pd.DataFrame(
        [{"strategy": s, "workers": n, "repeat": k, "server_recv / model": float(n),
          "worker_sent / model": 2 * (n - 1) / n} for s in STRATEGIES for n in (1, 2, 4)
         for k in range(2)])),
    "efficiency_by_profile": lambda: plots.efficiency_by_profile(pd.DataFrame(
        [{"profile": p, "workers": w, "efficiency": 0.9, "images_per_sec_cluster": 100.0 * w,
          "cpu_bound": False} for p in ("10GbE", "IB-EDR") for w in (1, 2, 4)]), "profiles"),
    "collectives_on_links": lambda: plots.collectives_on_links(pd.DataFrame(
        [{"algorithm": a, "ranks": 2, "size_bytes": s, "predicted_s": s / 1e6,
          "measured_s": s / 9e5} for a in ("ring", "ps") for s in (1024, 65536)]), "links"),
}
# functions whose one series needs no legend
NO_LEGEND = {"drift_table_figure", "bracketing_accuracy", "recovery_cost", "step_breakdown"}
WORKER_AXES = {"throughput_vs_workers", "throughput_with_excluded", "ps_vs_ring",
               "speedup_vs_workers", "projected_curves", "frameworks_scaling",
               "efficiency_by_profile", "traffic_per_node"}


def _overlaps(fig: Figure) -> list[str]:
    """Panel titles the figure's title sits on."""
    if fig._suptitle is None or not fig._suptitle.get_text():
        return []
    renderer = fig.canvas.get_renderer()
    sup = fig._suptitle.get_window_extent(renderer)
    return [ax.get_title() for ax in fig.axes if ax.get_visible() and ax.get_title()
            and ax.title.get_window_extent(renderer).overlaps(sup)]


@pytest.mark.parametrize("name", sorted(CASES))
def test_figure_has_labels_and_legend(name: str) -> None:
    fig = CASES[name]()
    try:
        fig.canvas.draw()
        panels = [ax for ax in fig.axes if ax.get_visible() and ax.has_data()
                  and ax.get_label() != "<colorbar>"]
        assert panels, f"{name}: nothing drawn"
        assert all(ax.get_xlabel() for ax in panels), f"{name}: a panel has no x label"
        assert any(ax.get_ylabel() for ax in panels), f"{name}: no y label"
        if name not in NO_LEGEND:
            assert fig.legends or any(ax.get_legend() for ax in fig.axes), f"{name}: no legend"
        assert not _overlaps(fig), f"{name}: the title overlaps {_overlaps(fig)}"
        assert isinstance(getattr(fig, "ddlstudy_data", None), pd.DataFrame), \
            f"{name}: no data tagged (style.finish): the book cannot link the figure's CSV"
        if name in WORKER_AXES:
            for ax in panels:
                if ax.get_xscale() == "linear":
                    ticks = [t for t in ax.get_xticks()
                             if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
                    assert all(float(t).is_integer() for t in ticks), \
                        f"{name}: worker ticks {ticks}"
    finally:
        plt.close(fig)


def test_strategy_colours_are_fixed() -> None:
    """PS and ring keep their colour whichever other series share the figure."""
    fig = plots.ps_vs_ring(_summary())
    try:
        colours = {line.get_label(): to_hex(line.get_color()) for ax in fig.axes
                   for line in ax.get_lines() if not line.get_label().startswith("_")}
        legend = fig.axes[0].get_legend()
        shown = {t.get_text(): to_hex(h.get_color())
                 for t, h in zip(legend.get_texts(), legend.legend_handles, strict=True)}
    finally:
        plt.close(fig)
    assert shown["ps_sync (Parameter Server)"] == style.colour("ps_sync").lower()
    assert shown["allreduce (ring)"] == style.colour("allreduce").lower()
    assert colours or shown
    assert style.colour("ring") == style.colour("allreduce")  # ring all-reduce: one colour
    assert style.colour("some new name") == style.colour("some new name")


def test_log_axes_only_over_decades() -> None:
    assert style.spans_decades([1e-6, 1e-3]) and not style.spans_decades([1.0, 9.0])
    fig = plots.drift_table_figure(pd.DataFrame({"algorithm": ["ring", "tree"],
                                                 "abs_error": [1.0, 2.0]}))
    try:
        assert fig.axes[0].get_yscale() == "linear"
    finally:
        plt.close(fig)


def test_save_writes_caption_and_data(tmp_path: Path) -> None:
    fig = plots.throughput_vs_workers(_summary(), "Training throughput (emulated)")
    path = plots.save(fig, tmp_path, "throughput")
    plt.close(fig)
    meta = json.loads(path.with_suffix(".json").read_text())
    assert meta["caption"] == "Training throughput (emulated)" and meta["kind"] == "measured"
    assert len(pd.read_csv(path.with_suffix(".csv"))) == len(_summary())


def test_save_never_replaces_a_chapters_table(tmp_path: Path) -> None:
    """A figure named like a table the chapter wrote (chapter 00 saved its trial-0 drift figure
    as `bracketing_drift`, and its data replaced the 5-trial table: the claim saw 1 run) is
    refused; the figure's own earlier files (csv + json sidecar) are replaced on a re-run."""
    table = tmp_path / "summary.csv"
    _summary().to_csv(table, index=False)
    fig = plots.throughput_vs_workers(_summary(), "Training throughput (emulated)")
    try:
        pd.DataFrame({"x": [1]}).to_csv(tmp_path / "other.csv", index=False)
        with pytest.raises(ValueError, match="would overwrite the table"):
            plots.save(fig, tmp_path, "other")
        assert pd.read_csv(tmp_path / "other.csv").equals(pd.DataFrame({"x": [1]}))
        assert not (tmp_path / "other.png").exists()
        plots.save(fig, tmp_path, "summary")  # the table is the figure's data: kept, drawn
        assert pd.read_csv(table).equals(_summary()) and (tmp_path / "summary.png").exists()
        plots.save(fig, tmp_path, "throughput")
        plots.save(fig, tmp_path, "throughput")  # a re-run replaces its own data
    finally:
        plt.close(fig)


def test_chapter00_keeps_every_drift_trial(tmp_path: Path) -> None:
    from ddlstudy.chapters import ch00_background as ch00

    drift = ch00.bracketing_drift(tmp_path, repeats=3, seed=0)
    fig = ch00.drift_figure(drift, tmp_path)
    plt.close(fig)
    kept = pd.read_csv(tmp_path / "bracketing_drift.csv")
    assert sorted(kept["trial"].unique()) == [0, 1, 2] and len(kept) == len(drift)


# ----------------------------------------------------------------------------- chapter figures
def _validation_cells(over: float) -> pd.DataFrame:
    """A validation table's ring cells of resnet50 on two profiles, the model's prediction off
    by `over` (relative) at every worker count above 1."""
    rows = []
    for profile, comm in (("10GbE", 1.0), ("IB-EDR", 0.1)):
        for n in (1, 2, 4):
            measured = 1.0 + comm * (n - 1)
            predicted = measured * (1 + over * (n > 1))
            rows.append({"network": profile, "workers": n, "model": "resnet50",
                         "strategy": "allreduce", "shape": "cifar", "batch_size": 32,
                         "replay_source": "gpu", "measured_s": measured,
                         "predicted_s": predicted, "rel_error": (predicted - measured) / measured})
    return pd.DataFrame(rows)


def test_wang_panel_one_baseline_and_its_own_error() -> None:
    """Chapter 06's Wang figure: on the emulated panel the line is the model's prediction of the
    measured cells with the same 1-worker baseline as the dots, and the caption states the error
    on those points (not the projection's validation error elsewhere)."""
    from ddlstudy.chapters import ch06_projection as ch06

    cells = ch06.emulated_efficiency(_validation_cells(0.25), "resnet50", "cifar", 32, "gpu")
    assert list(cells["workers"]) == [1, 2, 4, 1, 2, 4]
    wide = pd.DataFrame([{"profile": p, "workers": w, "efficiency": 0.9, "panel": "wide"}
                         for p in ("10GbE", "IB-EDR") for w in (1, 8, 64)])
    fig = ch06.efficiency_figure(wide, pd.DataFrame(), cells, "cifar, batch 32", "Wang")
    try:
        right = fig.axes[1]
        lines = {ln.get_label(): ln.get_xydata() for ln in right.get_lines()}
        dots = np.vstack([c.get_offsets() for c in right.collections])
        caption = style.caption_of(fig)
    finally:
        plt.close(fig)
    # both start at 1 on one worker (one baseline), and the gap is the model's error
    assert all(xy[xy[:, 0] == 1, 1].tolist() == pytest.approx([1.0]) for xy in lines.values())
    assert dots[dots[:, 0] == 1, 1].tolist() == pytest.approx([1.0, 1.0])
    model_10g = lines["10GbE (model, same baseline)"]
    measured_10g = cells[cells["profile"] == "10GbE"]["efficiency"].to_numpy()
    assert model_10g[:, 1].tolist() == pytest.approx([1.0, *(measured_10g[1:] / 1.25)])
    err = cells["abs_error"].median()
    assert f"{err:.1%}" in caption and "these 6 cells" in caption, caption
    assert "validated to" not in caption


def test_shi_grid_leaves_out_the_silent_ring_point() -> None:
    """The 1-worker ring sends nothing; its point would squash every panel: it is left out and
    the caption says so."""
    from ddlstudy.chapters import ch06_projection as ch06

    proj, measured = _projection()
    proj.loc[(proj["strategy"] == "allreduce") & (proj["workers"] == 1), "images_per_sec"] = 1e4
    fig = ch06.shi_figure(proj, measured, "Shi")
    try:
        tops = [ax.get_ylim()[1] for ax in fig.axes]
        points = [xy for ax in fig.axes for ln in ax.get_lines()
                  if ln.get_label().startswith("allreduce") for xy in ln.get_xydata()]
        caption = style.caption_of(fig)
    finally:
        plt.close(fig)
    assert all(top < 2000 for top in tops), f"a panel's y range reaches {max(tops)}"
    assert points and all(x > 1 for x, _ in points)
    assert "1 worker is left out" in caption and "sends nothing" in caption


def test_chapter04_headline_shows_what_its_caption_says(tmp_path: Path) -> None:
    """The landing page's chapter 04 thumbnail is traffic_per_node.png, whose legend holds both
    the PS server and a ring worker, as the headline caption says."""
    from ddlstudy.chapters import ch04_utilization_traffic as ch04
    from ddlstudy.chapters.registry import CHAPTERS

    caption, patterns = CHAPTERS["04_utilization_traffic"].headlines[0]
    assert patterns == ("traffic_per_node.png",)
    summary = pd.DataFrame([{"strategy": s, "workers": n, "repeat": k, "params": 1000,
                             "bytes_sent_per_step": 4000 * (2 * (n - 1) / n if s == "allreduce"
                                                            else 1.0),
                             "server_bytes_recv_per_step": 4000.0 * n if s == "ps_sync" else 0,
                             "server_bytes_sent_per_step": 4000.0 * n if s == "ps_sync" else 0}
                            for s in STRATEGIES for n in (1, 2, 4) for k in range(2)])
    ch04.traffic(summary, tmp_path)
    meta = json.loads((tmp_path / "traffic_per_node.json").read_text())
    assert "PS server" in meta["caption"] and "ring worker" in meta["caption"]
    assert "PS server" in caption and "ring worker" in caption
    fig = plots.traffic_per_node(pd.read_csv(tmp_path / "traffic_per_node.csv"))
    try:
        labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
        ps = next(ln for ln in fig.axes[0].get_lines() if ln.get_label().startswith("PS"))
    finally:
        plt.close(fig)
    assert any(lb.startswith("PS server") for lb in labels), labels
    assert any(lb.startswith("ring worker") for lb in labels), labels
    assert list(ps.get_ydata()) == pytest.approx([1.0, 2.0, 4.0])


def test_speedup_without_a_one_worker_cell_says_so() -> None:
    """A grid of 3 and 6 workers only (a fair-PS sitting) has no baseline: the figure says so
    instead of failing; a strategy with one keeps its lines."""
    summary = _summary()
    only = summary[summary["workers"] > 1]
    fig = plots.speedup_vs_workers(only, "speed-up")
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert any("no strategy ran a 1-worker cell" in t for t in texts), texts
    keep = summary[(summary["workers"] > 1) | (summary["strategy"] == "allreduce")]
    fig = plots.speedup_vs_workers(keep, "speed-up")
    assert set(fig.ddlstudy_data["strategy"]) == {"allreduce"}


def test_throughput_marks_cpu_bound_and_replay_lagged_runs_apart():
    """Chapter 03's throughput figure shows every run but marks those no verdict reads: a
    cpu_bound run (red x) and a lone replayed worker the host slowed (orange +)."""
    df = _summary().assign(compute_mode="replay", replay_s=0.001, time_dilation=100.0)
    lagged = (df["strategy"] == "allreduce") & (df["workers"] == 1) & (df["repeat"] == 1)
    df.loc[lagged, "compute_s"] = 0.5  # 5x the replayed 0.1 s
    df.loc[lagged, "images_per_sec"] = 10.0  # the lagged run's median with the clean one: 55
    fig = plots.throughput_with_excluded(df, "t")
    labels = {t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().texts}
    assert "CPU-bound (excluded)" in labels and "replay lag > 10% (excluded)" in labels
    # the medians are those of the runs the verdicts read; the figure's data keeps every run
    medians = {line.get_color(): line.get_ydata() for line in fig.axes[0].lines
               if line.get_marker() == "o"}
    assert len(medians) == 2
    assert sorted(round(float(y[0]), 3) for y in medians.values()) == [100.0, 100.5]
    assert sum(np.isnan(y[2]) for y in medians.values()) == 1  # every 4-worker PS run is CPU-bound
    assert fig.ddlstudy_data["excluded"].sum() == lagged.sum() + df["cpu_bound"].sum()
    assert len(fig.ddlstudy_data) == len(df)
    plt.close(fig)
    clean = plots.throughput_with_excluded(df.assign(compute_s=0.1, cpu_bound=False), "t")
    assert not any(ax.get_legend() and any("excluded" in t.get_text()
                                            for t in ax.get_legend().texts) for ax in clean.axes)
    plt.close(clean)
