"""A strategy whose first steps are not representative says so in its registry entry
(`warmup_min_steps`), and every TrainConfig of it keeps at least that many steps untimed,
whoever builds it: `python -m ddlstudy.train --warmup-steps 0` for `ddp_powersgd1` times only
compressed steps (torch's PowerSGD all-reduces plain gradients for its first 2), and the records
say the warm-up that ran. Chapter 11 used to do this for its own cells only, by name prefix."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from ddlstudy.cluster.engines import Cluster
from ddlstudy.strategies import StrategySpec, get_strategy, strategy_names
from ddlstudy.strategies.registry import POWERSGD_PLAIN_STEPS, warmup_min_steps

POWERSGD = ("ddp_powersgd1", "ddp_powersgd2", "ddp_powersgd4")


def _cli_config(*argv: str):  # noqa: ANN202 - a TrainConfig (ddlstudy.train.config)
    """The TrainConfig `python -m ddlstudy.train <argv>` builds, as its main does."""
    from ddlstudy.cli.train import _parser, config_from_args

    args = _parser().parse_args(list(argv))
    return config_from_args(args, strategy=args.strategy, algorithm=args.algorithm).validate()


def test_registry_declares_powersgd_plain_steps() -> None:
    """Only the PowerSGD entries declare a floor, the hook's own start_powerSGD_iter (one
    constant: compression.py hands the hook the registry's)."""
    from ddlstudy.strategies import compression

    assert compression.POWERSGD_PLAIN_STEPS is POWERSGD_PLAIN_STEPS == 2
    floors = {s: get_strategy(s).warmup_min_steps for s in strategy_names()}
    assert {s for s, n in floors.items() if n} == set(POWERSGD)
    assert all(floors[s] == POWERSGD_PLAIN_STEPS for s in POWERSGD)
    assert warmup_min_steps("no_such_strategy") == 0  # validate names a bad strategy, not this
    with pytest.raises(ValueError, match="warmup_min_steps must be an integer >= 0"):
        StrategySpec("toy", "x:y", family="allreduce", warmup_min_steps=-1)


@pytest.mark.parametrize("strategy", POWERSGD)
def test_cli_config_with_no_warmup_keeps_powersgd_plain_steps_untimed(strategy: str) -> None:
    """--warmup-steps 0 (or 1) on a PowerSGD strategy: its config runs 2 warm-up steps, and
    stays so through replace; other strategies keep what was asked."""
    for asked in (0, 1):
        config = _cli_config("--strategy", strategy, "--warmup-steps", str(asked))
        assert config.warmup_steps == POWERSGD_PLAIN_STEPS
        assert replace(config, warmup_steps=0).warmup_steps == POWERSGD_PLAIN_STEPS
    assert _cli_config("--strategy", strategy, "--warmup-steps", "5").warmup_steps == 5
    assert _cli_config("--strategy", "ddp", "--warmup-steps", "0").warmup_steps == 0
    assert _cli_config("--strategy", "allreduce", "--warmup-steps", "1").warmup_steps == 1
    # a field set after construction: validate (which train calls) raises it too
    config = _cli_config("--strategy", strategy)
    config.warmup_steps = 0
    assert config.validate().warmup_steps == POWERSGD_PLAIN_STEPS
    with pytest.raises(ValueError, match="warmup_steps must be >= 0"):
        _cli_config("--strategy", strategy, "--warmup-steps", "-1")


def test_powersgd_run_with_no_warmup_times_only_compressed_steps(cluster: Cluster,
                                                                 tmp_path: Path) -> None:
    """The train CLI's config for ddp_powersgd1 with --warmup-steps 0, trained: the timed steps
    are steps 2.. and each sends exactly PowerSGD's P and Q (plus the biases), not the plain
    gradients of steps 0 and 1 (before the fix: step 0 and 1 timed, bytes per step the
    average of plain and compressed); summary, meta.json and the announced line say 2 warm-up."""
    from ddlstudy.strategies.compression import powersgd_elements
    from ddlstudy.train.trainer import train
    from ddlstudy.workload.models import build_model

    config = _cli_config("--strategy", "ddp_powersgd1", "--model", "shallow_cnn", "--dataset",
                         "synthetic", "--shape", "mnist", "--workers", "2", "--batch-size", "8",
                         "--steps", "2", "--warmup-steps", "0", "--lr", "0.05", "--seed", "1",
                         "--no-eval")
    lines: list[str] = []
    result = train(cluster, config, out_dir=tmp_path / "run", progress=False,
                   announce=lines.append)
    row = result.row
    assert row["warmup_steps"] == POWERSGD_PLAIN_STEPS and row["steps"] == 2
    assert sorted(result.steps["step"].unique()) == [2, 3]  # steps 0 and 1 untimed
    shapes = [tuple(t.shape) for t in build_model("shallow_cnn", "mnist").parameters()]
    compressed = 4 * powersgd_elements(shapes, 1)  # fp32, N=2: ring factor 1
    workers = result.steps[result.steps["role"] == "worker"]
    assert (workers["bytes_sent"] == compressed).all(), workers["bytes_sent"].tolist()
    assert row["bytes_sent_per_step"] == compressed
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert meta["params"]["warmup_steps"] == POWERSGD_PLAIN_STEPS
    summary = pd.read_csv(tmp_path / "run" / "summary.csv")
    assert summary["warmup_steps"].tolist() == [2] and summary["steps"].tolist() == [2]
    assert any(line.startswith("Running 2 warm-up (ddp_powersgd1's minimum") for line in lines)
