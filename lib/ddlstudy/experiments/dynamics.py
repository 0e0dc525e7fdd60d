"""Training dynamics: the curves, staleness and accuracy tables
chapters 08 (convergence) and 09 (batch size) compute from their runs' records (the learning-rate
schedule
lives in ddlstudy.train.schedule).

Learning rate (Goyal et al. 2017, "Accurate, Large Minibatch SGD"): with `lr_scaling="linear"`
the rate is `lr x B / lr_base_batch`, B the batch one update averages (N x b for synchronous
strategies, b for ps_async, whose server applies each worker's gradient alone); with
`lr_warmup_epochs` > 0 it starts at `lr` and rises linearly to that target over those epochs
("gradual warm-up"), so a large batch is not hit with its full rate from random weights. The
schedule is attached to whichever optimizer a rank owns (workers for single/allreduce/ddp, the
server shard for PS) as a post-step hook, so strategies need no change and every update, warm-up
steps included, advances it.

Curves: trainer.train with `epochs` evaluates test accuracy after each epoch (eval.csv); the
per-step training loss is in steps.csv and the timed windows in chunks.csv. With no untimed
warm-up steps (`warmup_steps=0`) the chunks tile the run and end on epoch boundaries, so the wall
time at epoch e is the sum of the windows up to it: one-host wall time of the training steps
(evaluation excluded) on this machine, where workers share its cores.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ddlstudy.analysis import stats
from ddlstudy.strategies.registry import get_strategy
from ddlstudy.train.schedule import (  # noqa: F401 - the chapters read them from here too
    LR_SCALINGS,
    SCHEDULED_STRATEGIES,
    SYNC_STRATEGIES,
    LRSchedule,
    attach_schedule,
    check_schedule,
    lr_rule,
    schedule_for,
    update_batch,
)


# ----------------------------------------------------------------------------- curves
def read_run(folder: Path) -> dict[str, pd.DataFrame]:
    """A finished run's tables (summary, steps, chunks, eval; eval empty when absent)."""
    out = {}
    for name in ("summary", "steps", "chunks", "eval"):
        path = folder / f"{name}.csv"
        out[name] = pd.read_csv(path) if path.exists() else pd.DataFrame()
    return out


