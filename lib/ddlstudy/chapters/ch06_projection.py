"""Chapter 06 (projection): validate the step-time model on the measured cells, then carry it to
the papers' scales (Shi 2019's grid, Wang (NCHC)'s 8-64 GPUs, Malik 2018's 512 and beyond) and
the what-ifs; every table, figure and sentence the notebook shows comes from here.

The model itself is `ddlstudy.analysis.costmodel`; the sliders are `ddlstudy.chapters.explore`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from IPython.display import Markdown
from matplotlib.figure import Figure

from ddlstudy.analysis import costmodel, plots
from ddlstudy.chapters import explore
from ddlstudy.records import store as records

NAME = "06_projection"


@dataclass
class Projection:
    """What the chapter's cells share: params, the `projection` section with the notebook's
    overrides, the folder, the validation and its constants, and the projected tables."""

    P: Any
    J: Any
    out: Path
    dirs: list[Path]
    V: Any
    C: costmodel.Constants
    what: dict[str, Any]
    shi: pd.DataFrame = field(default_factory=pd.DataFrame)
    wang: pd.DataFrame = field(default_factory=pd.DataFrame)
    malik: pd.DataFrame = field(default_factory=pd.DataFrame)

    @property
    def label(self) -> str:
        return self.V.label


def setup(P: Any, run_dir: str | Path | None, **overrides: Any) -> Projection:
    """The `projection` section with the notebook's non-None overrides, the measured folders
    (`projection.records`, plus this run's own) and the constants fitted on them."""
    J = P.projection.model_validate({**P.projection.model_dump(),
                                     **{k: v for k, v in overrides.items() if v is not None}})
    out = records.chapter_dir(run_dir, NAME, P.model_dump(mode="json"),
                              notebook=J.model_dump(mode="json"))
    root = records.project_root()
    dirs = [Path(d) if Path(d).is_absolute() else root / d for d in J.records]
    if run_dir:
        dirs.append(Path(run_dir))
    V = costmodel.with_published(costmodel.validation_for(dirs))
    what = dict(replay_source=J.replay_source, compute_scale=J.compute_scale,
                latency_s=J.latency_s, algorithm=J.algorithm)
    return Projection(P, J, out, dirs, V, V.cluster_constants(), what)


def describe(S: Projection) -> str:
    """The validation label, the folders read and the fitted constants, one line each."""
    C = S.C
    return "\n".join([
        S.label,
        "validated on: " + (", ".join(str(d) for d in S.dirs if d.exists())
                            or "nothing (no folder)"),
        extrapolation(S),
        f"constants (cluster-equivalent): link_factor {C.link_factor:.3f}, "
        f"host {C.host_s_per_byte * 1e12:.3f} ps/B, {C.host_s_per_message * 1e6:.1f} us per "
        f"message, overhead {C.overhead_s * 1e3:.2f} ms"])


def extrapolation(S: Projection) -> str:
    """How far the projections reach beyond what validated the model: the emulated cells'
    worker range and the published multi-node points' GPU count, against the largest projected
    count."""
    V, J = S.V, S.J
    top = max([*J.workers, *J.scaling_workers])
    cells = (f"emulated cells of {int(V.table['workers'].min())}-{int(V.table['workers'].max())} "
             f"workers" if V.n_cells else "no emulated cell")
    pub = (f"published multi-node points up to {V.published_max_gpus} GPUs "
           f"({V.published_error:.0%} median error on {V.published_points} points from "
           f"{V.published_sources} sources)" if V.published_points else "no published point")
    return (f"validated range: {cells}; {pub}. Projections reach {top} workers: beyond those "
            f"counts they extrapolate.")


def validation(S: Projection) -> pd.DataFrame | Markdown:
    """validation.csv and model_vs_measured.png when there are measured cells; else a note
    that the curves use the analytic model alone."""
    V = S.V
    if not V.n_cells:
        return Markdown(f"No measured cell to validate on ({V.note}): the curves below use the "
                        "analytic model alone (link factor 1, no host overhead) and say so.")
    records.write_table(V.table, S.out, "validation")
    fig = plots.model_vs_measured(V.table, f"Step-time model vs {len(V.table)} measured cells: "
                                  f"{V.median_error:.1%} median error on {V.n_cells} held out")
    plots.save(fig, S.out, "model_vs_measured")
    return V.table.drop(columns=["source"]).round(3)


def _measured(S: Projection, rename: dict[str, str]) -> pd.DataFrame:
    """The validation table's cells with the projection's column names (empty if none)."""
    return S.V.table.rename(columns=rename) if S.V.n_cells else pd.DataFrame()


def shi_grid(S: Projection) -> pd.DataFrame:
    """Shi 2019's grid (projection_shi.csv, shi_grid.png); the speedup at the most workers."""
    J = S.J
    S.shi = shi = costmodel.project(J.models, ["ps_sync", "allreduce"], J.workers, [J.profile],
                                    S.C, shape=J.shape, batch_size=J.batch_size, servers=[1],
                                    bucket_mb=[S.P.training.bucket_mb], **S.what)
    records.write_table(shi, S.out, "projection_shi")
    measured = _measured(S, {"network": "profile", "images_per_sec_cluster": "images_per_sec"})
    if len(measured):
        measured = measured[(measured["profile"] == J.profile) & (measured["shape"] == J.shape)
                            & (measured["batch_size"] == J.batch_size)
                            & (measured["replay_source"] == J.replay_source)
                            & measured["strategy"].isin(["ps_sync", "allreduce"])
                            & (J.compute_scale == 1)]
    fig = shi_figure(shi, measured, f"Shi 2019's grid, {S.label}: {J.profile} links, compute "
                                    f"from {J.replay_source}, batch {J.batch_size}")
    plots.save(fig, S.out, "shi_grid")
    return shi[shi["workers"] == max(J.workers)].pivot_table(index="model", columns="strategy",
                                                             values="speedup")


def wang(S: Projection) -> pd.DataFrame:
    """Wang (NCHC)'s ResNet-50 per profile (scaling_efficiency.csv, efficiency_by_profile.png)
    beside the emulated cells' scale; the efficiency at 8-64 workers."""
    J, kw = S.J, dict(bucket_mb=[S.P.training.bucket_mb], **S.what)
    S.wang = wang = costmodel.project([J.scaling_model], ["allreduce"], J.scaling_workers,
                                      J.profiles, S.C, shape=J.scaling_shape,
                                      batch_size=J.scaling_batch_size, **kw)
    eff = wang.assign(validation_error=S.V.median_error, n_cells=S.V.n_cells, label=S.label,
                      shape=J.scaling_shape, batch_size=J.scaling_batch_size, **S.what)
    records.write_table(eff[["profile", "workers", "efficiency", "source", "validation_error",
                             "n_cells", "model", "strategy", "shape", "batch_size", "step_s",
                             "images_per_sec", "replay_source", "compute_scale", "label"]],
                        S.out, "scaling_efficiency")
    small = costmodel.project([J.scaling_model], ["allreduce"], J.workers, J.profiles, S.C,
                              shape=J.shape, batch_size=J.batch_size, **kw)
    cells = emulated_efficiency(S.V.table if S.V.n_cells else pd.DataFrame(), J.scaling_model,
                                J.shape, J.batch_size, J.replay_source)
    fig = efficiency_figure(wang.assign(panel=f"{J.scaling_shape}, batch "
                                              f"{J.scaling_batch_size}: projected"),
                            small, cells, f"{J.shape}, batch {J.batch_size}",
                            f"{J.scaling_model} ring all-reduce, scaling efficiency per link "
                            f"profile. Left: {S.label}")
    plots.save(fig, S.out, "efficiency_by_profile")
    return wang[wang["workers"].isin([8, 16, 32, 64])].pivot_table(
        index="workers", columns="profile", values="efficiency").round(3)


RING_ALONE = ("the ring at 1 worker is left out: it sends nothing, so its point, compute "
              "alone, would dwarf the rest")


def shi_figure(shi: pd.DataFrame, measured: pd.DataFrame, title: str) -> Figure:
    """Shi 2019's grid as projected lines and measured dots per model, without the ring's
    1-worker point (no communication: several times every other point; the caption says so)."""
    def alone(df: pd.DataFrame) -> pd.Series:
        return (df["strategy"] == "allreduce") & (df["workers"] == 1)

    shown = shi[~alone(shi)]
    dots = measured[~alone(measured)] if len(measured) else measured
    return plots.projected_curves(shown, dots, "images_per_sec", "strategy", col="model",
                                  ylabel="cluster-equivalent images / sec",
                                  title=f"{title} ({RING_ALONE})")


def emulated_efficiency(table: pd.DataFrame, model: str, shape: str, batch_size: int,
                        replay_source: str) -> pd.DataFrame:
    """The validation table's ring cells of `model` at this shape and batch, per profile and
    worker count: measured efficiency (the profile's 1-worker measured step over this one) and
    the model's (its prediction of the same two cells: one baseline for dots and line), with
    the step-time error on each cell. Empty without such cells."""
    cols = ["profile", "workers", "measured_s", "predicted_s", "abs_error", "cells",
            "efficiency", "model_efficiency"]
    if table.empty:
        return pd.DataFrame(columns=cols)
    pts = table.rename(columns={"network": "profile"})
    pts = pts[(pts["model"] == model) & (pts["strategy"] == "allreduce") & (pts["shape"] == shape)
              & (pts["batch_size"] == batch_size) & (pts["replay_source"] == replay_source)]
    cells = pts.assign(abs_error=pts["rel_error"].abs()).groupby(
        ["profile", "workers"], as_index=False).agg(
        measured_s=("measured_s", "median"), predicted_s=("predicted_s", "median"),
        abs_error=("abs_error", "median"), cells=("measured_s", "size"))
    base = cells[cells["workers"] == 1].set_index("profile")
    cells = cells[cells["profile"].isin(base.index)].copy()
    cells["efficiency"] = cells["profile"].map(base["measured_s"]) / cells["measured_s"]
    cells["model_efficiency"] = cells["profile"].map(base["predicted_s"]) / cells["predicted_s"]
    return cells[cols].reset_index(drop=True)


def efficiency_figure(wide: pd.DataFrame, small: pd.DataFrame, cells: pd.DataFrame,
                      panel: str, title: str) -> Figure:
    """Left: the projection at the papers' scale (`wide`, its `panel` column naming it).
    Right: the emulated cells measured (dots) against the model's prediction of the same cells
    (line), one baseline, titled with the step-time error on those points; the small-scale
    projection (`small`) instead when no cell was measured."""
    if len(cells):
        err, n = float(cells["abs_error"].median()), int(cells["cells"].sum())
        right = f"{panel}: emulated, {err:.1%} error"
        line = cells.assign(efficiency=cells["model_efficiency"], panel=right)
        both = pd.concat([wide, line[["profile", "workers", "efficiency", "panel"]]])
        return plots.projected_curves(
            both, cells.assign(panel=right), "efficiency", "profile", col="panel", logx=True,
            ylabel="scaling efficiency", line_kind={right: "model, same baseline"},
            title=f"{title}. Right: the emulated cells measured (dots) and the model's "
                  "prediction of the same cells (line), both against the profile's 1-worker "
                  f"cell; median step-time error {err:.1%} on these {n} cells")
    both = pd.concat([wide, small.assign(panel=f"{panel}: projected (no measured cell)")])
    return plots.projected_curves(both, None, "efficiency", "profile", col="panel", logx=True,
                                  ylabel="scaling efficiency", title=title)



def malik(S: Projection) -> pd.DataFrame:
    """Malik 2018's models to the most workers, ring vs PS with S = 1 and S = N
    (projection_scaling.csv, scaling_to_1024.png); the efficiency at 512 workers."""
    J = S.J
    malik = costmodel.project(["alexnet", "googlenet", J.scaling_model], ["allreduce", "ps_sync"],
                              J.scaling_workers, J.profiles, S.C, shape=J.scaling_shape,
                              batch_size=J.scaling_batch_size, servers=[1, 0],
                              bucket_mb=[S.P.training.bucket_mb], **S.what)
    malik["setup"] = [f"{s} ({p})" if s == "allreduce" else f"PS, S={r} ({p})"
                      for s, r, p in zip(malik["strategy"], malik["servers_rule"],
                                         malik["profile"], strict=True)]
    S.malik = malik
    records.write_table(malik, S.out, "projection_scaling")
    fig = plots.projected_curves(malik, None, "images_per_sec", "setup", col="model", logx=True,
                                 ylabel="images / sec (projected)",
                                 title=f"Scaling to {max(J.scaling_workers)} workers, {S.label}")
    for ax in fig.axes:
        ax.set_yscale("log")
    plots.save(fig, S.out, "scaling_to_1024")
    return malik[malik["workers"] == 512].pivot_table(index="setup", columns="model",
                                                      values="efficiency").round(3)


def what_ifs(S: Projection) -> None:
    """Bucket sizes for the ring and server counts for PS (what_ifs.csv, what_ifs.png)."""
    J = S.J
    kw = dict(shape=J.scaling_shape, batch_size=J.scaling_batch_size, **S.what)
    buckets = costmodel.project([J.scaling_model], ["allreduce"], J.scaling_workers, J.profiles,
                                S.C, bucket_mb=J.bucket_mb, **kw)
    buckets["setup"] = [f"{b:g} MiB buckets ({p})" for b, p in
                        zip(buckets["bucket_mb"], buckets["profile"], strict=True)]
    ps = costmodel.project([J.scaling_model], ["ps_sync"], J.scaling_workers, J.profiles, S.C,
                           servers=J.servers, bucket_mb=[S.P.training.bucket_mb], **kw)
    ps["setup"] = [f"S={r} ({p})" for r, p in zip(ps["servers_rule"], ps["profile"],
                                                  strict=True)]
    whatif = pd.concat([buckets.assign(panel="ring: bucket size"),
                        ps.assign(panel="PS: servers")])
    records.write_table(whatif, S.out, "what_ifs")
    fig = plots.projected_curves(whatif, None, "efficiency", "setup", col="panel", logx=True,
                                 ylabel="scaling efficiency",
                                 title=f"{J.scaling_model} what-ifs, {S.label}")
    plots.save(fig, S.out, "what_ifs")


def regime(S: Projection, model: str | None = None, workers: int = 6) -> pd.DataFrame:
    """The regime map (analytic): compute seconds per step vs inter-node bandwidth, with the
    lines where the ring's efficiency at `workers` reaches the papers' words and where the best
    PS matches the ring; every testbed a point, this run's measured ring cells as markers
    (regime_map.csv, regime_map.png). Returns the testbeds and cells plotted."""
    model = model or S.J.scaling_model
    cells = None
    try:
        cells = costmodel.read_cells(S.dirs)
    except (costmodel.RecordsError, FileNotFoundError, ValueError):
        cells = None  # no measured markers: the map is analytic alone, and says so below
    latency = S.J.latency_s if S.J.latency_s is not None else 10e-6
    rm = costmodel.regime_map(model, workers=workers, latency_s=latency, cells=cells)
    records.write_table(rm.table(), S.out, "regime_map")
    fig = plots.regime_map(rm.grid, rm.points, rm.words, workers=rm.workers,
                           title=f"{model}: regime map (analytic; {rm.workers} workers, 1 GPU per "
                                 f"node, {latency * 1e6:g} us latency)")
    plots.save(fig, S.out, "regime_map")
    return rm.points


def _pct(v: float) -> str:
    return f"{v:.0%}"


def text(S: Projection) -> str:
    """The chapter's findings, computed from the validation and the projected tables."""
    J, V, shi, wang, malik = S.J, S.V, S.shi, S.wang, S.malik
    lines = [f"All figures here are {S.label}."]
    if V.n_cells:
        worst = V.table[V.table["role"] == "validate"]["rel_error"].abs().max()
        lines.append(f"On the {V.n_cells} held-out measured cells the model's median relative "
                     f"error is {V.median_error:.1%} (largest {worst:.1%}).")
    top = max(J.workers)
    ring_wins = shi[shi["workers"] == top].pivot_table(index="model", columns="strategy",
                                                       values="images_per_sec")
    if {"allreduce", "ps_sync"} <= set(ring_wins.columns):
        faster = ring_wins[ring_wins["allreduce"] > ring_wins["ps_sync"]].index.tolist()
        lines.append(f"At Shi 2019's {top} workers on {J.profile} the ring is projected faster "
                     f"than one PS for {len(faster)} of {len(ring_wins)} models"
                     + (f" ({', '.join(faster)})." if faster else "."))
    w64 = wang[wang["workers"] == 64].set_index("profile")["efficiency"]
    if {"IB-EDR", "10GbE"} <= set(w64.index):
        lines.append(f"Wang (NCHC)'s ResNet-50 at 64 GPUs: projected {_pct(w64['IB-EDR'])} "
                     f"(IB-EDR) vs {_pct(w64['10GbE'])} (10GbE) scaling efficiency, where they "
                     "measured 89 % vs 65 %. A projection is not a test of their claims: "
                     "chapter 99 judges them on measured records (chapters 05 and 07).")
        if J.replay_source == "gpu" and J.compute_scale == 1:
            lines.append("Compute here is an H100's (the stored table), faster than their "
                         "V100s: less backward to hide the all-reduce behind; and one worker "
                         "per node, no NVLink, so every byte of the ring crosses the network.")
    big = malik[(malik["workers"] == max(J.scaling_workers))]
    best = big.loc[big.groupby("model")["images_per_sec"].idxmax()]
    lines.append(f"At {max(J.scaling_workers)} workers the fastest projected setup per model: "
                 + "; ".join(f"{r.model}: {r.setup} at {_pct(r.efficiency)} efficiency"
                             for r in best.itertuples()) + ".")
    return " ".join(lines)


def sliders(S: Projection) -> Any:
    """The what-if widgets (ddlstudy.chapters.explore), started at this run's params."""
    J = S.J
    return explore.sliders([J.scaling_model, *J.models, "alexnet", "googlenet"], S.C,
                           J.scaling_workers, J.scaling_shape, J.scaling_batch_size, J.algorithm,
                           S.label, start=dict(model=J.scaling_model, profile=J.profiles[-1],
                                               replay_source=J.replay_source,
                                               latency_s=J.latency_s,
                                               servers=max(J.servers[0], 0),
                                               bucket_mb=S.P.training.bucket_mb,
                                               compute_scale=J.compute_scale))
