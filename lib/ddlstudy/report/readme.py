"""The README's numbers, generated from the committed reference records (never typed by hand).

`python -m ddlstudy.report.readme` rewrites the blocks between `<!-- generated:NAME -->` and
`<!-- end:NAME -->` in README.md and docs/results.md (the answer, the reference table, the
verdicts, every decided row, the testbed cells measured and missing, the chapter table) and
redraws the README's figure; `--check` exits 1 when the pages and the records disagree
(tests/test_readme.py checks the same). Each block says where its numbers come from.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd

from ddlstudy.analysis.inference import MIN_RUNS
from ddlstudy.analysis.units import label_arms
from ddlstudy.chapters.registry import chapter_rows
from ddlstudy.claims.base import usable
from ddlstudy.records.reference import code_version
from ddlstudy.records.store import project_root
from ddlstudy.registry import markdown_table
from ddlstudy.report import coverage

EMULATED_03 = "03_ps_vs_ring-emulated-"
FIGURE = Path("docs/figures/reference-ps-vs-ring.png")
_BLOCK = re.compile(
    r"(<!-- generated:(?P<name>[a-z_]+) -->\n)(?P<body>.*?)(<!-- end:(?P=name) -->)", re.S)


def emulated_runs(ref: Path) -> pd.DataFrame:
    """Every usable run (`claims.base.usable`: no error, not cpu_bound, no replay lag) of
    chapter 03's emulated cells in the reference (one row per run)."""
    frames = [pd.read_csv(p / "summary.csv") for p in sorted(ref.glob(f"{EMULATED_03}*"))
              if (p / "summary.csv").exists()]
    if not frames:
        raise FileNotFoundError(f"no {EMULATED_03}*/summary.csv under {ref}: run `make reference`")
    df = pd.concat(frames, ignore_index=True)
    return label_arms(usable(df))