def epoch_curve(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per evaluated epoch: test accuracy and loss, mean training loss of the epoch's steps,
    and the cumulative wall time of the timed windows up to it (one-host, evaluation excluded).
    """
    ev, steps, chunks = tables["eval"], tables["steps"], tables["chunks"]
    if ev.empty:
        return pd.DataFrame(columns=["epoch", "step", "test_accuracy", "test_loss",
                                     "train_loss", "wall_s"])
    ev = ev.sort_values("step").reset_index(drop=True)
    workers = steps[steps["role"] == "worker"] if len(steps) else steps
    per_epoch = float(ev["step"].iloc[0] / ev["epoch"].iloc[0])
    ends = chunks["steps"].cumsum().to_numpy() if len(chunks) else np.array([])
    walls = chunks["wall_s"].cumsum().to_numpy() if len(chunks) else np.array([])
    first = int(steps["step"].min()) if len(steps) else 0  # untimed warm-up steps before it
    rows = []
    prev = 0
    for r in ev.itertuples():
        step = int(r.step)
        sel = workers[(workers["step"] >= prev) & (workers["step"] < step)]["loss"]
        # the chunk that ends at this step (chunks count timed steps only)
        hit = np.nonzero(ends + first == step)[0]
        rows.append({"epoch": float(r.epoch), "step": step, "test_accuracy": r.test_accuracy,
                     "test_loss": r.test_loss,
                     "train_loss": float(sel.mean()) if len(sel) else math.nan,
                     "wall_s": float(walls[hit[0]]) if len(hit) else math.nan,
                     "steps_per_epoch": per_epoch})
        prev = step
    return pd.DataFrame(rows)


def curves(runs: pd.DataFrame) -> pd.DataFrame:
    """Epoch curves of every run in `runs` (columns `folder` plus the keys to keep)."""
    frames = []
    for row in runs.to_dict("records"):
        curve = epoch_curve(read_run(Path(row["folder"])))
        keys = {k: v for k, v in row.items() if k != "folder"}
        frames.append(curve.assign(**keys))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def gaps_to(curve: pd.DataFrame, reference: str, keys: Sequence[str],
            column: str = "test_accuracy") -> pd.DataFrame:
    """Per run and epoch: `column` minus the reference strategy's at the same keys and epoch
    (same seed, data set, model): 0 everywhere when the strategies compute the same thing."""
    ref = curve[curve["strategy"] == reference].set_index([*keys, "epoch"])[column]
    other = curve[curve["strategy"] != reference].copy()
    idx = pd.MultiIndex.from_frame(other[[*keys, "epoch"]])
    other["reference"] = ref.reindex(idx).to_numpy()
    other["gap"] = other[column] - other["reference"]
    return other


def gap_table(gaps: pd.DataFrame, by: Sequence[str],
              column: str = "test_accuracy") -> pd.DataFrame:
    """Per group: the largest |gap| over epochs and seeds, and the final epoch's `column` minus
    the reference's, paired by seed (ddlstudy.analysis.stats.diff_ci), with the verdict against
    0."""
    rows = []
    for key, grp in gaps.groupby(list(by), sort=True):
        keys = key if isinstance(key, tuple) else (key,)
        last = grp[grp["epoch"] == grp["epoch"].max()].sort_values("seed")
        est = stats.diff_ci(last[column].to_numpy(float), last["reference"].to_numpy(float))
        rows.append({**dict(zip(by, keys, strict=True)),
                     "max_abs_gap": float(grp["gap"].abs().max()),
                     "final_gap": est.value, "final_gap_low": est.low,
                     "final_gap_high": est.high, "seeds": est.n,
                     "verdict": zero_verdict(est), "interval": est.text(".3g")})
    return pd.DataFrame(rows)


def zero_verdict(est: stats.Interval) -> str:
    """'no difference detected' when the interval holds 0, 'differs' when it excludes it."""
    v = stats.interval_verdict(est, 0.0, 1)
    if v == stats.NOT_MEASURED:
        return stats.NOT_MEASURED
    return "no difference detected" if v == stats.INCONCLUSIVE else "differs"


# ----------------------------------------------------------------------------- staleness
def staleness(steps: pd.DataFrame) -> pd.Series:
    """Staleness of every update a ps_async server applied (server rows of steps.csv)."""
    if steps.empty or "staleness" not in steps:
        return pd.Series(dtype=float)
    return steps.loc[steps["role"] == "server", "staleness"].dropna().astype(int)


def staleness_histogram(runs: pd.DataFrame) -> pd.DataFrame:
    """Counts and shares of each staleness value per run (`folder` plus keys)."""
    frames = []
    for row in runs.to_dict("records"):
        s = staleness(read_run(Path(row["folder"]))["steps"])
        if s.empty:
            continue
        counts = s.value_counts().sort_index()
        keys = {k: v for k, v in row.items() if k != "folder"}
        frames.append(pd.DataFrame({"staleness": counts.index, "updates": counts.to_numpy(),
                                    "share": counts.to_numpy() / counts.sum(), **keys}))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def paired_diff(final: pd.DataFrame, a: dict[str, Any], b: dict[str, Any],
                column: str = "test_accuracy", pair: str = "seed") -> stats.Interval:
    """median(a) - median(b) of `column`, paired on `pair` (same seed): interval over seeds."""
    def pick(where: dict[str, Any]) -> pd.Series:
        sel = final
        for k, v in where.items():
            sel = sel[sel[k] == v]
        return sel.groupby(pair)[column].median()

    x, y = pick(a), pick(b)
    common = x.index.intersection(y.index)
    return stats.diff_ci(x.loc[common].to_numpy(float), y.loc[common].to_numpy(float))


def accuracy_table(final: pd.DataFrame, by: Sequence[str],
                   column: str = "test_accuracy") -> pd.DataFrame:
    """Per group: median `column` over seeds with its order-statistic interval."""
    return stats.summarize(final, list(by), column)


# ----------------------------------------------------------------------------- running a plan
RUN_KEYS = ["section", "dataset", "model", "strategy", "algorithm", "workers", "batch_size",
            "seed", "lr", "lr_rule", "epochs"]


def missing_dataset(name: str, root: str, verify: bool = True) -> str | None:
    """None when `name` loads here, else one line saying why and how to get it."""
    from ddlstudy.workload.data import load_dataset

    try:
        load_dataset(name, root=root, train=False, verify=verify)
    except (OSError, ValueError, RuntimeError) as err:
        return f"{name} not available ({str(err).splitlines()[0]}); run `make data`"
    return None


def _key(config: Any) -> str:
    import json

    return json.dumps(config.to_dict(), sort_keys=True, default=str)


def _engine_import() -> int:
    """Import what a training run needs on this engine (torch first: seconds per engine)."""
    import ddlstudy.strategies  # noqa: F401
    import ddlstudy.train.trainer  # noqa: F401
    import ddlstudy.workload.models  # noqa: F401

    return 0


def warm_engines(cluster: Any, timeout_s: float = 300) -> None:
    """Import on every engine at once, so the first run of each world size does not pay the
    imports of its new ranks one after another."""
    cluster.run(_engine_import, world_size=cluster.size, timeout=timeout_s)


def run_plan(cluster: Any, plan: Sequence[tuple[str, Any]], out: Path,
             train_fn: Any = None) -> pd.DataFrame:
    """Run every (section, TrainConfig) of `plan` (grid.run_grid: resumed when done, a failure
    recorded and the rest going on); a config two sections share runs once. One row per plan
    entry: RUN_KEYS, `folder` (absolute) and `error`."""
    from ddlstudy.experiments.grid import cell_dir, run_grid

    groups: list[tuple[Path, list[Any]]] = []  # consecutive configs of one root: plan order kept
    where: dict[str, Path] = {}
    for section, config in plan:
        if _key(config) in where:
            continue
        # the cell label names strategy, model and workers, not batch or seed: both go in the path
        root = (out / "runs" / section / config.dataset
                / f"seed{config.seed}-b{config.batch_size}")
        folder = cell_dir(root, config)
        if folder in where.values():  # same label, other settings (lr, epochs, ...): own folder
            import hashlib

            root = root / hashlib.sha256(_key(config).encode()).hexdigest()[:8]
            folder = cell_dir(root, config)
        where[_key(config)] = folder
        if groups and groups[-1][0] == root:
            groups[-1][1].append(config)
        else:
            groups.append((root, [config]))
    errors: dict[str, str] = {}
    warm_engines(cluster)
    for root, configs in groups:
        kw = {"train_fn": train_fn} if train_fn is not None else {}
        summary = run_grid(cluster, configs, root, **kw)
        for config, err in zip(configs, summary.get("error", [""] * len(configs)), strict=True):
            errors[_key(config)] = "" if pd.isna(err) else str(err)
    rows = []
    for section, c in plan:
        rows.append({"section": section, "dataset": c.dataset, "model": c.model,
                     "strategy": c.strategy,
                     "algorithm": (c.algorithm if "algorithm" in get_strategy(c.strategy).options
                                   else ""),
                     "workers": c.workers, "batch_size": c.batch_size, "seed": c.seed,
                     "lr": c.lr, "lr_rule": lr_rule(c), "epochs": c.epochs,
                     "folder": str(where[_key(c)]), "error": errors.get(_key(c), "")})
    return pd.DataFrame(rows)


def finals(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per finished run: RUN_KEYS plus its summary's measures (last test accuracy,
    wall time, images/sec, staleness) and the time per epoch of its timed steps."""
    rows = []
    for row in runs[runs["error"].fillna("") == ""].to_dict("records"):
        tables = read_run(Path(row["folder"]))
        if tables["summary"].empty:
            continue
        s = tables["summary"].iloc[0]
        ev = tables["eval"]
        rows.append({**{k: row[k] for k in RUN_KEYS if k in row},
                     "test_accuracy": s["test_accuracy"],
                     "test_loss": float(ev["test_loss"].iloc[-1]) if len(ev) else math.nan,
                     "epoch": float(ev["epoch"].iloc[-1]) if len(ev) else math.nan,
                     "wall_s": s["wall_s"], "images_per_sec": s["images_per_sec"],
                     "staleness_mean": s["staleness_mean"], "staleness_max": s["staleness_max"],
                     "dtype": s["dtype"], "steps": s["steps"]})
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- batch-size sweep
def train_size(dataset: str, root: str, verify: bool = True) -> int:
    """Training samples of a real data set (what one epoch passes over)."""
    from ddlstudy.workload.data import load_dataset

    return len(load_dataset(dataset, root=root, train=True, verify=verify)[1])


def epoch_times(final: pd.DataFrame, samples: int) -> pd.DataFrame:
    """`final` with time_per_epoch_s: measured (the timed wall time over the epochs trained)
    where a run trained whole epochs, else extrapolated (images/sec over `samples`), labelled
    in time_source."""
    out = final.copy()
    epochs = pd.to_numeric(out["epochs"], errors="coerce")
    trained = epochs.notna() & (epochs > 0)
    measured = out["wall_s"].astype(float) / epochs
    extrapolated = samples / out["images_per_sec"].astype(float)
    out["time_per_epoch_s"] = measured.where(trained, extrapolated).astype(float)
    out["time_source"] = np.where(trained, "measured (whole epochs, one host)",
                                  "extrapolated from timed steps (images/sec), one host")
    return out


def chunk_rates(runs: pd.DataFrame) -> pd.DataFrame:
    """Per timed chunk of every run in `runs` (`folder` plus keys): images/sec measured and
    x time_dilation (cluster-equivalent under replay), with the cell's network columns."""
    frames = []
    for row in runs.to_dict("records"):
        tables = read_run(Path(row["folder"]))
        if tables["chunks"].empty or tables["summary"].empty:
            continue
        s = tables["summary"].iloc[0]
        keys = {k: v for k, v in row.items() if k != "folder"}
        ch = tables["chunks"].assign(
            images_per_sec_cluster=lambda d, f=float(s["time_dilation"]): d["images_per_sec"] * f,
            network=s["network"], network_scale=s["network_scale"],
            cpu_bound=bool(s["cpu_bound"]), **keys)
        frames.append(ch)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
