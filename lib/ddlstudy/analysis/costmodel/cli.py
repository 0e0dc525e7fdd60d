"""`python -m ddlstudy.costmodel validate | validate-collectives | contention | regime-map`.

`contention DIR...` lists each cell's repeats against the host load they ran under
(`contention.py`).

`validate DIR...` prints (1) the emulated cells predicted with constants fitted on one
configuration and held out on the others, per held-out group, (2) the published points predicted
from their testbeds' settings alone, each with its source (the headline counts the multi-node
points: the inter-node tier; the single-node points are summarised apart), (3) the cells with
no fitted constant, and ends with exactly three lines:

    median relative error (held out by configuration): 0.NN
    median relative error (published, N points, S sources): 0.NN
    median relative error (settings alone, no fit): 0.NN
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd

from ddlstudy.analysis.costmodel.cells import RecordsError, _usable, read_cells
from ddlstudy.analysis.costmodel.checks import (
    held_out_by_configuration,
    multi_node,
    predict_published,
    published_summary,
    settings_alone,
)
from ddlstudy.analysis.costmodel.contention import main_contention
from ddlstudy.analysis.costmodel.links import _main_collectives
from ddlstudy.analysis.costmodel.regime import regime_map
from ddlstudy.analysis.costmodel.step import STEP_STRATEGIES
from ddlstudy.strategies.registry import get_strategy

# The step models added for the fair PS and sharded data parallelism (issue 21): said apart in
# validate's output, validated only where emulated cells of them exist.
NEWER_STEP_MODELS = ("ps_overlap_step", "ps_colocated_step", "sharded_step")


def _fmt(x: float) -> str:
    return "nan" if math.isnan(x) else f"{x:.2f}"


def _med(part: pd.DataFrame) -> float:
    """Median |relative error| of a table's rows (NaN when empty)."""
    return float(part["rel_error"].abs().median()) if len(part) else math.nan


