"""The study end to end on tiny params: papermill runs every chapter, the report renders, and a
second run on the same params resumes without rerunning anything."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pandas as pd
import pytest

from ddlstudy.config.params import CHAPTERS, load_params
from ddlstudy.report.runner import run_report


@pytest.fixture(scope="module")
def ci_run(ci_report):
    """The session's CI report (conftest.ci_report; the browser test reads the same book)."""
    return ci_report


def test_every_chapter_runs_and_renders(ci_run) -> None:
    _, out, result = ci_run
    assert result.failed == {}, result.failed
    files, _, _ = ci_run
    chapters = load_params(*files).report.chapters
    assert {name.split("-")[0] for name in result.ran} == set(chapters)
    # `make report`'s chapters, but for the two that need namespaces and minutes (nbval
    # executes every notebook, those and 07-10 included: tests/../Makefile).
    quick = load_params(files[0]).report.chapters
    assert set(quick) - set(chapters) <= {"05_network_profiles", "11_beyond"}
    assert set(chapters) <= set(CHAPTERS)
    index = result.index.read_text()
    meta = json.loads((out / "meta.json").read_text())
    assert meta["git_sha"] in index and "Parameters" in index
    for name in result.ran:
        assert f'href="{name}.html"' in index
        page = (out / "report" / f"{name}.html").read_text()
        assert "Traceback" not in page
    # Figures the chapters draw, as <img> of the book's local copies (ddlstudy.report.book).
    expected = {"00_background": 1, "01_cluster_setup": 1, "02_collectives": 3,
                "03_ps_vs_ring-mlp": 3, "04_utilization_traffic": 3}
    for chapter, figures in expected.items():
        page = (out / "report" / f"{chapter}.html").read_text()
        found = page.count('src="_images/')
        assert found >= figures, f"{chapter}: {found} embedded figures, expected {figures}"


def test_each_chapter_writes_records_with_meta(ci_run) -> None:
    _, out, result = ci_run
    for name in result.ran:
        meta = json.loads((out / name / "meta.json").read_text())
        assert meta["params"]["run_id"] == "ci" and meta["versions"]["torch"].startswith("2.13")
    assert (out / "02_collectives" / "collectives.csv").exists()
    assert (out / "03_ps_vs_ring-mlp" / "summary.csv").exists()


def test_claims_csv_has_intervals_and_no_verdict_outruns_them(ci_run) -> None:
    _, out, _ = ci_run
    claims = pd.read_csv(out / "99_conclusions" / "claims.csv")
    need = {"paper", "claim", "chapter", "quantity", "value", "ci_low", "ci_high", "no_effect",
            "margin_low", "margin_high", "runs", "method", "testbed", "verdict", "reason"}
    assert need <= set(claims.columns)
    assert set(claims["paper"]) == {"Shi 2019", "Fourie 2019", "Malik 2018", "Pani",
                                    "Wang (NCHC)", "Rajbhandari 2020", "Vogels 2019",
                                    "Jiang 2020", "Zhao 2023"}
    decided = claims[claims["verdict"].isin(["agrees", "differs"])]
    assert (decided["runs"] >= 5).all()
    lo, hi = decided["ci_low"], decided["ci_high"]
    excludes = (hi < decided["no_effect"]) | (lo > decided["no_effect"])
    inside = (lo >= decided["margin_low"]) & (hi <= decided["margin_high"])
    outside = (hi < decided["margin_low"]) | (lo > decided["margin_high"])
    assert (excludes | inside | outside).all(), decided


FIXED_RESULTS = ("log-depth algorithms win", "identical bits", "stay flat", "grows with N",
                 "within 10", "far too small")


def test_markdown_states_no_fixed_results(repo_root: Path) -> None:
    """Result sentences are generated from records in code cells, never typed into markdown."""
    for name in ("00_background", "01_cluster_setup", "02_collectives",
                 "04_utilization_traffic", "99_conclusions"):
        nb = nbformat.read(repo_root / "notebooks" / f"{name}.ipynb", 4)
        text = " ".join(c.source for c in nb.cells if c.cell_type == "markdown")
        found = [p for p in FIXED_RESULTS if p in text]
        assert not found, f"{name}: fixed result text {found}"


def test_second_run_resumes_and_reruns_nothing(ci_run) -> None:
    files, out, first = ci_run
    stamp = {p: p.stat().st_mtime_ns for p in out.glob("*.ipynb")}
    second = run_report(files, str(out))
    assert second.ran == [] and second.failed == {}
    assert sorted(second.reused) == sorted(first.ran)
    assert {p: p.stat().st_mtime_ns for p in out.glob("*.ipynb")} == stamp


def test_failing_chapter_keeps_its_copy_and_is_named(ci_run, tmp_path: Path) -> None:
    files, out, _ = ci_run
    bad = tmp_path / "bad.yaml"
    bad.write_text("report:\n  chapters: [00_background]\n  cell_timeout_s: 300\n"
                   "collectives:\n  algorithms: [ring]\n")
    run = tmp_path / "failrun"
    nb = nbformat.read(out / "00_background.ipynb", 4)
    assert nb.cells  # the executed copy of a passing run keeps outputs
    result = run_report([*files, str(bad)], str(run))
    assert result.failed == {}  # a valid small run passes; now break its notebook input
    marker = run / "00_background.done.json"
    marker.unlink()
    (run / "00_background.ipynb").unlink()
    import ddlstudy.report.runner as report

    original = report.NOTEBOOKS
    broken = tmp_path / "notebooks"
    broken.mkdir()
    src = nbformat.read(original / "00_background.ipynb", 4)
    src.cells.append(nbformat.v4.new_code_cell("raise RuntimeError('chapter broke on purpose')"))
    nbformat.write(src, broken / "00_background.ipynb")
    report.NOTEBOOKS = broken
    try:
        failed = run_report([*files, str(bad)], str(run))
    finally:
        report.NOTEBOOKS = original
    assert "00_background" in failed.failed and "chapter broke" in failed.failed["00_background"]
    kept = nbformat.read(run / "00_background.ipynb", 4)
    assert any(o.get("ename") == "RuntimeError" for c in kept.cells for o in c.get("outputs", []))
    assert "failed" in failed.index.read_text()
