"""Which grid cells `results/reference` holds, and which it still lacks, for both of chapter
99's columns.

    python -m ddlstudy.report.coverage [results/reference]      # one line per grid cell

The reproduction grids (issue 21) are a paper's experiment on that paper's (emulated) testbed: Shi
2019's five models x 1, 3 and 6 workers x PS / ring, Wang (NCHC)'s ResNet-50 at 1 GPU and at 2, 3
and 4 nodes of 8 GPUs on both links, the fair parameter servers (overlapped with S = 1 and with S =
3 servers on separate nodes, co-located S = N) and the links-only what-if; their cells are in
`03_ps_vs_ring-testbed-<testbed>-<model>/`. The update grids are the same experiments on today's
regime, the study's own emulated cluster (an H100's compute replayed, one GPU per node, the link
profile named): Shi's grid in `03_ps_vs_ring-emulated-<model>/`, Wang's ring at 1 and 6 workers on
IB-EDR and 10GbE in `05_network_profiles/`. Each cell's usable runs (no error, not cpu_bound: the
rows chapter 99 reads) are counted against the 5 independent runs a verdict needs, with the params
file that measures the cell. The table is generated into docs/results.md (`python -m
ddlstudy.report.readme`), so what is missing is read from the records, never typed by hand.
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



TODAY = "today"  # a grid on the study's own emulated regime, not a catalog testbed


@dataclass(frozen=True)
class Grid:
    """One paper's experiment in one regime: every (model, strategy, workers) cell of it. A
    reproduction grid names a catalog testbed; an update grid (`testbed` TODAY) names the link
    `profile` of the study's own cluster and the chapter `folder` that holds its cells."""

    paper: str
    testbed: str
    models: tuple[str, ...]
    strategies: tuple[str, ...]
    workers: tuple[int, ...]
    params: str  # the params file (layered on default + reference) that measures it
    profile: str = ""  # update grids: only rows of this link profile (`network` column)
    folder: str = "03_ps_vs_ring-testbed-{testbed}-{model}"
    servers: int | None = None  # only rows with this many PS servers (a PS of S > 1)

    def cells(self) -> list[tuple[str, str, int]]:
        return [(m, s, n) for m in self.models for s in self.strategies for n in self.workers]

    @property
    def column(self) -> str:
        """Chapter 99's column its cells feed: the reproduction or the update."""
        return "update" if self.testbed == TODAY else "reproduction"

    @property
    def regime(self) -> str:
        """The table's testbed column: the catalog name, or today's regime in words."""
        if self.testbed != TODAY:
            return self.testbed
        return f"today: H100 replayed, {self.profile}-like links, 1 GPU per node"

    def path(self, ref: Path, model: str) -> Path:
        return ref / self.folder.format(testbed=self.testbed, model=model) / "summary.csv"