def _validate(dirs: list[str]) -> int:
    try:
        cells = read_cells(dirs)
        held, c, what = held_out_by_configuration(cells)
        alone = settings_alone(cells)
    except (RecordsError, OSError, pd.errors.ParserError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    skipped = _usable(cells)[1]
    fit_n = int((held["role"] == "fit").sum())
    print(f"# (a) held out by configuration: constants fitted on the {fit_n} cells of {what} "
          f"(link_factor {c.link_factor:.3f}, host {c.host_s_per_byte * 1e9:.3f} ns/B, "
          f"{c.host_s_per_message * 1e3:.2f} ms per message, overhead {c.overhead_s:.3f} s); "
          f"every other cell predicted; seconds per step on the emulated clock, latency as each "
          f"cell emulated it (none in cells that record none); {len(skipped)} record(s) "
          f"skipped (not modelled or not shaped)")
    show = held.assign(measured_s=held["measured_s"].round(3),
                       predicted_s=held["predicted_s"].round(3),
                       rel_error=held["rel_error"].round(3))
    print(show.to_string(index=False))
    out = held[held["role"] != "fit"]
    for role, part in out.groupby("role"):
        print(f"#   held out: {role}: {len(part)} cells, median relative error "
              f"{part['rel_error'].abs().median():.3f}")
    if out.empty:
        print("#   held out: no cell of another configuration")
    pub = predict_published()
    med_pub, n_pub, s_pub = published_summary(pub)
    print("# (b) published points (testbeds/published.csv), predicted from each point's testbed "
          "compute and links alone (analytic; nothing fitted, no host constants); metric: "
          "images_per_sec (total) or scaling_efficiency; the last line's median counts the "
          "multi-node points (the inter-node tier), the single-node ones are summarised apart")
    for r in pub.itertuples():
        if r.skipped:
            print(f"  {r.point_id}: not predicted ({r.skipped}) [{r.citation}]")
            continue
        print(f"  {r.point_id}: {r.metric} published {r.published:.3g}, predicted "
              f"{r.predicted:.3g} ({r.rel_error:+.2f}) [{r.citation}; {r.settings}]")
    for src, part in pub[pub["predicted"].notna()].groupby("source"):
        print(f"#   {src}: {len(part)} points, median relative error "
              f"{part['rel_error'].abs().median():.3f}")
    done = pub[pub["predicted"].notna()]
    multi = multi_node(done)
    for src, part in done[multi].groupby("source"):
        print(f"#   {src}, multi-node: {len(part)} points, median relative error "
              f"{part['rel_error'].abs().median():.3f} (signed {part['rel_error'].median():+.2f})")
    for path, part in done[multi].groupby("path"):
        print(f"#   multi-node, {path}: {len(part)} points, median relative error "
              f"{part['rel_error'].abs().median():.3f} (signed {part['rel_error'].median():+.2f})")
    for label, part in (("multi-node points (inter-node tier)", done[multi]),
                        ("single-node points (intra-node tier only)", done[~multi])):
        print(f"#   {label}: {len(part)} points, median relative error "
              f"{_fmt(float(part['rel_error'].abs().median()) if len(part) else math.nan)}")
    newer = [s for s in STEP_STRATEGIES if get_strategy(s).step_model in NEWER_STEP_MODELS]
    have = alone[alone["strategy"].isin(newer)]
    held_new = out[out["strategy"].isin(newer)]
    print("# fair PS and sharded strategies (" + ", ".join(newer) + "): " + (
        f"validated on {len(have)} emulated cells, median relative error (settings alone) "
        f"{have['rel_error'].abs().median():.3f}, held out {_fmt(_med(held_new))}; " + ", ".join(
            f"{s} {len(p)} cells {_med(p):.3f} (held out "
            f"{_fmt(_med(held_new[held_new['strategy'] == s]))})"
            for s, p in have.groupby("strategy")) if len(have) else
        "step model not validated: no emulated cell of them in " + ", ".join(dirs)))
    print(f"# (c) settings alone: all {len(alone)} usable cells with every fitted constant at "
          f"zero (link factor 1, no host cost); per strategy: " + ", ".join(
              f"{s} {p['rel_error'].abs().median():.3f}" for s, p in alone.groupby("strategy")))
    print(f"median relative error (held out by configuration): "
          f"{_fmt(float(out['rel_error'].abs().median()) if len(out) else math.nan)}")
    print(f"median relative error (published, {n_pub} points, {s_pub} sources): "
          f"{_fmt(med_pub)}")
    print(f"median relative error (settings alone, no fit): "
          f"{_fmt(float(alone['rel_error'].abs().median()))}")
    return 0


def _regime(args: argparse.Namespace) -> int:
    from ddlstudy.analysis import plots

    cells = None
    if args.reference and Path(args.reference).exists():
        try:
            cells = read_cells([args.reference])
        except RecordsError as err:
            print(f"warning: no measured markers: {err}", file=sys.stderr)
    rm = regime_map(args.model, workers=args.workers, latency_s=args.latency_us * 1e-6,
                    shape=args.shape, cells=cells)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    csv = out / f"regime_map_{args.model}.csv"
    rm.table().to_csv(csv, index=False)
    fig = plots.regime_map(rm.grid, rm.points, rm.words, workers=rm.workers,
                           title=f"{args.model}: analytic regime map ({rm.workers} workers, "
                                 f"1 GPU per node, {args.latency_us:g} us latency)")
    png = plots.save(fig, out, f"regime_map_{args.model}")
    print(f"wrote {png} and {csv}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m ddlstudy.costmodel validate DIR...`: the step model against measured cells and
    published points; `regime-map --model M --out DIR`: the analytic regime map."""
    parser = argparse.ArgumentParser(prog="python -m ddlstudy.costmodel",
                                     description="Validate the step-time model on measured "
                                     "summary.csv records and published points; draw the "
                                     "regime map.")
    sub = parser.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("validate", help="held out by configuration, published points, "
                       "settings alone: three median relative errors")
    v.add_argument("dirs", nargs="+", help="run folders, searched recursively for summary.csv")
    vc = sub.add_parser("validate-collectives", help="all-reduce alone on shaped links: "
                        "measured vs alpha-beta at the link's emulated rate, per point")
    vc.add_argument("dirs", nargs="+", help="folders searched for collectives_emulated.csv")
    ct = sub.add_parser("contention", help="each cell's repeats against the host load they "
                        "ran under: slope, correlation, step at a given load, finish spread")
    ct.add_argument("dirs", nargs="+", help="folders searched for run folders (summary.csv, "
                    "meta.json, steps.csv)")
    ct.add_argument("--at-load", type=float, default=None,
                    help="also read each cell's least-squares line at this 1-minute load "
                    "(extrapolated where no repeat ran near it)")
    rg = sub.add_parser("regime-map", help="ring efficiency and best PS / ring over compute "
                        "time x inter-node bandwidth (analytic), with testbeds and cells")
    rg.add_argument("--model", required=True)
    rg.add_argument("--out", required=True, help="folder for the figure and its CSV")
    rg.add_argument("--workers", type=int, default=6)
    rg.add_argument("--latency-us", type=float, default=10.0)
    rg.add_argument("--shape", default="cifar", help="gradient sizes of this input shape")
    rg.add_argument("--reference", default="results/reference",
                    help="measured cells drawn as markers (skipped if absent)")
    args = parser.parse_args(argv)
    if args.cmd == "validate-collectives":
        return _main_collectives(args.dirs)
    if args.cmd == "regime-map":
        return _regime(args)
    if args.cmd == "contention":
        return main_contention(args.dirs, args.at_load)
    return _validate(args.dirs)
