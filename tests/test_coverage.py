"""`python -m ddlstudy.report.coverage`: each testbed grid cell's usable runs counted from the
records (errors and cpu_bound rows left out, as chapter 99 leaves them out), its status against
the 5 runs a verdict needs, and docs/results.md's block listing exactly the short cells."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ddlstudy.report import coverage

GRID = coverage.Grid("Shi 2019", "shi2019", ("resnet50",), ("ps_sync", "allreduce"), (3, 6),
                     "params/x.yaml")


def _cells(ref: Path, runs: dict[tuple[str, int], int], bad: dict[str, object] | None = None,
           testbed: str = "shi2019") -> None:
    rows = [{"strategy": s, "workers": n, "repeat": r, "error": "", "cpu_bound": False}
            for (s, n), k in runs.items() for r in range(k)]
    if bad:  # one more run of the first cell, unusable
        (s, n) = next(iter(runs))
        rows.append({"strategy": s, "workers": n, "repeat": 99, "error": "", "cpu_bound": False,
                     **bad})
    folder = ref / f"03_ps_vs_ring-testbed-{testbed}-resnet50"
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(folder / "summary.csv", index=False)


def test_runs_are_counted_per_cell_and_unusable_ones_left_out(tmp_path: Path) -> None:
    _cells(tmp_path, {("ps_sync", 3): 5, ("ps_sync", 6): 4, ("allreduce", 3): 1},
           bad={"cpu_bound": True})
    df = coverage.coverage(tmp_path, [GRID]).set_index(["strategy", "workers"])
    assert df.loc[("ps_sync", 3), "status"] == "ok"  # the cpu_bound 6th run is not counted
    assert df.loc[("ps_sync", 3), "runs"] == 5
    assert df.loc[("ps_sync", 6), "status"] == "4 runs, needs 5"
    assert df.loc[("allreduce", 3), "status"] == "1 run, needs 5"
    assert df.loc[("allreduce", 6), "status"] == "not measured"
    assert set(df["params"]) == {"params/x.yaml"}


def test_an_errored_run_is_not_counted(tmp_path: Path) -> None:
    _cells(tmp_path, {("ps_sync", 3): 4}, bad={"error": "TimeoutError: collective"})
    df = coverage.coverage(tmp_path, [GRID])
    assert df.loc[(df["strategy"] == "ps_sync") & (df["workers"] == 3), "runs"].item() == 4


def test_the_block_lists_exactly_the_short_cells(tmp_path: Path, monkeypatch) -> None:
    _cells(tmp_path, {("ps_sync", 3): 5, ("ps_sync", 6): 5, ("allreduce", 3): 5,
                      ("allreduce", 6): 2})
    monkeypatch.setattr(coverage, "GRIDS", (GRID,))
    text = coverage.block(tmp_path)
    assert text.startswith("3 of 4 grid cells hold >= 5 independent runs, 1 fewer "
                           "(reproduction: 3 of 4):")
    lines = [x for x in text.splitlines() if x.startswith("| Shi 2019")]
    assert lines == ["| Shi 2019 | reproduction | shi2019 | resnet50 | allreduce | 6 | 2 | "
                     "2 runs, needs 5 | params/x.yaml |"]


def test_an_update_grid_reads_its_chapter_folder_and_only_its_link_profile(tmp_path: Path):
    """Today's regime: Wang's ring cells sit in chapter 05's folder beside the other profile's;
    each grid counts only the rows of its own profile."""
    rows = [{"strategy": "allreduce", "workers": n, "network": net, "repeat": r, "error": "",
             "cpu_bound": False}
            for net, k in (("IB-EDR", 5), ("10GbE", 2)) for n in (1, 6) for r in range(k)]
    (tmp_path / "05_network_profiles").mkdir()
    pd.DataFrame(rows).to_csv(tmp_path / "05_network_profiles" / "summary.csv", index=False)
    grids = [coverage.Grid("Wang", coverage.TODAY, ("resnet50",), ("allreduce",), (1, 6), "p",
                           profile=net, folder="05_network_profiles")
             for net in ("IB-EDR", "10GbE")]
    df = coverage.coverage(tmp_path, grids)
    assert list(df["runs"]) == [5, 5, 2, 2] and set(df["column"]) == {"update"}
    assert df["testbed"].iloc[0] == "today: H100 replayed, IB-EDR-like links, 1 GPU per node"
    assert coverage.count_line(df) == ("2 of 4 grid cells hold >= 5 independent runs, 2 fewer "
                                       "(update: 2 of 4)")


def test_the_reference_grid_reads_every_grids_folder_and_the_cli_rejects_a_bad_folder(
        capsys) -> None:
    from ddlstudy.testbeds import catalog

    assert {g.testbed for g in coverage.GRIDS} <= set(catalog.names()) | {coverage.TODAY}
    assert {g.column for g in coverage.GRIDS} == {"reproduction", "update"}
    assert coverage.main([]) == 0
    assert "grid cells hold >= 5" in capsys.readouterr().out
    assert coverage.main(["/nonexistent/reference"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1


def test_a_grid_of_s_servers_counts_only_runs_with_that_many(tmp_path: Path) -> None:
    """ps_overlap with 1 server and with 3 are different cells at the same worker count."""
    rows = [{"strategy": "ps_overlap", "workers": 6, "servers": k, "repeat": r, "error": "",
             "cpu_bound": False} for k, n in ((1, 5), (3, 2)) for r in range(n)]
    folder = tmp_path / "03_ps_vs_ring-testbed-shi2019-resnet50"
    folder.mkdir()
    pd.DataFrame(rows).to_csv(folder / "summary.csv", index=False)
    one, three = (coverage.Grid("Shi", "shi2019", ("resnet50",), ("ps_overlap",), (6,), "p",
                                servers=k) for k in (1, 3))
    assert list(coverage.coverage(tmp_path, [one, three])["runs"]) == [5, 2]