GRIDS = (
    Grid("Shi 2019", "shi2019", _models("shi2019"), ("ps_sync", "allreduce"), (1, 3, 6),
         "params/reference-shi-ps-models.yaml / -ring-models.yaml, one model a last layer "
         "(e.g. reference-shi-ps-vgg19.yaml)"),
    Grid("Shi 2019 (fair PS, S = 1 overlapped)", "shi2019", ("resnet50",), ("ps_overlap",),
         (3, 6), "params/reference-fairps.yaml", servers=1),
    Grid("Shi 2019 (fair PS, S = N co-located)", "shi2019", ("resnet50",), ("ps_colocated",),
         (3, 6), "params/reference-fairps.yaml"),
    Grid("Shi 2019 (fair PS, S = 3 on separate nodes)", "shi2019", ("resnet50",),
         ("ps_overlap",), (6,), "params/reference-fairps-servers.yaml", servers=3),
    Grid("Shi 2019 (what-if: 10 Gb/s links)", "shi2019_10g", ("resnet50",), ("allreduce",),
         (6,), "params/reference-shi-links.yaml"),
    Grid("Wang (NCHC), InfiniBand", "wang_nchc_ib", ("resnet50",), ("allreduce",),
         (1, 16, 24, 32),
         "params/reference-wang-nodes-ib.yaml (+ reference-wang-3x8 / -4x8.yaml)"),
    Grid("Wang (NCHC), 10GbE", "wang_nchc_10gbe", ("resnet50",), ("allreduce",),
         (1, 8, 16, 24, 32),
         "params/reference-wang-nodes.yaml (+ reference-wang-3x8 / -4x8.yaml)"),
    Grid("Shi 2019", TODAY, _models("shi2019"), ("ps_sync", "allreduce"), (1, 3, 6),
         "params/reference-repeats-update.yaml, a last layer naming the model and workers "
         "(e.g. reference-repeats-update-resnet152.yaml; params/plans/issue21.yaml)",
         profile="10GbE", folder="03_ps_vs_ring-emulated-{model}"),
    Grid("Wang (NCHC), InfiniBand", TODAY, ("resnet50",), ("allreduce",), (1, 6),
         "params/reference-repeats-profiles.yaml", profile="IB-EDR",
         folder="05_network_profiles"),
    Grid("Wang (NCHC), 10GbE", TODAY, ("resnet50",), ("allreduce",), (1, 6),
         "params/reference-repeats-profiles.yaml", profile="10GbE",
         folder="05_network_profiles"),
)


def runs_per_cell(path: Path, profile: str = "",
                  servers: int | None = None) -> dict[tuple[str, int], int]:
    """(strategy, workers) -> usable independent runs in one summary.csv (with `profile`, only
    its rows of that link profile; with `servers`, only rows of that many PS servers)."""
    if not path.is_file() or not path.stat().st_size:
        return {}
    df = usable(pd.read_csv(path))
    if profile and "network" in df:
        df = df[df["network"].astype(str) == profile]
    if servers is not None:
        df = df[df["servers"] == servers] if "servers" in df else df.iloc[0:0]
    if df.empty or not {"strategy", "workers"} <= set(df):
        return {}
    return {(str(s), int(n)): int(part["repeat"].nunique())
            for (s, n), part in df.groupby(["strategy", "workers"])}


def coverage(ref: Path, grids: Sequence[Grid] | None = None) -> pd.DataFrame:
    """One row per grid cell: paper, column (reproduction / update), testbed, model, strategy,
    workers, runs, status ('ok', 'N runs, needs 5' or 'not measured') and the params file that
    measures it."""
    rows = []
    for g in GRIDS if grids is None else grids:
        found = {m: runs_per_cell(g.path(ref, m), g.profile, g.servers) for m in g.models}
        for model, strategy, n in g.cells():
            k = found[model].get((strategy, n), 0)
            status = ("ok" if k >= MIN_RUNS else "not measured" if k == 0
                      else f"{k} run{'s' if k > 1 else ''}, needs {MIN_RUNS}")
            rows.append({"paper": g.paper, "column": g.column, "testbed": g.regime,
                         "model": model,
                         "strategy": strategy, "workers": n, "runs": k, "status": status,
                         "params": g.params})
    return pd.DataFrame(rows)


def count_line(df: pd.DataFrame) -> str:
    """'K of M grid cells hold >= 5 independent runs, J fewer (reproduction: a of b; update:
    c of d)' for a `coverage` table."""
    ok = df["status"] == "ok"
    parts = "; ".join(f"{col}: {int(ok[df['column'] == col].sum())} of "
                      f"{int((df['column'] == col).sum())}"
                      for col in ("reproduction", "update") if (df["column"] == col).any())
    return (f"{int(ok.sum())} of {len(df)} grid cells hold >= {MIN_RUNS} independent runs, "
            f"{len(df) - int(ok.sum())} fewer ({parts})")


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
    from ddlstudy.host import entry
    raise SystemExit(entry.run(main))
