"""Chapter 10 (a worker that dies): the plan, the clean/failure pairs, the cost table, its figure
and its prose, so the notebook only calls them in order and shows what they return.

The run logic itself (killing a worker, restarting or re-forming the group) lives in
`ddlstudy.train.recovery`; this module only ties it to the chapter's params and folder.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ddlstudy.analysis import plots
from ddlstudy.experiments.grid import emulated_cluster, engine_data_root
from ddlstudy.records import store as records
from ddlstudy.train import recovery
from ddlstudy.train.trainer import TrainConfig

NAME = "10_faults"
# the columns of runs.csv the notebook shows (the table keeps them all)
RUN_VIEW = ["strategy", "repeat", "arm", "run_wall_s", "steps", "failures", "restarts",
            "steps_redone", "time_lost_s", "workers_final", "loss_last", "test_accuracy", "error"]


@dataclass
class Faults:
    """What the chapter's cells share: params, its `faults` section, folder, configs, results."""

    P: Any
    F: Any
    out: Path
    cfgs: list[TrainConfig]
    runs: pd.DataFrame = field(default_factory=pd.DataFrame)
    costs: pd.DataFrame = field(default_factory=pd.DataFrame)


def setup(P: Any, run_dir: str | Path | None, strategies: list[str] | None = None,
          repeats: int | None = None) -> Faults:
    """The `faults` section with the notebook's overrides, the chapter folder and one config
    per strategy."""
    F = P.faults.model_validate({**P.faults.model_dump(), **{
        k: v for k, v in dict(strategies=strategies, repeats=repeats).items() if v is not None}})
    out = records.chapter_dir(run_dir, NAME, P.model_dump(mode="json"),
                              notebook=F.model_dump(mode="json"))
    return Faults(P, F, out, recovery.configs(F, engine_data_root(P), P.data.verify))


def describe(S: Faults) -> str:
    """One line saying what will run, so a reader knows the cost before it starts."""
    F = S.F
    return (f"{len(S.cfgs)} strategies x {F.repeats} repeat(s) x (clean, failure); {F.model} on "
            f"{F.dataset}, {F.workers} workers x batch {F.batch_size}, {F.warmup_steps} warm-up"
            f" + {F.steps} steps, checkpoint every {F.checkpoint_every}; worker {F.fail_worker} "
            f"dies at step {F.fail_at_step}; collective timeout {F.timeout_s:g} s")


def run(S: Faults) -> pd.DataFrame:
    """Every clean/failure pair on one loopback cluster; writes runs.csv."""
    engines = max(c.world_size for c in S.cfgs)
    with emulated_cluster("none", engines, profile=None,
                          start_timeout_s=S.P.cluster.start_timeout_s,
                          collective_timeout_s=S.F.timeout_s) as cluster:
        S.runs = recovery.run_pairs(cluster, S.cfgs, S.F.repeats, S.out)
    records.write_table(S.runs, S.out, "runs")
    return S.runs


def costs(S: Faults) -> pd.DataFrame:
    """Recovery cost per strategy (ddlstudy.train.recovery.cost_table); writes costs.csv."""
    S.costs = recovery.cost_table(S.runs)
    records.write_table(S.costs, S.out, "costs")
    return S.costs


def figure(S: Faults) -> None:
    """Time lost and steps redone per failing run (recovery_cost.png), when any finished."""
    fails = S.runs[(S.runs["arm"] == "failure") & (S.runs["error"] == "")]
    if len(fails):
        fig = plots.recovery_cost(
            fails, list(S.costs["strategy"]),
            f"worker {S.F.fail_worker} SIGKILLed at step {S.F.fail_at_step}; dots: repeats, "
            "bar: median; one host, engines share its cores")
        plots.save(fig, S.out, "recovery_cost")


def text(S: Faults) -> str:
    """The chapter's findings as a bullet list, computed from the cost table."""
    failed = S.runs[S.runs["error"] != ""]
    lines = recovery.sentences(S.costs, failed_runs=len(failed))
    restart = S.costs[S.costs["recovery"] == "restart"]
    goon = S.costs[S.costs["recovery"] == "continue"]
    if len(restart) and len(goon):
        share = restart["recovery_s"].median() / restart["time_lost_s"].median()
        lines.append(f"Restarting on fresh engines (torchelastic's way) lost a median "
                     f"{restart['time_lost_s'].median():.3g} s over {len(restart)} synchronous "
                     f"strateg{'y' if len(restart) == 1 else 'ies'}, {share:.0%} of it recovery "
                     f"(killing and starting engines, reloading the checkpoint) rather than work"
                     f" thrown away; re-forming the group with the survivors (Horovod elastic's "
                     f"way, here without a rollback) lost {goon['time_lost_s'].median():.3g} s.")
    return "\n\n".join(f"- {x}" for x in lines) or "No run finished."
