"""Which testbed cells `results/reference` holds, and which it still lacks (issue 21's grid).

    python -m ddlstudy.report.coverage [results/reference]      # one line per grid cell

A testbed grid is a paper's experiment on that paper's (emulated) testbed: Shi 2019's five models
x 1, 3 and 6 workers x PS / ring, Wang (NCHC)'s ResNet-50 at 1 GPU and at 2, 3 and 4 nodes of 8
GPUs on both links, the fair parameter servers (overlapped S = 1, co-located S = N) and the
links-only what-if. Each cell's usable runs (no error, not cpu_bound: the rows chapter 99 reads)
are counted in `03_ps_vs_ring-testbed-<testbed>-<model>/summary.csv` against the 5 independent
runs a verdict needs, with the params file that measures the cell. The table is generated into
docs/results.md (`python -m ddlstudy.report.readme`), so what is missing is read from the
records, never typed by hand.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ddlstudy.analysis.inference import MIN_RUNS
from ddlstudy.claims.base import usable
from ddlstudy.records.store import project_root
from ddlstudy.registry import markdown_table
from ddlstudy.testbeds import catalog


def _models(testbed: str) -> tuple[str, ...]:
    """The models a testbed has compute rows for: the paper's models it can replay."""
    return tuple(catalog.testbed(testbed).models)



@dataclass(frozen=True)
class Grid:
    """One paper's experiment on one testbed: every (model, strategy, workers) cell of it."""

    paper: str
    testbed: str
    models: tuple[str, ...]
    strategies: tuple[str, ...]
    workers: tuple[int, ...]
    params: str  # the params file (layered on default + reference) that measures it

    def cells(self) -> list[tuple[str, str, int]]:
        return [(m, s, n) for m in self.models for s in self.strategies for n in self.workers]


GRIDS = (
    Grid("Shi 2019", "shi2019", _models("shi2019"), ("ps_sync", "allreduce"), (1, 3, 6),
         "params/reference-shi-ps-models.yaml / -ring-models.yaml, one model a last layer"),
    Grid("Shi 2019 (fair PS, S = 1 overlapped; S = N co-located)", "shi2019", ("resnet50",),
         ("ps_overlap", "ps_colocated"), (3, 6), "params/reference-fairps.yaml"),
    Grid("Shi 2019 (what-if: 10 Gb/s links)", "shi2019_10g", ("resnet50",), ("allreduce",),
         (6,), "params/reference-shi-links.yaml"),
    Grid("Wang (NCHC), InfiniBand", "wang_nchc_ib", ("resnet50",), ("allreduce",),
         (1, 16, 24, 32),
         "params/reference-wang-nodes-ib.yaml (+ reference-wang-3x8 / -4x8.yaml)"),
    Grid("Wang (NCHC), 10GbE", "wang_nchc_10gbe", ("resnet50",), ("allreduce",),
         (1, 8, 16, 24, 32),
         "params/reference-wang-nodes.yaml (+ reference-wang-3x8 / -4x8.yaml)"),
)


def runs_per_cell(ref: Path, testbed: str, model: str) -> dict[tuple[str, int], int]:
    """(strategy, workers) -> usable independent runs in the testbed's folder for `model`."""
    path = ref / f"03_ps_vs_ring-testbed-{testbed}-{model}" / "summary.csv"
    if not path.is_file() or not path.stat().st_size:
        return {}
    df = usable(pd.read_csv(path))
    if df.empty or not {"strategy", "workers"} <= set(df):
        return {}
    return {(str(s), int(n)): int(part["repeat"].nunique())
            for (s, n), part in df.groupby(["strategy", "workers"])}


def coverage(ref: Path, grids: Sequence[Grid] | None = None) -> pd.DataFrame:
    """One row per grid cell: paper, testbed, model, strategy, workers, runs, status ('ok',
    'N runs, needs 5' or 'not measured') and the params file that measures it."""
    rows = []
    for g in GRIDS if grids is None else grids:
        found = {m: runs_per_cell(ref, g.testbed, m) for m in g.models}
        for model, strategy, n in g.cells():
            k = found[model].get((strategy, n), 0)
            status = ("ok" if k >= MIN_RUNS else "not measured" if k == 0
                      else f"{k} run{'s' if k > 1 else ''}, needs {MIN_RUNS}")
            rows.append({"paper": g.paper, "testbed": g.testbed, "model": model,
                         "strategy": strategy, "workers": n, "runs": k, "status": status,
                         "params": g.params})
    return pd.DataFrame(rows)


def count_line(df: pd.DataFrame) -> str:
    """'K of M testbed cells hold >= 5 independent runs, J fewer' for a `coverage` table."""
    ok = int((df["status"] == "ok").sum())
    return (f"{ok} of {len(df)} testbed cells hold >= {MIN_RUNS} independent runs, "
            f"{len(df) - ok} fewer")


def block(ref: Path) -> str:
    """docs/results.md's coverage block: a count line, then every cell short of MIN_RUNS."""
    df = coverage(ref)
    short = df[df["status"] != "ok"]
    head = count_line(df) + (":" if len(short) else ".") + "\n\n"
    if short.empty:
        return head
    return head + markdown_table(short.to_dict("records")) + (
        "\nFrom `python -m ddlstudy.report.coverage results/reference` (every cell: "
        "`--all`).\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ddlstudy.report.coverage",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("reference", nargs="?", default=None,
                        help="a reference folder (default: results/reference)")
    parser.add_argument("--all", action="store_true", help="list every cell, not only the "
                        "ones short of 5 runs")
    args = parser.parse_args(argv)
    ref = Path(args.reference) if args.reference else project_root() / "results" / "reference"
    if not ref.is_dir():
        print(f"error: {ref} is not a folder: give a reference folder such as results/reference",
              file=sys.stderr)
        return 2
    df = coverage(ref)
    shown = df if args.all else df[df["status"] != "ok"]
    print(count_line(df))
    if not shown.empty:
        print(shown.to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