def reference_cells(ref: Path, runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Chapter 03's emulated cells in the reference (or `runs`, `emulated_runs` already read):
    one row per (model, strategy, workers) with the median images/sec and the number of runs."""
    runs = emulated_runs(ref) if runs is None else runs
    return (runs.groupby(["model", "strategy", "workers", "network"], as_index=False)
                .agg(images_per_sec=("images_per_sec_cluster", "median"),
                     runs=("images_per_sec_cluster", "size")))


def _device(source: str) -> str:
    """The device a replay table was measured on (its `device_name`), else the table's name."""
    from ddlstudy.workload.replay import load_table

    try:
        names = load_table(source).get("device_name", pd.Series(dtype=str)).dropna().unique()
    except (ValueError, OSError):
        names = []
    return names[0] if len(names) == 1 else f"replay table {source}"


def regime(runs: pd.DataFrame) -> str:
    """The regime the runs were measured in, from their own records: links and their scale,
    whose compute was replayed, GPUs per node, and the latency emulated."""
    def values(col: str) -> list[Any]:
        return sorted(runs[col].dropna().unique().tolist()) if col in runs else []

    nets = ", ".join(map(str, values("network"))) or "?"
    scales = "/".join(f"{x:g}" for x in values("network_scale")) or "?"
    modes = values("compute_mode")
    compute = (", ".join(f"the compute of {_device(str(s))} replayed (replay source {s})"
                         for s in values("replay_source")) if modes == ["replay"]
               else "compute run on this host")
    gpus = values("gpus_per_node") or [1]
    per_node = ("one GPU per node" if gpus == [1] else
                f"{'/'.join(map(str, gpus))} GPUs per node")
    lat = [x for x in values("latency_emulated_s") if x > 0]
    latency = ("no latency added" if not lat else
               f"{lat[0] * 1e6:.0f} us per message emulated in the transport (at the scale)")
    return f"emulated {nets}-like links (rate scaled x{scales}, {compute}, {per_node}, {latency})"


TESTBED_03 = "03_ps_vs_ring-testbed-"


def inputs(runs: pd.DataFrame) -> str:
    """Input shape, data and per-worker batch as the runs recorded them, a model whose batch
    differs from the most common one named with its own ('synthetic 3x224x224 (imagenet),
    batch 32 per worker (alexnet: 512)')."""
    from ddlstudy.workload.catalog import SHAPES

    shapes = []
    for name in sorted(runs["shape"].dropna().astype(str).unique()) if "shape" in runs else []:
        dims = "x".join(map(str, SHAPES[name].dims)) if name in SHAPES else "?"
        shapes.append(f"{dims} ({name})")
    data = "/".join(sorted(runs["dataset"].dropna().astype(str).unique())) if (
        "dataset" in runs) else ""
    batch = runs.groupby("model")["batch_size"].agg(lambda b: int(b.mode().iloc[0]))
    common = int(batch.mode().iloc[0])
    odd = ", ".join(f"{m}: {b}" for m, b in batch.items() if b != common)
    return (f"{data} {', '.join(shapes) or '? shape'}, batch {common} per worker"
            + (f" ({odd})" if odd else "")).strip()


def testbed_answer(ref: Path, name: str = "shi2019") -> str:
    """The same comparison on a paper's own testbed (chapter 03's `03_ps_vs_ring-testbed-<name>-*`
    cells): the one-server PS's images/sec at 6 workers over at 3, the ring's scaling efficiency
    at its top worker count, and ring / PS at the top count both ran, from the medians over each
    cell's runs ('' when the reference holds no such cells)."""
    from ddlstudy.claims import emulated_testbed_label
    from ddlstudy.testbeds import catalog

    frames = [pd.read_csv(p / "summary.csv") for p in sorted(ref.glob(f"{TESTBED_03}{name}-*"))
              if (p / "summary.csv").exists()]
    if not frames:
        return ""
    df = pd.concat(frames, ignore_index=True)
    df = label_arms(usable(df))
    cells = (df.groupby(["model", "strategy", "workers"])["images_per_sec_cluster"]
               .agg(["median", "size"]))
    med = cells["median"]
    levels, eff, ring_ps = [], [], []
    for model in sorted(df["model"].unique()):
        ps = med.get((model, "ps_sync"))
        ring = med.get((model, "allreduce"))
        if ps is not None and {3, 6} <= set(ps.index):
            levels.append(ps[6] / ps[3])
        if ring is not None and 1 in ring.index and ring.index.max() > 1:
            top = int(ring.index.max())
            eff.append((ring[top] / (top * ring[1]), top))
        if ps is not None and ring is not None and 6 in ps.index and 6 in ring.index:
            ring_ps.append(ring[6] / ps[6])
    scale = _range(df["network_scale"].dropna(), ".2g") if "network_scale" in df else "?"
    lat = ""
    if ({"latency_emulated_s", "network_scale"} <= set(df)
            and df["latency_emulated_s"].notna().any()):
        dilated = float(df["latency_emulated_s"].median())
        lat = (f", {dilated * float(df['network_scale'].median()) * 1e6:.0f} us one-way latency "
               f"({dilated * 1e6:.0f} us at the scale) emulated in the transport")
    parts = []
    if levels:
        parts.append(f"the one-server PS's images/sec at 6 workers was "
                     f"{min(levels):.2f}-{max(levels):.2f}x that at 3 ({len(levels)} models)")
    if eff:
        tops = sorted({t for _, t in eff})
        parts.append(f"the ring reached {min(e for e, _ in eff):.2f}-{max(e for e, _ in eff):.2f}"
                     f" of {'/'.join(map(str, tops))} x one worker ({len(eff)} models)")
    if ring_ps:
        parts.append(f"at 6 workers the ring delivered {min(ring_ps):.1f}-{max(ring_ps):.1f}x "
                     f"the PS ({len(ring_ps)} models)")
    if not parts:
        return ""
    runs = _range(cells["size"], ".0f")
    return (f"On {catalog.testbed(name).paper}'s own testbed ({emulated_testbed_label(name)}, "
            f"links scaled x{scale}{lat}; {inputs(df)}), "
            + "; ".join(parts) + f" (medians of {runs} independent runs per cell, "
            f"`results/reference/{TESTBED_03}{name}-*`). ")


def provenance(ref: Path) -> str:
    """When, where and by which code the reference cells' runs were measured (every run's own
    meta.json: a cell can hold runs of several sittings)."""
    metas = [json.loads(p.read_text())
             for p in sorted(ref.glob(f"{EMULATED_03}*/runs/**/meta.json"))]
    versions = [(m, *code_version(m)) for m in metas if m.get("status", "ok") == "ok"]
    metas = [m for m, _, committed in versions if committed]  # else: not reference material
    left_out = len(versions) - len(metas)
    days = sorted({m["created"][:10] for m in metas})
    shas = sorted({sha[:7] for _, sha, committed in versions if committed})
    hosts = sorted({f"{m['host']['hostname']} ({m['host']['cpu_count']} cores)" for m in metas})
    loads = [m["host"]["load_avg"][0] for m in metas if m.get("host", {}).get("load_avg")]
    load = (f", 1-min load {min(loads):.1f}-{max(loads):.1f} on {len(loads)} of {len(metas)} "
            "runs" if loads else "")
    gone = (f"; {left_out} runs of uncommitted code left out (not reference material)"
            if left_out else "")
    return (f"`results/reference`, {len(metas)} runs measured {', '.join(days)} on "
            f"{', '.join(hosts)}{load}, code {', '.join(shas)}{gone}")


def _range(values: pd.Series, fmt: str = ".0f") -> str:
    lo, hi = float(values.min()), float(values.max())
    return f"{lo:{fmt}}" if f"{lo:{fmt}}" == f"{hi:{fmt}}" else f"{lo:{fmt}}-{hi:{fmt}}"


def ratio_table(cells: pd.DataFrame) -> pd.DataFrame:
    """Per model: PS images/sec across worker counts, ring at its smallest and largest
    multi-worker count, and ring / PS at the largest count both strategies ran."""
    rows = []
    for model, m in cells.groupby("model", sort=True):
        ps = m[m["strategy"] == "ps_sync"].set_index("workers")["images_per_sec"]
        ring = m[(m["strategy"] == "allreduce") & (m["workers"] > 1)].set_index("workers")[
            "images_per_sec"]
        if ps.empty or ring.empty:
            continue
        top = max(set(ps.index) & set(ring.index))
        rows.append({"model": model, "PS img/s (1-6 workers)": _range(ps),
                     "ring img/s": f"{ring.iloc[0]:.0f} -> {ring.iloc[-1]:.0f} "
                                   f"({ring.index[0]} -> {ring.index[-1]} workers)",
                     f"ring / PS at {top}": f"{ring[top] / ps[top]:.1f}",
                     "runs per cell": _range(m["runs"], ".0f")})
    return pd.DataFrame(rows)


def answer(ref: Path) -> str:
    """The study's answer in one paragraph, every number computed from the reference cells."""
    runs = emulated_runs(ref)
    cells = reference_cells(ref, runs)
    table = ratio_table(cells)
    setting = regime(runs)
    ratio_col = next(c for c in table.columns if c.startswith("ring / PS"))
    ratios = table[ratio_col].astype(float)
    spread, growth = [], []
    for _, m in cells.groupby("model"):
        ps = m[m["strategy"] == "ps_sync"]["images_per_sec"]
        ring = m[(m["strategy"] == "allreduce") & (m["workers"] > 1)].sort_values("workers")
        spread.append(ps.max() / ps.min() - 1)
        growth.append((ring["images_per_sec"].iloc[-1] / ring["images_per_sec"].iloc[0],
                       int(ring["workers"].iloc[0]), int(ring["workers"].iloc[-1])))
    lo_runs, hi_runs = int(cells["runs"].min()), int(cells["runs"].max())
    lo_w, hi_w = growth[0][1], growth[0][2]
    ps_w = cells[cells["strategy"] == "ps_sync"]["workers"]
    g = [x[0] for x in growth]
    return (
        f"On {setting}, the one-server parameter server's images/sec moved by "
        f"at most {max(spread):.0%} between {ps_w.min()} and {ps_w.max()} workers for each of "
        f"{len(table)} models, "
        f"while ring all-reduce grew {min(g):.2f}-{max(g):.2f}x from {lo_w} to {hi_w} workers "
        f"(ideal: {hi_w / lo_w:.1f}x); at {ratio_col.split()[-1]} workers the ring delivered "
        f"{ratios.min():.1f}-{ratios.max():.1f}x the parameter server's images/sec. "
        + (f"Cells hold {lo_runs}-{hi_runs} independent runs (medians above); chapter 99 "
           f"decides a claim only from >= {MIN_RUNS}. " if lo_runs != hi_runs else
           f"Each cell holds {lo_runs} independent run{'s' if lo_runs > 1 else ''}. ")
        + f"Source: {provenance(ref)}. "
        + testbed_answer(ref)
        + fair_ps_answer(ref)
        + decided(ref)).rstrip()


FAIR_PS = ("shi2019", "resnet50")  # the testbed and model the fair PS arms ran on


def _fair_ps_runs(ref: Path) -> tuple[pd.DataFrame, Path] | None:
    """The fair-PS testbed folder's usable runs, arms labelled, and the folder; None if absent."""
    name, model = FAIR_PS
    folder = ref / f"{TESTBED_03}{name}-{model}"
    if not (folder / "summary.csv").exists():
        return None
    return label_arms(usable(pd.read_csv(folder / "summary.csv"))), folder


def fair_ps_answer(ref: Path) -> str:
    """One sentence for the answer: the ring over the best PS design and over the thesis's PS
    at the fair-PS cells' top worker count ('' without those cells)."""
    from ddlstudy.analysis import units
    from ddlstudy.chapters.ch03_ps_vs_ring import THESIS_PS, THESIS_RING, best_vs_best

    found = _fair_ps_runs(ref)
    if found is None:
        return ""
    df, folder = found
    b = best_vs_best(df, folder / "runs")
    if b is None:
        return ""
    med = df[df["workers"] == b.workers].groupby("strategy")["images_per_sec_cluster"].median()
    naive = (f"; the thesis's PS delivered {med[THESIS_PS] / med[THESIS_RING]:.2f}x the ring's"
             if {THESIS_PS, THESIS_RING} <= set(med.index) else "")
    e = b.est
    where = ("holds 1: these runs do not tell the two apart" if e.low <= 1 <= e.high else
             "lies wholly above 1" if e.low > 1 else "lies wholly below 1")
    return (f"With the parameter servers users would deploy today on the same testbed "
            f"({FAIR_PS[1]}, {b.workers} workers), the ring delivered {e.value:.2f}x the "
            f"images/sec of the best of them ({b.best_ps}; run: {', '.join(b.pss)}; "
            f"{e.coverage:.0%} interval [{e.low:.2f}, {e.high:.2f}] over {e.n} "
            f"{'independent runs' if b.unit == units.REPEATS else 'timed chunks'}, which "
            f"{where}){naive} (`results/reference/{folder.name}`). ")


def fair_ps(ref: Path) -> str:
    """Every PS design and all-reduce arm on the fair-PS testbed folder, per worker count > 1:
    median cluster-equivalent images/sec, its range and runs, and / the ring's median; then
    chapter 03's best-vs-best sentence with its interval. One line when no such folder exists."""
    from ddlstudy.chapters.ch03_ps_vs_ring import THESIS_RING, _best_vs_best

    found = _fair_ps_runs(ref)
    if found is None:
        return f"No `{TESTBED_03}{'-'.join(FAIR_PS)}` cells in this reference yet.\n"
    df, folder = found
    clean = df[df["workers"] > 1]
    cells = (clean.groupby(["workers", "strategy"])["images_per_sec_cluster"]
             .agg(["median", "min", "max", "size"]).reset_index())
    ring = cells[cells["strategy"] == THESIS_RING].set_index("workers")["median"]
    rows = [{"workers": int(c.workers), "arm": c.strategy,
             "cluster img/s (median)": f"{c.median:.0f}",
             "range": f"{c.min:.0f}-{c.max:.0f}", "runs": int(c.size),
             "/ ring": f"{c.median / ring[c.workers]:.2f}" if c.workers in ring else ""}
            for c in cells.sort_values(["workers", "median"]).itertuples()]
    best = _best_vs_best(df, folder / "runs")
    return (markdown_table(rows) + f"\n`results/reference/{folder.name}` (usable runs: no "
            "error, not cpu_bound, no replay lag). " + " ".join(best) + "\n")


_PASS: dict[Path, pd.DataFrame] | None = None  # claims tables of the pass in progress


@contextmanager
def _one_pass() -> Iterator[None]:
    """Within it, chapter 99's claims table (~2 s) is computed once per records folder for all
    the blocks and pages that read it; outside it, every call reads the records afresh (a caller
    that edits them in place between renders sees its edits)."""
    global _PASS
    outer = _PASS is None
    if outer:
        _PASS = {}
    try:
        yield
    finally:
        if outer:
            _PASS = None


def _claims_table(ref: Path) -> pd.DataFrame:
    """Chapter 99's claims table over `ref`, once per `_one_pass`."""
    from ddlstudy.claims.engine import claims_table

    if _PASS is None:
        return claims_table(ref)
    key = Path(ref).resolve()
    if key not in _PASS:
        _PASS[key] = claims_table(ref)
    return _PASS[key]


def _decided_rows(ref: Path) -> pd.DataFrame:
    """The rows of chapter 99's claims table that draw a verdict (agrees / differs)."""
    from ddlstudy.claims.engine import DECIDED

    table = _claims_table(ref)
    return table[table["verdict"].isin(DECIDED)]


def decided(ref: Path) -> str:
    """One clause per claim chapter 99 decides on the reference records: how many of its rows
    agree or differ, and how many of those stand for the paper's own testbed and for today's
    ('' when none is decided). The rows themselves, each with its number, interval and
    margins, are `decided_rows`' table (docs/results.md)."""
    from ddlstudy.claims import REPRODUCTION, UPDATE

    rows = _decided_rows(ref)
    if rows.empty:
        return ""
    where_of = {REPRODUCTION: "the paper's own testbed", UPDATE: "today's"}
    parts = []
    for (paper, claim), part in rows.groupby(["paper", "claim"], sort=False):
        clauses = []
        for verdict, group in part.groupby("verdict", sort=False):
            n = len(group)
            cols = group["column"].fillna("").astype(str)
            where = [f"{int((cols == c).sum())} on {w}" for c, w in where_of.items()
                     if (cols == c).any()]
            clauses.append(f"{verdict} on {n} row{'s' if n > 1 else ''}"
                           + (f" ({', '.join(where)})" if where else ""))
        parts.append(f"{paper}'s \"{claim}\" {', '.join(clauses)}")
    return (f"Chapter 99 decides {len(rows)} rows on all of `results/reference` (each row's "
            "number, interval, margins and testbed: docs/results.md): " + "; ".join(parts)
            + ".")


def decided_rows(ref: Path) -> str:
    """Every decided row as a table: the claim, the row's own subject, its value with its
    interval (or 'exact in all N runs'), the margins fixed before the run, runs, testbed and
    verdict."""
    rows = _decided_rows(ref)
    if rows.empty:
        return "No claim is decided on these records.\n"

    def value(r: Any) -> str:  # an exact result (the same in every run) has no interval
        if r.method == "exact":
            return f"{r.value:.3g}, exact in all {int(r.runs)} runs"
        return f"{r.value:.3g} [{r.ci_low:.3g}, {r.ci_high:.3g}]"

    def subject(r: Any) -> str:  # the row's own part of the quantity: "[alexnet: ...]"
        own = str(r.quantity).split(" [", 1)
        return own[1].rstrip("]") if len(own) == 2 else ""

    out = [{"paper": r.paper, "claim": r.claim, "row": subject(r), "value [interval]": value(r),
            "margins": f"[{r.margin_low:.3g}, {r.margin_high:.3g}]", "runs": int(r.runs),
            "testbed": r.testbed, "verdict": r.verdict} for r in rows.itertuples()]
    return (markdown_table(out) + "\nEach row's quantity and reason: `python -m "
            "ddlstudy.conclusions table results/reference`.\n")


def verdicts(ref: Path) -> str:
    """Per paper: claims found, tested, agreed, differed, undecided and why (chapter 99's
    engine over the reference records)."""
    from ddlstudy.claims.engine import paper_counts

    counts = paper_counts(_claims_table(ref))
    rows = [{k: (int(v) if isinstance(v, int | float) and not isinstance(v, bool) else v)
             for k, v in r.items()} for r in counts.to_dict("records")]
    return (markdown_table(rows) + "\nFrom `python -m ddlstudy.conclusions table "
            "results/reference` (chapter 99's engine over the committed reference records).\n")


def figure(ref: Path, root: Path) -> Path:
    """Images/sec vs workers, PS vs ring, one panel per model, from the reference cells."""
    from ddlstudy.analysis import plots

    runs = emulated_runs(ref)
    cells = reference_cells(ref, runs).rename(
        columns={"images_per_sec": "images_per_sec_cluster"})
    fig = plots.throughput_vs_workers(
        cells.assign(images_per_sec=cells["images_per_sec_cluster"]),
        title=f"PS vs ring all-reduce (results/reference): {regime(runs)}")
    out = root / FIGURE
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90, bbox_inches="tight")
    return out


