"""Chapter 08 (convergence): accuracy per epoch per strategy, async staleness and its cost, and
all-reduce order vs accuracy (Fourie 2019, Fig 16), from the plan to the prose.

The papers' claims on this chapter's tables (Fourie 2019's bracketing gap) are stated through
`ddlstudy.claims.engine.chapter_claims`: the same quantity, margin and verdict as chapter 99.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from ddlstudy.analysis import plots
from ddlstudy.claims.engine import chapter_claims, claims_text
from ddlstudy.experiments import dynamics
from ddlstudy.experiments.grid import emulated_cluster, engine_data_root
from ddlstudy.records import store as records
from ddlstudy.train.trainer import TrainConfig

NAME = "08_convergence"


@dataclass
class Convergence:
    """What the chapter's cells share: params, the `convergence` section, folder, plan, results."""

    P: Any
    C: Any
    out: Path
    absent: dict[str, str]
    plan: list[tuple[str, TrainConfig]] = field(default_factory=list)
    async_ds: str | None = None
    runs: pd.DataFrame = field(default_factory=pd.DataFrame)
    curves: pd.DataFrame = field(default_factory=pd.DataFrame)
    final: pd.DataFrame = field(default_factory=pd.DataFrame)
    gaps: pd.DataFrame = field(default_factory=pd.DataFrame)
    loss_gaps: pd.DataFrame = field(default_factory=pd.DataFrame)
    hist: pd.DataFrame = field(default_factory=pd.DataFrame)
    bracketing: pd.DataFrame = field(default_factory=pd.DataFrame)
    async_lines: list[str] = field(default_factory=list)


def setup(P: Any, run_dir: str | Path | None, **overrides: Any) -> Convergence:
    """The `convergence` section with the notebook's non-None overrides and the plan: curves
    (every strategy on each data set and model), staleness (PS sync vs async as workers grow)
    and bracketing (each all-reduce algorithm, float32); MLP runs first."""
    C = P.convergence.model_validate({**P.convergence.model_dump(), **{
        k: v for k, v in overrides.items() if v is not None}})
    out = records.chapter_dir(run_dir, NAME, P.model_dump(mode="json"),
                              notebook=C.model_dump(mode="json"))
    root = str(P.data.path())
    absent = {d: why for d in dict.fromkeys([*C.datasets, C.bracketing_dataset])
              if (why := dynamics.missing_dataset(d, root, P.data.verify))}
    for why in absent.values():
        print(f"Skipped: {why}.")
    S = Convergence(P, C, out, absent)
    base = TrainConfig(warmup_steps=0, data_root=engine_data_root(P), verify_data=P.data.verify,
                       eval=True)
    mlp_kw = {"activation": C.mlp_activation}
    N, b = C.workers, C.batch_size
    plan = []
    for ds in [d for d in C.datasets if d not in absent]:
        for model in C.models:
            for seed in C.seeds:
                for s in C.model_strategies.get(model, C.strategies):
                    plan.append(("curves", replace(
                        base, model=model, dataset=ds, strategy=s,
                        workers=1 if s == "single" else N,
                        batch_size=N * b if s == "single" else b, epochs=C.epochs, lr=C.lr,
                        seed=seed, model_kwargs=mlp_kw if model == "mlp" else {})))
    S.async_ds = next((d for d in C.datasets if d not in absent), None)
    if S.async_ds is not None:
        for n in C.async_workers:
            for seed in C.seeds:
                for s in ("ps_sync", "ps_async"):
                    plan.append(("staleness", replace(
                        base, model=C.async_model, dataset=S.async_ds, strategy=s, workers=n,
                        batch_size=b, epochs=C.epochs, lr=C.lr, seed=seed,
                        model_kwargs=mlp_kw if C.async_model == "mlp" else {})))
    if C.bracketing_dataset not in absent:
        for seed in C.seeds:
            for alg in C.bracketing_algorithms:
                plan.append(("bracketing", replace(
                    base, model="mlp", dataset=C.bracketing_dataset, strategy="allreduce",
                    algorithm=alg, workers=C.bracketing_workers, dtype="float32",
                    batch_size=C.bracketing_batch_size, epochs=C.bracketing_epochs,
                    lr=C.bracketing_lr, seed=seed, model_kwargs=mlp_kw)))
    # MLP runs first (curves, staleness, bracketing): a run cut short keeps the cheap ones
    S.plan = sorted(((section, config.validate()) for section, config in plan),
                    key=lambda entry: entry[1].model != "mlp")
    return S


def plan_table(S: Convergence) -> pd.DataFrame:
    """Runs and engines per section and data set, so a reader knows the cost first."""
    return pd.DataFrame([{"section": s, "run": c.label, "dataset": c.dataset, "seed": c.seed,
                          "engines": c.world_size} for s, c in S.plan]).groupby(
        ["section", "dataset"]).agg(runs=("run", "size"), engines=("engines", "max"))


