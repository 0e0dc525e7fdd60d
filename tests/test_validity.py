"""analysis.validity: a lone replayed worker whose compute window outlasts the replayed step by
more than REPLAY_LAG_MAX (the host set its pace) is left out of every verdict."""

from __future__ import annotations

import math

import pandas as pd

from ddlstudy.analysis.validity import REPLAY_LAG_MAX, host_paced, replay_lag, replay_lagged
from ddlstudy.claims.base import usable


def rows() -> pd.DataFrame:
    base = {"compute_mode": "replay", "replay_s": 0.00285, "time_dilation": 100.0,
            "error": "", "cpu_bound": False, "repeat": 0}
    return pd.DataFrame([
        {**base, "strategy": "allreduce", "workers": 1, "compute_s": 0.2851},   # on time
        {**base, "strategy": "allreduce", "workers": 1, "compute_s": 0.6125},   # host-lagged
        {**base, "strategy": "allreduce", "workers": 6, "compute_s": 0.9},      # hooks: not judged
        {**base, "strategy": "ps_sync", "workers": 1, "compute_s": 0.9},        # a PS: not judged
        {**base, "strategy": "allreduce", "workers": 1, "compute_s": 0.9,
         "compute_mode": "real"},                                               # no replay
    ])


def test_only_a_lone_replayed_worker_without_servers_is_judged():
    lag = replay_lag(rows())
    assert abs(lag[0]) < 0.002 and lag[1] > 1.0
    assert all(math.isnan(x) for x in lag[2:])
    assert replay_lagged(rows()).tolist() == [False, True, False, False, False]


def test_usable_leaves_out_the_lagged_run_and_keeps_the_rest():
    kept = usable(rows())
    assert len(kept) == 4 and 1 not in kept.index


def test_the_bound_sits_between_on_time_and_lagged():
    df = rows().iloc[[0]].assign(compute_s=0.285 * (1 + REPLAY_LAG_MAX / 2))
    assert not replay_lagged(df).any()
    assert replay_lagged(df.assign(compute_s=0.285 * (1 + 2 * REPLAY_LAG_MAX))).any()


def test_records_without_the_columns_are_not_judged():
    df = pd.DataFrame({"strategy": ["allreduce"], "workers": [1]})
    assert replay_lag(df).isna().all() and not replay_lagged(df).any()


def test_host_paced_joins_cpu_bound_and_lagged_runs():
    df = rows().assign(cpu_bound=[False, False, True, False, float("nan")])
    assert host_paced(df).tolist() == [False, True, True, False, False]
    assert host_paced(df.drop(columns="cpu_bound")).tolist() == [False, True, False, False, False]



def test_a_ratio_keeps_every_run_when_the_cells_ran_different_runs():
    """Two cells' runs pair only when both ran the same runs (one sitting, interleaved); a
    baseline that lost runs to the lag check, or was pooled from other sittings, is compared as
    a group instead of shrinking to the runs whose numbers happen to match (Pani's 'one GPU
    fastest' read '1 runs' on 5 + 5 usable runs)."""
    from ddlstudy.analysis import inference
    from ddlstudy.claims import ratio_of_runs

    top = pd.Series([200.0, 202.0, 198.0, 201.0, 199.0], index=[0, 1, 2, 3, 4])
    same = ratio_of_runs(top, pd.Series([100.0, 101.0, 99.0, 100.5, 99.5], index=top.index), 2)
    assert set(same) == {"a"} and len(same["a"]) == 5
    assert all(abs(v - 1.0) < 0.01 for v in same["a"])
    other = pd.Series([100.0, 101.0, 99.0, 100.5, 99.5], index=[0, 5, 6, 7, 8])
    apart = ratio_of_runs(top, other, 2)
    assert len(apart["a"]) == 5 and len(apart["b"]) == 5
    est = inference.verdict(apart["a"], apart["b"], kind="direction", no_effect=1.0,
                            margin_low=1.0, margin_high=float("inf"))
    assert est.runs == 5 and abs(est.value - 1.0) < 0.02
