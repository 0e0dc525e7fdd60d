"""`python -m ddlstudy.costmodel contention DIR...`: each cell's repeats against the host load
they started under (issue 21, item 5: the co-located PS's step time follows the load; the
overlapped PS's does not, and its workers finish seconds apart)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from ddlstudy.analysis.costmodel.cells import RecordsError
from ddlstudy.analysis.costmodel.cli import main
from ddlstudy.analysis.costmodel.contention import load_sensitivity, repeat_table


def _run(folder: Path, strategy: str, workers: int, load: float, wall: float,
         ends: list[float], pressure: float | None = None) -> None:
    """One run folder: a one-cell summary.csv, meta.json with the host load, steps.csv with
    one step whose workers end at `ends` (compute 1 s + wait) and one server row."""
    folder.mkdir(parents=True)
    pd.DataFrame([{"strategy": strategy, "algorithm": "", "model": "resnet50",
                   "workers": workers, "servers": 1, "network": "shi2019", "steps": 1,
                   "wall_s": wall, "server_update_s": 0.5, "error": "",
                   **({} if pressure is None else {"host_cpu_pressure": pressure})}]).to_csv(
        folder / "summary.csv", index=False)
    (folder / "meta.json").write_text(json.dumps(
        {"created": "2026-11-26T07:00:00+00:00", "host": {"load_avg": [load, 1.0, 1.0],
                                                          "cpu_count": 2}}))
    rows = [{"step": 1, "rank": r, "role": "worker", "compute_s": 1.0, "comm_wait_s": e - 1.0}
            for r, e in enumerate(ends)]
    rows.append({"step": 1, "rank": len(ends), "role": "server", "compute_s": 0.0,
                 "comm_wait_s": 0.0})
    pd.DataFrame(rows).to_csv(folder / "steps.csv", index=False)


@pytest.fixture
def records(tmp_path: Path) -> Path:
    root = tmp_path / "chapter"
    # a cell whose step grows 0.5 s per unit of load, workers ending together
    for i, load in enumerate([4.0, 8.0, 12.0]):
        _run(root / "runs" / "colo" / f"r{i}", "ps_colocated", 3, load, 10.0 + 0.5 * load,
             [9.0, 9.0, 9.0])
    # a cell that ignores the load, workers 2 s apart
    for i, (load, wall) in enumerate([(5.0, 30.0), (9.0, 29.0), (20.0, 30.0)]):
        _run(root / "runs" / "ovl" / f"r{i}", "ps_overlap", 3, load, wall, [20.0, 21.0, 22.0])
    # the chapter's own summary of many cells (no steps.csv): not a run, left out
    pd.DataFrame([{"strategy": "ps_sync", "workers": 2, "wall_s": 1.0, "steps": 1}] * 2).to_csv(
        root / "summary.csv", index=False)
    (root / "meta.json").write_text(json.dumps({"host": {"load_avg": [99.0, 0, 0]}}))
    return root


def test_repeats_carry_their_own_load_and_finish_spread(records: Path):
    t = repeat_table([records])
    assert len(t) == 6 and set(t["strategy"]) == {"ps_colocated", "ps_overlap"}
    assert 99.0 not in set(t["load_1m"])  # the sitting's meta.json is not a repeat's
    assert set(t.loc[t["strategy"] == "ps_overlap", "finish_spread_s"]) == {2.0}
    assert set(t.loc[t["strategy"] == "ps_colocated", "finish_spread_s"]) == {0.0}


def test_sensitivity_finds_the_load_bound_cell_and_not_the_other(records: Path):
    s = load_sensitivity(repeat_table([records]), at_load=6.0).set_index("strategy")
    colo, ovl = s.loc["ps_colocated"], s.loc["ps_overlap"]
    assert colo["slope_s_per_load"] == pytest.approx(0.5)
    assert colo["r"] == pytest.approx(1.0)
    assert colo["step_at_load_s"] == pytest.approx(13.0)
    assert colo["at_load_is"] == "extrapolated"  # nearest repeat ran at load 4 and 8
    assert colo["step_at_load_min_s"] == pytest.approx(12.0)
    assert abs(ovl["r"]) < 0.5 and ovl["finish_spread_s"] == pytest.approx(2.0)
    plain = load_sensitivity(repeat_table([records]))
    assert plain["step_at_load_s"].isna().all() and set(plain["at_load_is"]) == {""}


def test_one_repeat_gets_no_line(tmp_path: Path):
    _run(tmp_path / "one", "ps_sync", 2, 3.0, 5.0, [4.0, 4.5])
    s = load_sensitivity(repeat_table([tmp_path]), at_load=3.0)
    assert len(s) == 1 and math.isnan(s["slope_s_per_load"].iloc[0])


def test_measured_cpu_pressure_is_carried_and_its_absence_left_blank(tmp_path: Path, capsys):
    """Records written since runs measure it carry `host_cpu_pressure`; older ones do not and
    read NaN (printed blank), never 0."""
    for i, pr in enumerate([0.05, 0.6]):
        _run(tmp_path / "new" / f"r{i}", "allreduce", 6, 3.0 + i, 20.0, [9.0] * 6, pr)
    _run(tmp_path / "old" / "r0", "ps_sync", 6, 3.0, 60.0, [9.0] * 6)
    t = repeat_table([tmp_path]).set_index("strategy")
    assert sorted(t.loc["allreduce", "cpu_pressure"]) == [0.05, 0.6]
    assert math.isnan(t.loc["ps_sync", "cpu_pressure"])
    s = load_sensitivity(repeat_table([tmp_path])).set_index("strategy")
    assert s.loc["allreduce", "cpu_pressure_max"] == pytest.approx(0.6)
    assert math.isnan(s.loc["ps_sync", "cpu_pressure_max"])


def test_cli_names_the_load_bound_cells(records: Path, capsys):
    assert main(["contention", str(records), "--at-load", "6"]) == 0
    out = capsys.readouterr().out
    assert "ps_colocated x3 (shi2019): step time follows host load (r 1.00" in out
    assert "ps_overlap x3 (shi2019): step time follows" not in out


def test_no_run_folder_is_an_error(tmp_path: Path, capsys):
    with pytest.raises(RecordsError):
        repeat_table([tmp_path])
    assert main(["contention", str(tmp_path)]) == 2
    assert "no run folder" in capsys.readouterr().out
