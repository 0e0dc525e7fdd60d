"""Reference results (results/reference/): read back cell by cell and always labelled with the
host, date and code version they came from; the train CLI's network flags fail in one line."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from ddlstudy.cli import train
from ddlstudy.network.emulated import netem
from ddlstudy.records import reference
from ddlstudy.records import store as records


def _cell(root: Path, name: str, workers: int, status: str = "ok") -> None:
    folder = root / "03_ps_vs_ring-emulated-vgg16" / "runs" / name
    records.write_table(pd.DataFrame([{"strategy": "allreduce", "workers": workers,
                                       "images_per_sec": 10.0 * workers,
                                       "network": "10GbE", "network_scale": 0.02}]),
                        folder, "summary")
    # a committed tree's sha, whatever state this checkout is in (a +dirty run is left out)
    records.write_meta(folder, {"workers": workers}, status=status, git_sha="c0ffee1")


def test_reference_cells_load_with_their_label(tmp_path: Path) -> None:
    _cell(tmp_path, "allreduce-ring vgg16 x1", 1)
    _cell(tmp_path, "allreduce-ring vgg16 x2", 2)
    _cell(tmp_path, "allreduce-ring vgg16 x4", 4, status="failed")  # not a result
    cells = reference.load("03_ps_vs_ring-emulated-vgg16", root=tmp_path)
    assert sorted(cells["workers"]) == [1, 2]
    text = reference.label(cells)
    meta = records.read_meta(tmp_path / "03_ps_vs_ring-emulated-vgg16" / "runs" /
                             "allreduce-ring vgg16 x1")
    assert text.startswith("reference run: ")
    assert meta["host"]["hostname"] in text and meta["created"][:10] in text
    assert meta["git_sha"][:7] in text and "(2 runs of 2 cells)" in text


def test_label_counts_runs_and_cells_apart(tmp_path: Path) -> None:
    """A reference table has one row per run: a cell measured twice is 2 runs of 1 cell, and a
    chapter's own table (`load_table`) is counted in rows of that table."""
    _cell(tmp_path, "allreduce-ring vgg16 x1", 1)
    _cell(tmp_path, "allreduce-ring vgg16 x1/r1", 1)  # the same cell's second run
    _cell(tmp_path, "allreduce-ring vgg16 x2", 2)
    cells = reference.load("03_ps_vs_ring-emulated-vgg16", root=tmp_path)
    assert len(cells) == 3 and "(3 runs of 2 cells)" in reference.label(cells)
    assert "(1 run of 1 cell)" in reference.label(cells[cells["workers"] == 2])
    chapter = tmp_path / "03_ps_vs_ring-emulated-vgg16"
    cells.to_csv(chapter / "table.csv", index=False)
    records.write_meta(chapter, {}, status="ok", git_sha="c0ffee1")
    table = reference.load_table(chapter.name, "table", root=tmp_path)
    assert "(3 rows of table.csv)" in reference.label(table)


def _cell_folders_with_committed_runs(chapter: Path) -> int:
    runs = [reference.cell_runs(c) for c in reference._cells(chapter / "runs")]
    return sum(any(records.read_meta(r).get("status") == "ok"
                   and reference.code_version(records.read_meta(r))[1] for r in cell)
               for cell in runs)


def test_committed_reference_labels_count_its_cell_folders() -> None:
    """On the committed reference: the label's cells are its cell folders (those with a run of
    committed code), its runs the rows `load` read."""
    chapters = sorted(p.parent for p in reference.reference_dir().glob("*/runs")
                      if not (p.parent / "runs.csv").exists())  # 08-10: tables, not cells
    if not chapters:
        pytest.skip("no committed reference chapters with cell folders")
    for chapter in chapters:
        cells = reference.load(chapter.name)
        n = _cell_folders_with_committed_runs(chapter)
        assert f"({len(cells)} run{'s' * (len(cells) != 1)} of {n} cell{'s' * (n != 1)})" \
            in reference.label(cells), chapter.name


def test_no_reference_cells_say_so(tmp_path: Path) -> None:
    cells = reference.load("05_network_profiles", root=tmp_path)
    assert cells.empty and "none committed" in reference.label(cells)


@pytest.mark.parametrize("argv,needle", [
    (["--network", "100GbE"], "unknown --network '100GbE'"),
    (["--scale", "0.1"], "--scale applies only with --network"),
    (["--network", "10GbE", "--scale", "2"], "--scale must be in [0.001, 1]"),
])
def test_train_cli_bad_network_is_one_line(argv: list[str], needle: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        train.main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and needle in err and err.count("\n") == 1


def test_train_cli_network_without_root_is_one_line(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(netem, "available", lambda refresh=False: (False, "not root: test"))
    with pytest.raises(SystemExit) as exit_:
        train.main(["--network", "10GbE", "--compute", "replay", "--replay-source", "gpu"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "cannot be emulated here: not root: test" in err
    assert err.count("\n") == 1


@pytest.mark.skipif(reference.load("05_network_profiles").empty,
                    reason="no committed reference cells for chapter 05")
def test_chapter_05_renders_reference_records_with_their_label(tmp_path: Path) -> None:
    """The path a host without namespaces takes (forced with use_reference): the figure and the
    sentences come from results/reference/, and say so with host, date and sha. Its cells at 1
    and 6 workers hold runs of several sittings (pooled with add-runs): the text gives each
    profile's median (the chapter raised a TypeError on them until 2026-11-27). ~6 s: in
    `make test`, not only `make test-slow`."""
    import json

    import papermill as pm

    notebooks = records.project_root() / "notebooks"
    out = tmp_path / "nb05.ipynb"
    pm.execute_notebook(str(notebooks / "05_network_profiles.ipynb"), str(out),
                        parameters={"run_dir": str(tmp_path / "run"), "use_reference": True,
                                    "params_files": [str(records.project_root() / "params" / f)
                                                     for f in ("default.yaml", "ci.yaml")]},
                        cwd=str(notebooks), progress_bar=False, kernel_name="python3")
    texts = [str(o.get("data", {}).get("text/markdown", o.get("text", "")))
             for c in json.loads(out.read_text())["cells"] for o in c.get("outputs", [])]
    expected = reference.label(reference.load("05_network_profiles"))
    assert any(expected in t for t in texts), texts
    assert any("not a measurement on this host" in t for t in texts)
    runs = reference.load("05_network_profiles")
    if runs.groupby(["network", "workers"]).size().max() > 1:
        import re

        assert any(re.search(r"median of \d+(-\d+)? runs", t) for t in texts), texts
