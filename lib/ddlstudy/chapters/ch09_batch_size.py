"""Chapter 09 (batch size): Pani's sweep on one host and Malik 2018's throughput sweep under
emulation, from the plan to the prose, so the notebook only calls these in order.

The papers' batch-size claims are checked here on the tables this chapter just wrote
(`claim_rows`), with the same statistics and verdict rules as chapter 99's claims
(ddlstudy.analysis.stats), so the chapter needs nothing from the layers above it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from ddlstudy.analysis import plots, stats
from ddlstudy.claims.engine import chapter_claims, claims_text
from ddlstudy.experiments import dynamics
from ddlstudy.experiments.grid import dilate, emulated_cluster, engine_data_root
from ddlstudy.network.emulated import netem
from ddlstudy.records import store as records
from ddlstudy.records.store import failed_runs
from ddlstudy.train.trainer import TrainConfig

NAME = "09_batch_size"


@dataclass
class Sweep:
    """What the chapter's cells share: params, the `batch_sweep` section, folder, plan, results."""

    P: Any
    S: Any
    out: Path
    samples: int
    emulated: bool
    plan: list[tuple[str, TrainConfig]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    sweep: pd.DataFrame = field(default_factory=pd.DataFrame)
    malik: pd.DataFrame = field(default_factory=pd.DataFrame)
    net: dict[str, Any] = field(default_factory=dict)


def setup(P: Any, run_dir: str | Path | None, models: list[str] | None = None,
          batch_sizes: list[int] | None = None, emulated: bool = True) -> Sweep:
    """The `batch_sweep` section with the notebook's overrides and the one-host plan: every
    model x batch x workers x seed that fits `max_batch` and the training set."""
    S = P.batch_sweep.model_validate({**P.batch_sweep.model_dump(), **{
        k: v for k, v in dict(models=models, batch_sizes=batch_sizes).items() if v is not None}})
    out = records.chapter_dir(run_dir, NAME, P.model_dump(mode="json"),
                              notebook=S.model_dump(mode="json"))
    root = str(P.data.path())
    absent = dynamics.missing_dataset(S.dataset, root, P.data.verify)
    assert absent is None, absent
    W = Sweep(P, S, out, dynamics.train_size(S.dataset, root, P.data.verify), emulated)
    base = TrainConfig(dataset=S.dataset, data_root=engine_data_root(P),
                       verify_data=P.data.verify, lr=S.lr,
                       lr_scaling=S.lr_scaling, lr_base_batch=S.lr_base_batch,
                       lr_warmup_epochs=S.warmup_epochs)
    for model in S.models:
        cap, trained = S.max_batch.get(model), model in S.accuracy_models
        for bs in S.batch_sizes:
            if cap is not None and bs > cap:
                W.skipped.append(f"{model} batch {bs} (above max_batch {cap})")
                continue
            for n in S.workers:
                if n * bs > W.samples:
                    W.skipped.append(f"{model} batch {bs} x {n} (more than the {W.samples} "
                                     "samples)")
                    continue
                for strategy in (["single"] if n == 1 else S.strategies):
                    for seed in S.seeds:
                        c = replace(base, model=model, strategy=strategy, workers=n,
                                    batch_size=bs, seed=seed,
                                    epochs=S.epochs if trained else None, steps=S.steps,
                                    warmup_steps=0 if trained else 1, eval=trained,
                                    model_kwargs={"activation": "relu"} if model == "mlp"
                                    else {})
                        W.plan.append((model, c.validate()))
    return W


def plan_table(W: Sweep) -> pd.DataFrame:
    """The plan, one row per distinct cell with its learning rate (says what was left out)."""
    if W.skipped:
        print("Not run: " + "; ".join(W.skipped) + ".")
    return pd.DataFrame([{"model": c.model, "batch": c.batch_size, "workers": c.workers,
                          "strategy": c.strategy, "lr": dynamics.lr_rule(c)} for _, c in W.plan]
                        ).drop_duplicates()


def run(W: Sweep) -> pd.DataFrame:
    """The one-host sweep on loopback (runs.csv, sweep.csv); median and interval per cell."""
    P = W.P
    engines = max(c.world_size for _, c in W.plan)
    with emulated_cluster("none", engines, **P.cluster.engine_kwargs(),
                          start_timeout_s=P.cluster.start_timeout_s,
                          collective_timeout_s=P.cluster.collective_timeout_s) as cluster:
        runs = dynamics.run_plan(cluster, W.plan, W.out)
    records.write_table(runs, W.out, "runs")
    failed = runs[runs["error"] != ""]
    assert failed.empty, ("runs failed: "
                          f"{failed[['model', 'batch_size', 'error']].to_dict('records')}")
    final = dynamics.finals(runs)
    target = {(r["model"], r["batch_size"], r["workers"]):
              dynamics.schedule_for(c, W.samples).target
              for (_, c), r in zip(W.plan, runs.to_dict("records"), strict=False)}
    final["lr_target"] = [target[(m, b, n)] for m, b, n in
                          zip(final["model"], final["batch_size"], final["workers"],
                              strict=True)]
    W.sweep = dynamics.epoch_times(final, W.samples)
    records.write_table(W.sweep, W.out, "sweep")
    return stats.summarize(W.sweep, ["model", "batch_size", "workers"],
                           ["time_per_epoch_s", "images_per_sec", "test_accuracy", "test_loss"])


def figures(W: Sweep) -> None:
    """One figure per model (sweep-<model>.png): time per epoch, images/sec and, for trained
    models, test accuracy and loss against batch size."""
    W.sweep["label"] = W.sweep["workers"].map(lambda n: f"{n} worker" + "s" * (n > 1))
    for model, part in W.sweep.groupby("model"):
        src = part["time_source"].iloc[0]
        fig = plots.batch_sweep(
            part, part["test_accuracy"].notna().any(),
            f"{model} on {W.S.dataset}: one host, {os.cpu_count()} cores shared by the "
            f"workers; time per epoch {src}; {part['lr_rule'].iloc[0].split(':')[0]}")
        plots.save(fig, W.out, f"sweep-{model}")


def text(W: Sweep) -> str:
    """Per model and worker count: time per epoch and accuracy, smallest vs largest batch."""
    lines = []
    for model, part in W.sweep.groupby("model"):
        lo, hi = int(part["batch_size"].min()), int(part["batch_size"].max())
        if lo == hi:
            continue
        for n, w in part.groupby("workers"):
            a = w[w["batch_size"] == hi].groupby("seed")
            b = w[w["batch_size"] == lo].groupby("seed")
            t = stats.ratio_ci(b["time_per_epoch_s"].median(), a["time_per_epoch_s"].median())
            lines.append(f"{model}, {n} worker(s): time per epoch at batch {lo} / at batch {hi}"
                         f" = {t.text('.3g')} ({w['time_source'].iloc[0]}).")
            if w["test_accuracy"].notna().any():
                acc = stats.diff_ci(a["test_accuracy"].median(), b["test_accuracy"].median())
                lines.append(f"Test accuracy after {W.S.epochs} epoch(s), batch {hi} - batch "
                             f"{lo}: {acc.text('.3g')} ({w['lr_rule'].iloc[0]}): "
                             f"{dynamics.zero_verdict(acc)}.")
    if W.skipped:
        lines.append("Not run here: " + "; ".join(W.skipped) + ".")
    lines.append("All workers share this host's cores, so N workers do not add compute: the "
                 "time per epoch shows contention and per-step overhead amortised over larger "
                 "batches, not a cluster's scaling.")
    return " ".join(lines)


def malik(W: Sweep) -> pd.Series | pd.DataFrame:
    """Malik 2018's sweep on shaped links (malik.csv) where namespaces work and it is asked
    for; median cluster-equivalent images/sec per model and batch (empty when not run).

    Each (model, batch) cell runs `malik_repeats` times as independent runs (its own process
    group and seed P.seed + r), interleaved: run r of every cell before run r + 1 of any, so a
    change of the host's load spreads over all cells instead of one. malik.csv keeps every timed
    chunk with its run (`repeat`, `seed`) and the run's provenance (`run_created`,
    `run_git_sha`, `run_host`, `load_1min` from its meta.json)."""
    P, S = W.P, W.S
    live, why_not = netem.available()
    if not W.emulated or not S.malik_models:
        why_not = "emulated = False" if not W.emulated else "batch_sweep.malik_models is empty"
        live = False
    if not live:
        print(f"Malik 2018's emulated sweep: not run ({why_not}).")
        return W.malik
    plan = malik_plan(P, S)
    N = P.network
    with emulated_cluster(S.malik_profile, S.malik_workers, N.scale, offload_off=not N.offload,
                          start_timeout_s=P.cluster.start_timeout_s,
                          collective_timeout_s=P.cluster.collective_timeout_s) as cluster:
        W.net = cluster.network_info
        cells = dilate(plan, cluster)
        runs = dynamics.run_plan(cluster, [("malik", c) for c in cells], W.out)
    failed = runs[runs["error"] != ""]
    assert failed.empty, ("runs failed: "
                          f"{failed[['model', 'batch_size', 'error']].to_dict('records')}")
    runs = runs.assign(repeat=runs["seed"] - P.seed)
    W.malik = _provenance(dynamics.chunk_rates(
        runs[["folder", "model", "batch_size", "workers", "seed", "repeat"]]), runs)
    records.write_table(W.malik, W.out, "malik")
    print(f"links: {W.net.get('profile')} x {W.net.get('scale')}")
    return W.malik.groupby(["model", "batch_size"])["images_per_sec_cluster"].median()


def malik_plan(P: Any, S: Any) -> list[TrainConfig]:
    """Malik 2018's cells (model x batch), each `malik_repeats` times with seed P.seed + r,
    run r of every cell before run r + 1 of any (interleaved)."""
    base = TrainConfig(dataset="synthetic", shape="imagenet", strategy="allreduce",
                       algorithm="ring_pipelined", workers=S.malik_workers, steps=S.malik_steps,
                       warmup_steps=1, compute="replay", replay_source="gpu", seed=P.seed,
                       overlap=True)
    return [replace(base, model=m, batch_size=bs, seed=P.seed + r).validate()
            for r in range(S.malik_repeats) for m in S.malik_models
            for bs in S.malik_batch_sizes]


def _provenance(chunks: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """`chunks` with each run's host, date, git sha and 1-min load (its meta.json), so pooled
    or committed rows still say when and by which code each run was measured."""
    if chunks.empty:
        return chunks
    info = []
    for row in runs.to_dict("records"):
        meta = records.read_meta(Path(row["folder"]))
        host = meta.get("host") or {}
        load = host.get("load_avg") or [float("nan")]
        info.append({"seed": row["seed"], "model": row["model"],
                     "batch_size": row["batch_size"], "run_host": host.get("hostname", "?"),
                     "run_created": str(meta.get("created", "?")),
                     "run_git_sha": str(meta.get("git_sha", "?")), "load_1min": load[0]})
    return chunks.merge(pd.DataFrame(info), on=["seed", "model", "batch_size"], how="left")


def malik_figure(W: Sweep) -> None:
    """Images/sec against batch size per model (malik.png), when the sweep ran."""
    if len(W.malik):
        fig = plots.malik_batch(
            W.malik, f"{W.S.malik_workers} workers, ring all-reduce, links shaped to "
                     f"{W.S.malik_profile} x {W.net.get('scale')}, compute replayed from the "
                     "H100 table")
        plots.save(fig, W.out, "malik")


# ----------------------------------------------------------------------------- the claims
def _table(W: Sweep, name: str) -> pd.DataFrame:
    """The chapter's table as written (no error rows, not CPU-bound), `repeat` filled."""
    path = W.out / f"{name}.csv"
    df = pd.read_csv(path) if path.exists() else pd.DataFrame()
    if df.empty:
        return df
    df = df[~failed_runs(df)]
    if "cpu_bound" in df:
        df = df[~df["cpu_bound"].eq(True)]
    return df


def text_claims(W: Sweep) -> str:
    """Malik 2018's and Pani's batch-size claims on this run's tables, one bullet each, judged
    as chapter 99 judges them (`ddlstudy.claims`: one definition per claim)."""
    return claims_text(chapter_claims(W.out.parent, NAME))
