"""Stragglers (issue 25): the option is bounded and validated, and on real engines a worker
delayed by a fixed wait slows the synchronous strategies (every worker's step waits for it) but
not asynchronous PS (the others' steps never wait for it)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from ddlstudy.cli.train import main as train_main
from ddlstudy.cluster.engines import Cluster
from ddlstudy.experiments import stragglers
from ddlstudy.train.config import TrainConfig


@pytest.mark.parametrize(("kw", "match"), [
    ({"straggler_rank": 2}, "straggler_rank must be a worker rank 0..1"),
    ({"straggler_rank": 1}, "slows nothing"),
    ({"straggler_factor": 3.0}, "need straggler_rank"),
    ({"straggler_rank": 1, "straggler_factor": 0.5}, r"straggler_factor must be a number in \[1"),
    ({"straggler_rank": 1, "straggler_factor": math.nan}, "straggler_factor must be"),
    ({"straggler_rank": 1, "straggler_factor": 1000.0}, "straggler_factor must be"),
    ({"straggler_rank": 1, "straggler_delay_s": -1.0}, "straggler_delay_s must be"),
    ({"straggler_rank": 1, "straggler_delay_s": 1e9}, "straggler_delay_s must be"),
    ({"straggler_rank": True, "straggler_factor": 2.0}, "straggler_rank must be"),
])
def test_bad_straggler_is_one_line(kw: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match) as err:
        TrainConfig(workers=2, **kw).validate()
    assert "\n" not in str(err.value)


def test_straggler_names_its_cell() -> None:
    plain = TrainConfig(workers=2).validate()
    slow = TrainConfig(workers=2, straggler_rank=1, straggler_factor=3.0).validate()
    assert "slow1x3" in slow.label and "slow" not in plain.label


@pytest.mark.parametrize(("args", "match"), [
    (["--straggler", "1:abc"], "expected RANK:FACTOR"),
    (["--straggler", "7:2", "--workers", "2"], "straggler_rank must be a worker rank"),
    (["--straggler-delay", "0.1"], "need straggler_rank"),
])
def test_cli_bad_straggler_exits_2_with_one_line(args: list[str], match: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        train_main(args)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert match in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_cells_pair_each_arm_with_and_without() -> None:
    base = TrainConfig(model="mlp", steps=2, warmup_steps=1)
    got = stragglers.cells(base, ["ps_sync", "ring"], [2], [1.0, 2.0], rank=1, delay_s=0.1)
    assert [(a.name, c.straggler_rank, c.straggler_factor) for a, c in got] == [
        ("ps_sync", None, 1.0), ("ps_sync", 1, 1.0), ("ps_sync", 1, 2.0),
        ("ring", None, 1.0), ("ring", 1, 1.0), ("ring", 1, 2.0)]
    with pytest.raises(ValueError, match="unknown straggler arm"):
        stragglers.cells(base, ["nope"], [2], [2.0])
    with pytest.raises(ValueError, match="needs more than 1 workers"):
        stragglers.cells(base, ["ring"], [1], [2.0])


DELAY_S = 0.6


@pytest.fixture(scope="module")
def delayed(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    """ps_sync, ps_async and the ring at 2 workers, worker 1 waiting DELAY_S before each step."""
    base = TrainConfig(model="mlp", shape="mnist", batch_size=8, steps=5, warmup_steps=1,
                       lr=0.01)
    cells = stragglers.cells(base, ["ps_sync", "ps_async", "ring"], [2], [1.0], rank=1,
                             delay_s=DELAY_S)
    return stragglers.run_cells(cluster, cells, tmp_path_factory.mktemp("stragglers"))


def test_fixed_delay_slows_sync_strategies_not_async_ps(delayed: pd.DataFrame) -> None:
    df = delayed
    assert (df["error"] == "").all(), df[["arm", "error"]]
    slowed = df[df["straggler_rank"].notna()].set_index("arm")
    # the straggler itself waits the delay in every step
    assert (slowed["straggler_step_s"] >= DELAY_S).all(), slowed["straggler_step_s"]
    # synchronous: the other worker's step waits for the straggler's gradients
    for arm in ("ps_sync", "ring"):
        assert slowed.loc[arm, "others_step_s"] >= 0.8 * DELAY_S, (arm, slowed.loc[arm])
    # asynchronous PS: the other worker's step never waits for it (mlp steps take milliseconds;
    # half the delay leaves a loaded host 300 ms per step; measured here: 34 ms)
    assert slowed.loc["ps_async", "others_step_s"] < 0.5 * DELAY_S, slowed.loc["ps_async"]
    assert slowed.loc["ps_async", "staleness_mean"] >= 0
    slow = stragglers.slowdown(df).set_index("arm")
    assert slow.loc["ps_async", "ratio"] > slow.loc["ps_sync", "ratio"]
    assert slow.loc["ps_async", "ratio"] > slow.loc["ring", "ratio"]
    assert len(stragglers.sentences(slow.reset_index())) == 3


def test_tidy_table_has_one_row_per_run(delayed: pd.DataFrame, tmp_path: Path) -> None:
    assert list(delayed.columns) == stragglers.TABLE_COLUMNS
    assert len(delayed) == 6 and set(delayed["arm"]) == {"ps_sync", "ps_async", "ring"}


def _curve(accs: list[float], step_s: float = 1.0) -> pd.DataFrame:
    return pd.DataFrame({"epoch": [i + 1.0 for i in range(len(accs))],
                         "step": [10 * (i + 1) for i in range(len(accs))],
                         "test_accuracy": accs,
                         "wall_s": [step_s * 10 * (i + 1) for i in range(len(accs))]})


def test_first_reaching_times_the_first_crossing_and_says_never() -> None:
    assert stragglers.first_reaching(_curve([0.5, 0.91, 0.89, 0.95]), 0.9) == (20.0, 2.0, 20.0)
    assert stragglers.first_reaching(_curve([0.5, 0.8]), 0.9) == (math.inf,) * 3
    t, e, s = stragglers.first_reaching(pd.DataFrame(columns=["test_accuracy"]), 0.9)
    assert math.isnan(t) and math.isnan(e) and math.isnan(s)


def _tta_rows(times: dict[tuple[str, bool], list[float]]) -> pd.DataFrame:
    rows = []
    for (arm, slow), ts in times.items():
        rows += [{"arm": arm, "strategy": arm, "workers": 3, "straggler_rank": 1 if slow else None,
                  "delay_s": 0.02 if slow else 0.0, "factor": 1.0, "seed": s, "target": 0.95,
                  "time_to_target_s": t, "error": ""} for s, t in enumerate(ts)]
    return pd.DataFrame(rows)


def test_tta_ratios_pair_by_seed_and_count_runs_that_never_reached() -> None:
    df = _tta_rows({("ps_sync", False): [1.0, 1.1, 0.9, 1.0, 1.2],
                    ("ps_sync", True): [3.0, 3.3, 2.7, 3.0, 3.6],
                    ("ps_async", False): [0.5, 0.5, 0.5, 0.5, 0.5],
                    ("ps_async", True): [1.0, 1.0, math.inf, 1.0, 1.0]})
    r = stragglers.tta_ratios(df).set_index(["arm", "versus"])
    assert list(r.reset_index().columns) == stragglers.TTA_RATIO_COLUMNS
    assert r.loc[("ps_sync", "no straggler"), "ratio"] == pytest.approx(3.0)
    assert r.loc[("ps_sync", "no straggler"), "runs"] == 5
    assert r.loc[("ps_async", "no straggler"), "ratio"] == pytest.approx(2.0)
    assert r.loc[("ps_async", "no straggler"), "not_reached"] == 1
    assert r.loc[("ps_async", "no straggler"), "runs"] == 4
    # with the straggler, async against the first arm (ps_sync), seed by seed
    assert r.loc[("ps_async", "ps_sync"), "ratio"] == pytest.approx(1.0 / 3.15, rel=0.05)
    lines = stragglers.tta_sentences(df, r.reset_index())
    assert "ps_async with the straggler: test accuracy 0.95 reached in 4 of 5 runs" in lines[-4]
    assert any("1 run(s) left out, target not reached" in x for x in lines)


def test_real_tta_runs_time_the_first_crossing(cluster: Cluster, tmp_path: Path) -> None:
    """mlp on digits at 2 workers, 2 epochs: ps_sync without and with worker 1 waiting 50 ms
    before each step. The synchronous run with the straggler cannot reach any accuracy sooner
    than its steps x the wait (a floor load cannot lower); the target 1.0 is never reached."""
    base = TrainConfig(model="mlp", dataset="digits", batch_size=32, epochs=2, warmup_steps=0,
                       lr=0.5, model_kwargs={"activation": "relu"}).validate()
    cells = stragglers.cells(base, ["ps_sync"], [2], [1.0], rank=1, delay_s=0.05)
    df = stragglers.run_tta(cluster, cells, [0], tmp_path, target=0.5)
    assert list(df.columns) == stragglers.TTA_COLUMNS and (df["error"] == "").all()
    assert (df["epochs"] == 2.0).all() and (df["final_accuracy"] > 0.5).all()
    slow = df[df["straggler_rank"].notna()].iloc[0]
    assert math.isfinite(slow["time_to_target_s"]) and slow["steps_to_target"] >= 1
    assert slow["time_to_target_s"] >= 0.05 * slow["steps_to_target"]
    never = stragglers.run_tta(cluster, cells[:1], [0], tmp_path / "never", target=1.0)
    assert never["time_to_target_s"].iloc[0] == math.inf