BLOCKS: dict[str, Callable[[Path], str]] = {
    "answer": lambda ref: answer(ref) + "\n",
    "reference": lambda ref: markdown_table(ratio_table(reference_cells(ref)).to_dict("records"))
    + f"\n{provenance(ref)}; images/sec are cluster-equivalent (x the time dilation).\n",
    "verdicts": verdicts,
    "decided_rows": decided_rows,
    "coverage": coverage.block,
    "fair_ps": fair_ps,
    "chapters": lambda ref: markdown_table(chapter_rows()),
}


def render(text: str, ref: Path, only: Sequence[str] = ()) -> str:
    """README text with every generated block recomputed from `ref`."""
    def fill(m: re.Match[str]) -> str:
        name = m.group("name")
        if name not in BLOCKS or (only and name not in only):
            return m.group(0)
        return m.group(1) + BLOCKS[name](ref) + m.group(4)

    with _one_pass():
        return _BLOCK.sub(fill, text)


PAGES = ("README.md", "docs/results.md")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ddlstudy.report.readme",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when README.md / docs/results.md differ from the records")
    parser.add_argument("--reference", default="results/reference")
    parser.add_argument("--no-figure", action="store_true")
    args = parser.parse_args(argv)
    root = project_root()
    ref = root / args.reference
    stale = []
    with _one_pass():
        for page in PAGES:
            path = root / page
            try:
                new = render(path.read_text(), ref)
            except FileNotFoundError as err:
                print(f"error: {err}", file=sys.stderr)
                return 2
            if new != path.read_text():
                stale.append(page)
                if not args.check:
                    path.write_text(new)
    if args.check:
        if stale:
            print(f"{', '.join(stale)} out of date with {args.reference}: run "
                  "`python -m ddlstudy.report.readme`", file=sys.stderr)
            return 1
        return 0
    if not args.no_figure:
        print(f"wrote {figure(ref, root).relative_to(root)}")
    print(f"regenerated from {args.reference}: {', '.join(stale) or 'nothing changed'}")
    return 0


if __name__ == "__main__":
    from ddlstudy.host import entry
    raise SystemExit(entry.run(main))
