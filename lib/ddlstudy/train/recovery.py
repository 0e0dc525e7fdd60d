"""Chapter 10's measurements: what a worker that dies costs each strategy (Shi 2019's and Malik
2018's open question), measured by real SIGKILLs (`trainer.train` with `fail_worker`).

Each repeat runs, per strategy and interleaved, a run with no failure and the same run whose
worker `fail_worker` dies at `fail_at_step`; both checkpoint every `checkpoint_every` steps, so
the pair differs by the failure alone. From the pair: the time lost (failed run's record),
steps redone, wall time of the whole run against the clean one, and final training loss and
test accuracy against the clean run's. Intervals over repeats come from `ddlstudy.analysis.stats`.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

from ddlstudy.analysis import stats
from ddlstudy.train.trainer import TrainConfig, continues_without_dead, train

RUN_COLUMNS = ["strategy", "repeat", "arm", "folder", "run_wall_s", "steps", "steps_completed",
               "failures", "restarts", "continued", "steps_redone", "time_lost_s",
               "recovery_s", "workers_final", "loss_last", "test_accuracy", "error"]


def configs(section: Any, data_root: str, verify: bool) -> list[TrainConfig]:
    """One failing config per strategy, async (go-on) strategies last: their dead engine is
    replaced once per repeat, before the next repeat's first run."""
    out = [TrainConfig(model=section.model, dataset=section.dataset, strategy=s,
                       workers=section.workers, batch_size=section.batch_size,
                       steps=section.steps, warmup_steps=section.warmup_steps, lr=section.lr,
                       checkpoint_every=section.checkpoint_every,
                       fail_worker=section.fail_worker, fail_at_step=section.fail_at_step,
                       timeout_s=section.timeout_s, data_root=data_root, verify_data=verify,
                       eval=True).validate()
           for s in section.strategies]
    return sorted(out, key=continues_without_dead)


def run_pairs(cluster: Any, cfgs: list[TrainConfig], repeats: int, out: Path,
              progress: bool = True) -> pd.DataFrame:
    """For each repeat and strategy: the clean run, then the failing one; one row per run.

    A failing async run leaves the cluster one engine short; it is restarted (fresh engines)
    before a run that needs more engines than are left. Each clean run follows one untimed
    priming step (`_prime`). A run that raises is recorded with its error, not retried."""
    from tqdm.auto import tqdm

    rows = []
    bar = tqdm(total=repeats * len(cfgs) * 2, desc="faults", unit="run", disable=not progress)
    for rep in range(repeats):
        for fail in cfgs:
            for arm, cfg in (("clean", replace(fail, fail_worker=None, fail_at_step=None)),
                             ("failure", fail)):
                if cluster.size < cfg.world_size:
                    cluster.restart()
                if arm == "clean":  # fresh engines import and load data on their first run
                    _prime(cluster, cfg)
                folder = out / "runs" / cfg.strategy / f"rep{rep}" / arm
                rows.append(_one(cluster, cfg, folder, rep, arm))
                bar.update(1)
    bar.close()
    return pd.DataFrame(rows, columns=RUN_COLUMNS)


def _prime(cluster: Any, cfg: TrainConfig) -> None:
    """One untimed step on the engines, so the clean run does not pay what fresh engines pay
    once (imports, loading the data set) while its failing twin runs on warm ones."""
    train(cluster, replace(cfg, steps=1, warmup_steps=0, checkpoint_every=None,
                           fail_worker=None, fail_at_step=None, eval=False), None,
          progress=False)


def _one(cluster: Any, cfg: TrainConfig, folder: Path, rep: int, arm: str) -> dict[str, Any]:
    """One run (from scratch: an earlier attempt's checkpoints in `folder` are removed)."""
    import shutil

    shutil.rmtree(folder, ignore_errors=True)
    t0 = time.monotonic()
    base = {"strategy": cfg.strategy, "repeat": rep, "arm": arm, "folder": str(folder)}
    try:
        res = train(cluster, cfg, folder, progress=False)
    except Exception as err:  # noqa: BLE001 - recorded, the chapter says which run failed
        return {**base, "run_wall_s": time.monotonic() - t0,
                "error": f"{type(err).__name__}: {err}"}
    row = res.row
    return {**base, "run_wall_s": time.monotonic() - t0, "error": "",
            **{k: row[k] for k in RUN_COLUMNS if k in row and k not in base}}


