"""records.store.write_grid_summary and strategies.base.chunk_over: a grid's failed run is
written before it stops the chapter (nothing finished is lost), and a parameter server tells a
chunk's end from workers out of step."""

from __future__ import annotations

import pandas as pd
import pytest

from ddlstudy.records.store import failed_runs, write_grid_summary
from ddlstudy.strategies.base import chunk_over


def test_a_failed_run_is_written_before_the_chapter_stops(tmp_path):
    df = pd.DataFrame([{"strategy": "allreduce", "workers": 2, "error": "", "cpu_bound": None},
                       {"strategy": "ps_sync", "workers": 2, "error": "TimeoutError: x"}])
    with pytest.raises(AssertionError, match=r"ps_sync.*TimeoutError"):
        write_grid_summary(df, tmp_path, ["strategy", "workers"])
    written = pd.read_csv(tmp_path / "summary.csv")
    assert len(written) == 2 and written["cpu_bound"].tolist() == [False, False]


def test_a_clean_grid_gets_a_bool_cpu_bound_column(tmp_path):
    df = pd.DataFrame([{"strategy": "allreduce", "workers": 2, "error": float("nan")}])
    out = write_grid_summary(df, tmp_path, ["strategy", "workers"])
    assert out["cpu_bound"].dtype == bool and not out["cpu_bound"].any()


def test_failed_runs_is_the_one_reading_of_an_error_column(tmp_path):
    """The grids, the claims, chapter 09 and the collectives bench all ask it: a clean run's
    error is '' when written, NaN or 'nan' after a CSV round trip; only text is a failure."""
    df = pd.DataFrame({"error": ["", float("nan"), "nan", "RuntimeError: rank 1 died", None]})
    assert failed_runs(df).tolist() == [False, False, False, True, False]
    df.to_csv(tmp_path / "t.csv", index=False)
    back = pd.read_csv(tmp_path / "t.csv")
    assert failed_runs(back).tolist() == [False, False, False, True, False]
    assert failed_runs(back.astype({"error": str})).tolist() == [False, False, False, True, False]
    assert not failed_runs(pd.DataFrame({"x": [1, 2]})).any()


def test_a_server_tells_a_chunk_end_from_workers_out_of_step():
    assert chunk_over([2, 2, 2], 2, rank=3)
    assert not chunk_over([1, 1, 1], 2, rank=3)
    with pytest.raises(RuntimeError, match="server 3: workers out of step"):
        chunk_over([1, 2, 1], 2, rank=3)