def run(S: Convergence) -> pd.DataFrame:
    """The plan on one loopback cluster (runs.csv, curves.csv, final.csv); the final test
    accuracy, wall time and images/sec per cell, median over seeds."""
    assert S.plan, f"nothing to run: {S.absent}"
    P = S.P
    engines = max(config.world_size for _, config in S.plan)
    with emulated_cluster("none", engines, **P.cluster.engine_kwargs(),
                          start_timeout_s=P.cluster.start_timeout_s,
                          collective_timeout_s=P.cluster.collective_timeout_s) as cluster:
        S.runs = runs = dynamics.run_plan(cluster, S.plan, S.out)
    records.write_table(runs, S.out, "runs")
    failed = runs[runs["error"] != ""]
    assert failed.empty, ("runs failed: "
                          f"{failed[['section', 'strategy', 'error']].to_dict('records')}")
    S.curves = dynamics.curves(runs[["folder", *dynamics.RUN_KEYS]])
    S.final = dynamics.finals(runs)
    records.write_table(S.curves, S.out, "curves")
    records.write_table(S.final, S.out, "final")
    return S.final.groupby(["section", "dataset", "model", "strategy", "algorithm",
                            "workers"]).agg(
        seeds=("seed", "size"), test_accuracy=("test_accuracy", "median"),
        wall_s=("wall_s", "median"), images_per_sec=("images_per_sec", "median"))


def curve_figures(S: Convergence) -> None:
    """Accuracy and loss per epoch, and accuracy per one-host second, per data set and model
    (curves-<dataset>-<model>.png)."""
    C, N, b = S.C, S.C.workers, S.C.batch_size
    time_label = ("one-host wall time of training steps, s\n(this host's contention: workers "
                  f"share {os.cpu_count()} cores; evaluation excluded)")
    for (ds, model), part in S.curves[S.curves["section"] == "curves"].groupby(
            ["dataset", "model"]):
        fig = plots.convergence_curves(
            part, time_label, f"{model} on {ds}: N = {N} workers x batch {b} (single: 1 x "
                              f"{N * b}), lr {C.lr:g}, {len(C.seeds)} seed(s)")
        plots.save(fig, S.out, f"curves-{ds}-{model}")


def gaps(S: Convergence) -> pd.DataFrame:
    """Each strategy's accuracy gap to `single`, same seed (gaps.csv)."""
    main = S.curves[S.curves["section"] == "curves"]
    keys = ["dataset", "model", "seed"]
    has_single = "single" in set(main["strategy"])
    g = dynamics.gaps_to(main, "single", keys) if has_single else main.iloc[:0]
    S.loss_gaps = (dynamics.gaps_to(main, "single", keys, "train_loss") if has_single
                   else main.iloc[:0])
    S.gaps = (dynamics.gap_table(g, ["dataset", "model", "strategy"]) if len(g)
              else pd.DataFrame())
    records.write_table(S.gaps, S.out, "gaps")
    return S.gaps


def text_gaps(S: Convergence) -> str:
    """Whether the synchronous strategies traced single's curve, and ps_async's gap."""
    gap_acc, loss_gaps, lines = S.gaps, S.loss_gaps, []
    sync = (gap_acc[gap_acc["strategy"].isin(dynamics.SYNC_STRATEGIES)] if len(gap_acc)
            else gap_acc)
    for r in sync.itertuples():
        loss = loss_gaps[(loss_gaps["strategy"] == r.strategy)
                         & (loss_gaps["dataset"] == r.dataset)
                         & (loss_gaps["model"] == r.model)]["gap"].abs().max()
        lines.append(f"{r.strategy} ({r.model}, {r.dataset}): largest |accuracy - single's| "
                     f"over epochs and seeds {r.max_abs_gap:.4f}, training loss {loss:.2e}; "
                     f"final-epoch gap {r.interval}: {r.verdict}.")
    if len(sync):
        exact = sync[sync["max_abs_gap"] == 0]
        lines.insert(0, f"{len(exact)} of {len(sync)} synchronous strategy/model/data-set cells "
                     "ended every epoch with exactly single's test accuracy (float32; float64 "
                     "agrees to 1e-9 in tests/test_dynamics.py); the rest differ only by "
                     "rounding in the order gradients are summed." if len(exact) < len(sync)
                     else f"All {len(sync)} synchronous strategy/model/data-set cells ended "
                     "every epoch with exactly single's test accuracy: one curve, as the "
                     "arithmetic says.")
    asy = gap_acc[gap_acc["strategy"] == "ps_async"] if len(gap_acc) else gap_acc
    for r in asy.itertuples():
        lines.append(f"ps_async ({r.model}, {r.dataset}) against single: final-epoch accuracy "
                     f"gap {r.interval}: {r.verdict}.")
    if S.absent:
        lines.append("Not run: " + "; ".join(S.absent.values()) + ".")
    return " ".join(lines) or "No curves to compare (no single run in the plan)."