def cost_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per strategy: median [95 % interval] over repeats of the time lost, steps redone, the
    whole failing run's wall time over the clean one's, and the final loss and accuracy
    difference failing - clean (paired by repeat); verdicts against 'no difference'."""
    ok = runs[runs["error"] == ""]
    out = []
    for strategy, part in ok.groupby("strategy", sort=False):
        fail = part[part["arm"] == "failure"].set_index("repeat")
        clean = part[part["arm"] == "clean"].set_index("repeat")
        both = fail.index.intersection(clean.index)
        lost = stats.median_ci(fail["time_lost_s"])
        wall = stats.ratio_ci(fail.loc[both, "run_wall_s"], clean.loc[both, "run_wall_s"])
        loss = stats.diff_ci(fail.loc[both, "loss_last"], clean.loc[both, "loss_last"])
        acc = stats.diff_ci(fail.loc[both, "test_accuracy"], clean.loc[both, "test_accuracy"])
        out.append({
            "strategy": strategy, "repeats": len(both),
            "recovery": "restart" if fail["restarts"].sum() else "continue",
            "time_lost_s": lost.value, "time_lost_low": lost.low, "time_lost_high": lost.high,
            "steps_redone": float(fail["steps_redone"].median()),
            "recovery_s": float(fail["recovery_s"].median()),
            "workers_final": int(fail["workers_final"].min()),
            "wall_ratio": wall.value, "wall_ratio_low": wall.low, "wall_ratio_high": wall.high,
            "wall_verdict": stats.verdict(wall.low, wall.high, 1.0, 1),
            "loss_diff": loss.value, "loss_diff_low": loss.low, "loss_diff_high": loss.high,
            "loss_verdict": _same_or_not(fail.loc[both, "loss_last"]
                                         - clean.loc[both, "loss_last"], loss),
            "acc_diff": acc.value, "acc_diff_low": acc.low, "acc_diff_high": acc.high,
            "acc_verdict": _same_or_not(fail.loc[both, "test_accuracy"]
                                        - clean.loc[both, "test_accuracy"], acc),
        })
    return pd.DataFrame(out)


def _same_or_not(diffs: pd.Series, est: stats.Interval) -> str:
    """'identical' when every repeat's failing run ended exactly on its clean run's value
    (restart from a checkpoint replays the same arithmetic), else 'differs' when the interval
    of the difference excludes 0, else 'inconclusive' ('not measured' with too few repeats)."""
    if len(diffs) and bool((diffs == 0).all()):
        return "identical"
    v = stats.verdict(est.low, est.high, 0.0, 1)
    return stats.DIFFERS if v == stats.AGREES else v


def _fmt(value: float, low: float, high: float, unit: str = "") -> str:
    if not math.isfinite(low) or not math.isfinite(high):
        return f"{value:.3g}{unit} (one repeat, no interval)"
    return f"{value:.3g}{unit} [{low:.3g}, {high:.3g}]"


def sentences(table: pd.DataFrame, failed_runs: int = 0) -> list[str]:
    """The chapter's prose, one sentence per strategy, computed from `cost_table`."""
    lines = []
    for r in table.itertuples():
        how = (f"restarted all engines from the checkpoint and redid {r.steps_redone:g} steps"
               if r.recovery == "restart" else
               f"went on with {r.workers_final} workers and redid no step")
        loss = {"identical": "ended with exactly the clean run's training loss in every "
                             "repeat",
                "differs": "ended with a different training loss than the clean run",
                "inconclusive": "ended with a training loss the repeats cannot tell from the "
                                "clean run's",
                "not measured": "has too few repeats to compare its final loss"}[r.loss_verdict]
        slower = {"agrees": "the failure made the run slower",
                  "differs": "the failing run was faster",
                  "inconclusive": "the repeats cannot tell it from 1",
                  "not measured": "too few repeats for an interval"}[r.wall_verdict]
        lost = _fmt(r.time_lost_s, r.time_lost_low, r.time_lost_high, " s")
        wall = _fmt(r.wall_ratio, r.wall_ratio_low, r.wall_ratio_high)
        diff = _fmt(r.loss_diff, r.loss_diff_low, r.loss_diff_high)
        if r.wall_verdict != stats.NOT_MEASURED:
            wall += f" ({slower})"
        lines.append(f"{r.strategy}: {how}; time lost {lost}; whole run / clean run {wall}; "
                     f"it {loss} (difference {diff}, {r.repeats} repeat(s)).")
    if failed_runs:
        lines.append(f"{failed_runs} run(s) raised instead of recovering: see runs.csv.")
    return lines


def summary_text(costs: pd.DataFrame) -> str:
    """Chapter 10's two-sentence summary (ddlstudy.chapters.summaries), from `costs.csv`."""
    parts = []
    for how, verb in (("restart", "restarted on fresh engines from the last checkpoint"),
                      ("continue", "went on with the surviving workers")):
        part = costs[costs["recovery"] == how]
        if len(part):
            lost = ", ".join(f"{r.strategy} {r.time_lost_s:.3g} s" for r in part.itertuples())
            parts.append(f"{', '.join(part['strategy'])} {verb} (median time lost: {lost}; "
                         f"steps redone {part['steps_redone'].median():g})")
    text = "A worker's engine SIGKILLed mid-run: " + "; ".join(parts) + "."
    if "loss_verdict" in costs:
        same = costs[costs["loss_verdict"] == "identical"]["strategy"].tolist()
        text += (f" Final training loss identical to the run without failure: "
                 f"{', '.join(same) if same else 'none'} (one host; times are its own).")
    return text
