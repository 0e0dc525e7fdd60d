"""Adding another sitting's runs to a reference chapter: runs keep their numbers, new ones
follow, failed runs are left out, and the chapter's summary lists every run once."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ddlstudy.records import reference


def _run(folder: Path, value: float, status: str = "ok", batch: int = 32) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame([{"model": "resnet50", "strategy": "ps_sync", "workers": 2,
                   "images_per_sec_cluster": value}]).to_csv(folder / "summary.csv", index=False)
    (folder / "meta.json").write_text(json.dumps({"status": status, "created": f"t{value}",
                                                  "git_sha": "abc",
                                                  "params": {"batch_size": batch}}))


def test_add_runs_appends_after_the_existing_runs(tmp_path: Path) -> None:
    dest, src = tmp_path / "dest" / "ch", tmp_path / "src" / "ch"
    cell = "ps_sync-1srv_resnet50_x2_replay"
    _run(dest / "runs" / cell, 100.0)                 # the older sitting's run 0
    _run(src / "runs" / cell, 101.0)                  # the new sitting: runs 0-2, run 2 failed
    _run(src / "runs" / cell / "r1", 102.0)
    _run(src / "runs" / cell / "r2", 999.0, status="failed")
    assert reference.add_runs(src, dest) == {cell: 2}
    runs = reference.cell_runs(dest / "runs" / cell)
    assert [p.name for p in runs] == [cell, "r1", "r2"]
    summary = pd.read_csv(dest / "summary.csv")
    assert summary["repeat"].tolist() == [0, 1, 2]
    assert summary["images_per_sec_cluster"].tolist() == [100.0, 101.0, 102.0]
    assert 999.0 not in summary["images_per_sec_cluster"].tolist()


def test_add_runs_cli_refuses_a_missing_folder(tmp_path: Path, capsys) -> None:
    assert reference.main(["add-runs", str(tmp_path / "nope"), str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a folder" in err


def test_add_runs_refuses_another_configuration(tmp_path: Path) -> None:
    dest, src = tmp_path / "dest" / "ch", tmp_path / "src" / "ch"
    cell = "horovod_resnet50_x2_replay"
    _run(dest / "runs" / cell, 100.0, batch=32)
    _run(src / "runs" / cell, 30.0, batch=128)
    try:
        reference.add_runs(src, dest)
    except ValueError as err:
        assert "batch_size: 32 -> 128" in str(err)
    else:
        raise AssertionError("runs of batch 128 were pooled with batch 32")
    assert reference.cell_runs(dest / "runs" / cell) == [dest / "runs" / cell]


def test_add_runs_skips_runs_it_already_has(tmp_path: Path) -> None:
    dest, src = tmp_path / "dest" / "ch", tmp_path / "src" / "ch"
    cell = "ps_sync-1srv_resnet50_x3_replay"
    _run(dest / "runs" / cell, 100.0)
    import shutil

    shutil.copytree(dest / "runs", src / "runs")  # the scratch copy still holds the old run
    assert reference.add_runs(src, dest) == {}
    assert reference.cell_runs(dest / "runs" / cell) == [dest / "runs" / cell]


def test_a_cell_stored_by_another_checkout_is_the_same_cell() -> None:
    """The data folder's location is not what a cell ran (another clone or node must reuse it);
    any other field is."""
    from dataclasses import replace

    from ddlstudy.experiments import grid
    from ddlstudy.train.trainer import TrainConfig

    config = TrainConfig(model="mlp", dataset="synthetic", workers=2)
    stored = grid._jsonable(config.to_dict())
    assert grid._same_config({**stored, "data_root": "/elsewhere/data"}, config, any_code=False)
    other = grid._jsonable(replace(config, workers=3).to_dict())
    assert not grid._same_config(other, config, any_code=False)


def test_nested_cells_keep_their_folders_and_count_as_runs(tmp_path: Path) -> None:
    """Chapter 07 groups cells by profile (runs/<profile>/<cell>): runs are added under the same
    path, no chapter summary is invented, and reference.load numbers every run."""
    dest, src = tmp_path / "ref" / "07_frameworks", tmp_path / "src" / "07_frameworks"
    cell = Path("IB-EDR") / "horovod_resnet50_x2_replay"
    _run(dest / "runs" / cell, 100.0)
    _run(src / "runs" / cell, 101.0)
    _run(src / "runs" / cell / "r1", 102.0)
    assert reference.add_runs(src, dest) == {str(cell): 2}
    assert not (dest / "summary.csv").exists()  # none before: none invented
    cells = reference.load("07_frameworks", root=tmp_path / "ref")
    assert sorted(cells["repeat"]) == [0, 1, 2]
    assert sorted(cells["images_per_sec_cluster"]) == [100.0, 101.0, 102.0]