def staleness(S: Convergence) -> None:
    """ps_async's staleness per update (staleness.csv) and its share per worker count
    (staleness_shares.png: its own name, so the figure's data does not overwrite the table)."""
    runs = S.runs
    stale_runs = runs[(runs["section"] == "staleness") & (runs["strategy"] == "ps_async")]
    S.hist = hist = dynamics.staleness_histogram(stale_runs[["folder", "workers", "seed"]])
    records.write_table(hist, S.out, "staleness")
    if len(hist):
        shares = hist.groupby(["workers", "staleness"], as_index=False)["updates"].sum()
        shares["share"] = shares["updates"] / shares.groupby("workers")["updates"].transform(
            "sum")
        fig = plots.staleness_shares(shares, f"ps_async staleness per update, "
                                             f"{S.C.async_model} on {S.async_ds}, all seeds")
        plots.save(fig, S.out, "staleness_shares")


def async_cost(S: Convergence) -> pd.DataFrame:
    """Per worker count: mean and largest staleness and ps_async - ps_sync final accuracy,
    same seed (async_cost.csv); the sentences go to `text_async`."""
    sf, hist = S.final[S.final["section"] == "staleness"], S.hist
    rows, S.async_lines = [], []
    for n in sorted(sf["workers"].unique()):
        est = dynamics.paired_diff(sf, {"strategy": "ps_async", "workers": n},
                                   {"strategy": "ps_sync", "workers": n})
        h = hist[hist["workers"] == n] if len(hist) else hist
        mean = (float((h["staleness"] * h["updates"]).sum() / h["updates"].sum()) if len(h)
                else float("nan"))
        rows.append({"workers": n, "staleness_mean": mean,
                     "staleness_max": int(h["staleness"].max()) if len(h) else None,
                     "accuracy_async_minus_sync": est.value, "ci_low": est.low,
                     "ci_high": est.high, "seeds": est.n, "verdict": dynamics.zero_verdict(est)})
        S.async_lines.append(f"{n} worker(s): mean staleness {mean:.2f}; ps_async - ps_sync "
                             f"final test accuracy (same seed) {est.text('.4f')}: "
                             f"{dynamics.zero_verdict(est)}.")
    cost = pd.DataFrame(rows)
    records.write_table(cost, S.out, "async_cost")
    return cost


def text_async(S: Convergence) -> str:
    """The staleness cost per worker count, as `async_cost` computed it."""
    return " ".join(S.async_lines) or "No staleness runs."


def bracketing(S: Convergence) -> pd.DataFrame:
    """Final accuracy per all-reduce algorithm (bracketing.csv: one row per run, what Fourie
    2019's claim reads; bracketing_accuracy.png and its data: median over seeds with its
    interval)."""
    C = S.C
    br = S.final[S.final["section"] == "bracketing"]
    S.bracketing = br[["algorithm", "seed", "test_accuracy", "test_loss", "epoch", "dataset",
                       "dtype", "workers", "batch_size", "lr"]]
    records.write_table(S.bracketing, S.out, "bracketing")
    per_alg = (dynamics.accuracy_table(S.bracketing, ["algorithm"]) if len(S.bracketing)
               else pd.DataFrame())
    if len(per_alg):
        fig = plots.bracketing_accuracy(
            per_alg, f"MLP on {C.bracketing_dataset}, {C.bracketing_workers} workers, "
                     f"{C.bracketing_epochs} epoch(s), float32: median over {len(C.seeds)} "
                     "seed(s) and interval")
        plots.save(fig, S.out, "bracketing_accuracy")
    return per_alg


def text_bracketing(S: Convergence) -> str:
    """Whether the algorithms ended at the same accuracy per seed, and Fourie 2019's verdict."""
    lines = []
    if len(S.bracketing):
        seeds_acc = S.bracketing.pivot_table(index="seed", columns="algorithm",
                                             values="test_accuracy")
        same = bool((seeds_acc.nunique(axis=1) == 1).all())
        lines.append("Per seed, every algorithm ended at " + (
            "exactly the same test accuracy." if same else
            "accuracies that differ in places (rounding changed some predictions)."))
    rows = chapter_claims(S.out.parent, NAME)
    text = " ".join(lines)
    if len(rows):
        text += ("\n\nThe papers' claims on these records, judged as chapter 99 judges them "
                 "(one definition per claim, `ddlstudy.claims`):\n\n" + claims_text(rows))
    return text
