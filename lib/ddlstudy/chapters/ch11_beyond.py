"""Chapter 11 (beyond the papers): sharded data parallelism (ZeRO-1/2/3, torch FSDP) and
compressed all-reduce (fp16, PowerSGD) beside chapter 03's PS and ring, on the same testbed
(emulated links with compute replayed, or this host), and what one straggler costs each.

`setup` settles the `beyond` params section with the notebook's overrides, `run` trains the
comparison grid (every strategy at the same N, interleaved repeats), `ratios` forms bytes per
step per rank relative to the ring run by run, `stragglers` runs the with / without straggler
cells (ddlstudy.experiments.stragglers), `straggler_accuracy` times each arm to a test accuracy
fixed in advance with and without the straggler (real training), and `text` / `summary` say
what the records show.
Bytes are those the study's own Comm counted (`bytes_source` counted) or, for torch DDP / FSDP,
what their buckets imply (`analytic`): a ratio of counted bytes tests the implementation of
the algorithm, not a network.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from ddlstudy.analysis import stats
from ddlstudy.experiments.grid import engine_data_root
from ddlstudy.records import store as records

NAME = "11_beyond"
BASELINE = "allreduce"  # chapter 03's ring: what every bytes ratio divides by
COMPARISON_VIEW = ["strategy", "repeat", "workers", "compute_mode", "bytes_sent_per_step",
                   "bytes_recv_per_step", "bytes_source", "images_per_sec",
                   "images_per_sec_cluster", "step_time_p50_s"]


@dataclass
class Beyond:
    """What the chapter's cells share: params, the `beyond` section, its folder, the configs
    and the tables as they are made."""

    P: Any
    B: Any
    out: Path
    configs: list[Any]
    comparison: pd.DataFrame = field(default_factory=pd.DataFrame)
    bytes_ratio: pd.DataFrame = field(default_factory=pd.DataFrame)
    straggler_runs: pd.DataFrame = field(default_factory=pd.DataFrame)
    slowdown: pd.DataFrame = field(default_factory=pd.DataFrame)
    accuracy_cost: pd.DataFrame = field(default_factory=pd.DataFrame)
    accuracy_skipped: str = ""
    tta_runs: pd.DataFrame = field(default_factory=pd.DataFrame)
    tta_ratio: pd.DataFrame = field(default_factory=pd.DataFrame)
    tta_skipped: str = ""
    winners: pd.DataFrame = field(default_factory=pd.DataFrame)
    net: dict[str, Any] = field(default_factory=dict)


def setup(P: Any, run_dir: str | Path | None, **overrides: Any) -> Beyond:
    """The `beyond` section with the notebook's non-None overrides, the chapter folder and one
    config per strategy (all at `workers`, the ring's algorithm from the section)."""
    from ddlstudy.experiments import grid

    B = P.beyond.model_validate({**P.beyond.model_dump(),
                                 **{k: v for k, v in overrides.items() if v is not None}})
    out = records.chapter_dir(run_dir, NAME, P.model_dump(mode="json"),
                              notebook=B.model_dump(mode="json"))
    base = base_config(P, B)
    configs = grid.training_grid(base, [B.model], B.strategies, [B.workers])
    configs = [replace(c, compute="real").validate()
               if c.compute == "replay" and c.strategy in B.real_compute else c for c in configs]
    # PowerSGD's plain all-reduce steps stay untimed without the chapter's help: its registry
    # entry declares them (warmup_min_steps) and TrainConfig raises its cells' warm-up to them
    return Beyond(P, B, out, configs)


def base_config(P: Any, B: Any) -> Any:
    """The TrainConfig every cell starts from (model, data, steps, compute)."""
    from ddlstudy.train.config import TrainConfig

    return TrainConfig(model=B.model, shape=B.shape, dataset=B.dataset, algorithm=B.algorithm,
                       batch_size=B.batch_size, steps=B.steps, warmup_steps=B.warmup_steps,
                       lr=B.lr, seed=P.seed, data_root=engine_data_root(P),
                       verify_data=P.data.verify, compute=B.compute,
                       replay_source=B.replay_source)


def describe(S: Beyond) -> str:
    """One line saying what will run, so a reader knows the cost before it starts."""
    B = S.B
    where = (f"links shaped to {B.network}-like (scale {B.scale or 'calibrated'}), compute "
             f"{B.compute}" if B.network != "none" else f"local engines, compute {B.compute}")
    slow = (f"; stragglers: {', '.join(B.straggler_arms)} with worker {B.straggler_rank} x"
            f"{'/'.join(f'{f:g}' for f in B.straggler_factors)}"
            + (f" + {B.straggler_delay_s:g} s per step" if B.straggler_delay_s else "")
            if B.straggler_arms else "")
    length = (f"{ACCURACY_WARMUP} warm-up + {B.accuracy_steps} steps" if B.accuracy_steps
              else f"{B.accuracy_epochs} epoch(s)")
    acc = (f"; accuracy: {', '.join(B.accuracy_strategies)} x {len(B.accuracy_seeds)} seeds, "
           f"{B.accuracy_model} on {B.accuracy_dataset}, {B.accuracy_workers} workers x batch "
           f"{B.accuracy_batch_size}, {length}" if B.accuracy_strategies else "")
    return (f"{len(S.configs)} strategies ({', '.join(B.strategies)}) x {B.repeats} repeat(s) "
            f"on {B.model}, {B.workers} workers x batch {B.batch_size}, {B.warmup_steps} warm-up"
            f" + {B.steps} steps; {where}{slow}{acc}")


def _cluster(S: Beyond, engines: int) -> Any:
    from ddlstudy.experiments import grid

    return grid.emulated_cluster(S.B.network, engines, S.B.scale, offload_off=False,
                                 start_timeout_s=S.P.cluster.start_timeout_s,
                                 collective_timeout_s=S.B.timeout_s)


def run(S: Beyond) -> pd.DataFrame:
    """Every strategy at N workers, repeats interleaved, on one cluster; writes comparison.csv
    (one row per run) and raises on a failed run."""
    from ddlstudy.experiments import grid

    with _cluster(S, grid.engines_needed(S.configs)) as cluster:
        S.net = cluster.network_info or {"profile": "none"}
        configs = grid.dilate(S.configs, cluster)
        summary = grid.run_grid(cluster, configs, S.out / "runs", repeats=S.B.repeats)
    records.write_table(summary, S.out, "comparison")
    failed = summary[summary["error"].fillna("").astype(str) != ""]
    assert failed.empty, f"runs failed: {failed[['strategy', 'error']].to_dict('records')}"
    S.comparison = summary
    return summary[[c for c in COMPARISON_VIEW if c in summary]]


WIRE = "wire_bytes_sent_per_step"


def _on_the_wire(strategy: str, part: pd.DataFrame) -> bool:
    """True when `part`'s bytes_sent_per_step are the emulated links' veth counts: a strategy
    whose own figure is analytic (torch DDP / FSDP, Horovod) gets the veth count in its place
    under emulation (ddlstudy.network.emulated.wire), TCP/IP framing and all."""
    from ddlstudy.strategies.registry import get_strategy

    if WIRE not in part or not part[WIRE].notna().all():
        return False
    try:
        return get_strategy(strategy).bytes_source == "analytic"
    except ValueError:
        return False


def bytes_ratios(comparison: pd.DataFrame, baseline: str = BASELINE) -> pd.DataFrame:
    """Per strategy: bytes sent per step per rank / the ring's, run by run (same repeat), the
    median with its interval, and images/sec relative to the ring likewise. Like with like:
    a strategy whose bytes are the veth counts (`_on_the_wire`) is divided by the ring's veth
    count, not by the ring's own count (which has no TCP/IP framing); `bytes_source` says which
    (counted: the study's Comm; wire: the veth counters; analytic). `bytes_ratio_wire` is veth
    over veth for every strategy where both were counted."""
    ok = comparison[comparison["error"].fillna("").astype(str) == ""]
    base = ok[ok["strategy"] == baseline].set_index("repeat")
    rows = []
    for strategy, part in ok.groupby("strategy", sort=False):
        p = part.set_index("repeat")
        common = p.index.intersection(base.index)
        wire = _on_the_wire(str(strategy), part) and WIRE in base
        b = stats.ratio_ci(p.loc[common, "bytes_sent_per_step"],
                           base.loc[common, WIRE if wire else "bytes_sent_per_step"])
        w = (stats.ratio_ci(p.loc[common, WIRE], base.loc[common, WIRE])
             if WIRE in p and WIRE in base and p[WIRE].notna().all()
             and base[WIRE].notna().all() else None)
        rate = "images_per_sec_cluster" if "images_per_sec_cluster" in p else "images_per_sec"
        r = stats.ratio_ci(p.loc[common, rate], base.loc[common, rate])
        same = _mode(part) == _mode(base)
        if not same:  # real compute on this host vs replayed H100 compute: not comparable
            r = stats.Interval(math.nan, math.nan, math.nan, 0, "not compared")
        rows.append({"strategy": strategy, "workers": int(part["workers"].iloc[0]),
                     "compute_mode": _mode(part),
                     "bytes_source": "wire" if wire else str(part["bytes_source"].iloc[0]),
                     "bytes_sent_per_step": float(part["bytes_sent_per_step"].median()),
                     "bytes_ratio": b.value, "bytes_ratio_ci_low": b.low,
                     "bytes_ratio_ci_high": b.high,
                     "bytes_ratio_wire": w.value if w is not None else math.nan,
                     "images_per_sec": float(part["images_per_sec"].median()),
                     "images_per_sec_cluster": float(part["images_per_sec_cluster"].median()),
                     "rate_ratio": r.value, "rate_ratio_ci_low": r.low,
                     "rate_ratio_ci_high": r.high, "runs": b.n})
    return pd.DataFrame(rows)


SOURCES = {"counted": "counted by the study's Comm",
           "wire": "veth counts, TCP/IP framing included, over the ring's veth counts",
           "analytic": "analytic"}


def _mode(df: pd.DataFrame) -> str:
    return str(df["compute_mode"].iloc[0]) if "compute_mode" in df and len(df) else "real"


def ratios(S: Beyond) -> pd.DataFrame:
    """`bytes_ratios` of the comparison; writes bytes_ratio.csv."""
    S.bytes_ratio = bytes_ratios(S.comparison)
    records.write_table(S.bytes_ratio, S.out, "bytes_ratio")
    return S.bytes_ratio


def stragglers(S: Beyond) -> pd.DataFrame:
    """The straggler arms at N workers, without and with worker `straggler_rank` slowed, on the
    same links; writes stragglers.csv (one row per run) and straggler_slowdown.csv."""
    from ddlstudy.experiments import stragglers as st

    B = S.B
    if not B.straggler_arms:
        S.straggler_runs = pd.DataFrame(columns=st.TABLE_COLUMNS)
    else:
        cells = st.cells(base_config(S.P, B), B.straggler_arms, [B.workers],
                         B.straggler_factors, rank=B.straggler_rank,
                         delay_s=B.straggler_delay_s)
        S.straggler_runs = st.run(cells, S.out / "straggler_runs", network=B.network,
                                  scale=B.scale, repeats=B.repeats,
                                  start_timeout_s=S.P.cluster.start_timeout_s,
                                  collective_timeout_s=B.timeout_s)
    S.slowdown = st.slowdown(S.straggler_runs)
    records.write_table(S.straggler_runs, S.out, "stragglers")
    records.write_table(S.slowdown, S.out, "straggler_slowdown")
    return S.slowdown


def accuracy(S: Beyond) -> pd.DataFrame:
    """Compression's accuracy cost in chapter 08's terms: each of `accuracy_strategies` trained
    `accuracy_epochs` (or `accuracy_steps`, a first part of one epoch, where 2 shared cores
    cannot afford whole epochs) on a real data set once per seed (the same seeds for all, local
    engines, real compute); final test accuracy minus the first strategy's (uncompressed),
    paired by seed. Writes accuracy.csv (one row per run) and accuracy_cost.csv."""
    from ddlstudy.experiments import grid
    from ddlstudy.train.config import TrainConfig

    B = S.B
    absent = S.accuracy_skipped = _skipped(S, B.accuracy_dataset, "Accuracy")
    if not B.accuracy_strategies or absent:
        S.accuracy_cost = pd.DataFrame(columns=ACCURACY_COLUMNS)
        return S.accuracy_cost
    configs = [TrainConfig(model=B.accuracy_model, dataset=B.accuracy_dataset, strategy=st,
                           workers=B.accuracy_workers, batch_size=B.accuracy_batch_size,
                           epochs=None if B.accuracy_steps else B.accuracy_epochs,
                           steps=B.accuracy_steps or 1, warmup_steps=ACCURACY_WARMUP,
                           lr=B.accuracy_lr, seed=seed,
                           model_kwargs=MLP_KW if B.accuracy_model == "mlp" else {},
                           data_root=engine_data_root(S.P), verify_data=S.P.data.verify
                           ).validate()
               for seed in B.accuracy_seeds for st in B.accuracy_strategies]
    rows = []
    with grid.emulated_cluster("none", grid.engines_needed(configs),
                               start_timeout_s=S.P.cluster.start_timeout_s,
                               collective_timeout_s=B.timeout_s) as cluster:
        for seed in B.accuracy_seeds:  # a folder per seed: a cell's label has no seed
            part = [c for c in configs if c.seed == seed]
            rows.append(grid.run_grid(cluster, part, S.out / "accuracy_runs" / f"seed{seed}"))
    runs = pd.concat(rows, ignore_index=True)
    records.write_table(runs, S.out, "accuracy")
    S.accuracy_cost = accuracy_costs(runs, B.accuracy_strategies[0])
    records.write_table(S.accuracy_cost, S.out, "accuracy_cost")
    return S.accuracy_cost


def _skipped(S: Beyond, dataset: str, what: str) -> str:
    """'' when `dataset` is at hand; else the one line (printed once) saying which runs are
    skipped and why (`make data`)."""
    from ddlstudy.experiments.dynamics import missing_dataset

    absent = missing_dataset(dataset, str(S.P.data.path()), S.P.data.verify)
    if not absent:
        return ""
    print(f"{what} runs skipped: {absent}.")
    return f"{what} runs skipped: {absent}"


def straggler_accuracy(S: Beyond) -> pd.DataFrame:
    """Time to `tta_target` test accuracy for each of `tta_arms` at `tta_workers`, without and
    with worker `straggler_rank` waiting `tta_delay_s` before each step: real training of
    `tta_model` on `tta_dataset`, evaluated after every epoch, once per seed (local engines).
    Writes straggler_tta.csv (one row per run) and straggler_tta_ratio.csv."""
    from ddlstudy.experiments import grid
    from ddlstudy.experiments import stragglers as st
    from ddlstudy.train.config import TrainConfig

    B = S.B
    absent = S.tta_skipped = _skipped(S, B.tta_dataset, "Time-to-accuracy")
    if not B.tta_arms or absent:
        S.tta_runs = pd.DataFrame(columns=st.TTA_COLUMNS)
        S.tta_ratio = pd.DataFrame(columns=st.TTA_RATIO_COLUMNS)
        return S.tta_ratio
    base = TrainConfig(model=B.tta_model, dataset=B.tta_dataset, workers=B.tta_workers,
                       batch_size=B.tta_batch_size, epochs=B.tta_epochs, steps=1,
                       warmup_steps=0, lr=B.tta_lr, seed=B.tta_seeds[0],
                       model_kwargs=MLP_KW if B.tta_model == "mlp" else {},
                       data_root=engine_data_root(S.P), verify_data=S.P.data.verify).validate()
    cells = st.cells(base, B.tta_arms, [B.tta_workers], [1.0], rank=B.straggler_rank,
                     delay_s=B.tta_delay_s)
    frames = []
    for part in st.by_ranks_per_node(cells).values():  # hierarchical: a cluster of its own
        with grid.emulated_cluster("none", grid.engines_needed([c for _, c in part]),
                                   start_timeout_s=S.P.cluster.start_timeout_s,
                                   collective_timeout_s=B.timeout_s) as cluster:
            frames.append(st.run_tta(cluster, part, B.tta_seeds, S.out / "tta_runs",
                                     B.tta_target))
    S.tta_runs = pd.concat(frames, ignore_index=True)
    S.tta_ratio = st.tta_ratios(S.tta_runs)
    records.write_table(S.tta_runs, S.out, "straggler_tta")
    records.write_table(S.tta_ratio, S.out, "straggler_tta_ratio")
    return S.tta_ratio


def where_each_wins(S: Beyond) -> pd.DataFrame:
    """The step model's fastest strategy (analytic) for `regime_model` at `workers`, one GPU per
    node, over compute time per step x inter-node bandwidth: the ring, fp16 buckets, ZeRO-1,
    ZeRO-3 and the best parameter server (ddlstudy.analysis.costmodel.winners_map), each
    testbed placed at its compute and rate. Writes regime_winners.csv (grid and testbeds,
    labelled projected) and regime_winners.png; returns the testbeds' rows."""
    from ddlstudy.analysis import costmodel, plots

    B = S.B
    grid, testbeds = costmodel.winners_map(B.regime_model, workers=B.workers,
                                           shape=B.regime_shape)
    S.winners = testbeds
    table = pd.concat([grid.assign(kind="grid", name=""),
                       testbeds.assign(kind="testbed", label=costmodel.TESTBED_LABEL)],
                      ignore_index=True)
    records.write_table(table.assign(model=B.regime_model, workers=B.workers,
                                     source="analytic (projected)"), S.out, "regime_winners")
    fig = plots.winners_map(grid, testbeds, title=(
        f"{B.regime_model}: fastest strategy (analytic; {B.workers} workers, 1 GPU per node, "
        "10 us latency; grey: none leads by 2 % or more)"))
    plots.save(fig, S.out, "regime_winners")
    return testbeds[["name", "compute_s", "bandwidth_bps", "winner", "runner_up", "margin",
                     "winner_uncompressed"]] if len(testbeds) else testbeds


def winners_sentences(testbeds: pd.DataFrame, model: str, workers: int) -> list[str]:
    """One line per winner: which testbeds the step model puts where (analytic)."""
    if testbeds.empty:
        return []
    lines = []
    for win, part in testbeds.groupby("winner", sort=False):
        lines.append(f"Projected (analytic, {model} at {workers} workers, 1 GPU per node): "
                     f"{win} on {', '.join(part['name'])}.")
    return lines


def tta_settings(B: Any) -> str:
    """What the time-to-accuracy runs trained, from the params."""
    return (f"{B.tta_model} on {B.tta_dataset}, {B.tta_workers} workers x batch "
            f"{B.tta_batch_size}, {B.tta_epochs} epochs at lr {B.tta_lr:g} evaluated after each, "
            f"worker {B.straggler_rank} waiting {B.tta_delay_s * 1e3:g} ms before each step, "
            f"target {B.tta_target:g} fixed before the runs, local engines, real compute; "
            "each worker runs its equal share of every epoch, so async PS's fast workers idle "
            "at an evaluation until the straggler's share is done")


# torch's PowerSGD hook all-reduces plain gradients for its first 2 steps (start_powerSGD_iter):
# as warm-up they stay out of the bytes per step, and every arm takes them alike
ACCURACY_WARMUP = 2
# relu, as chapter 08's short settings: the sigmoid MLP (Fourie 2019's) barely moves off chance
# on digits in a few epochs, and a chance-level model cannot show an accuracy cost
MLP_KW = {"activation": "relu"}
ACCURACY_COLUMNS = ["strategy", "baseline", "test_accuracy", "accuracy_diff", "ci_low",
                    "ci_high", "runs", "bytes_ratio", "settings"]


def accuracy_settings(runs: pd.DataFrame) -> str:
    """What the accuracy runs trained, from their rows: model, data set, workers x batch, steps
    (warm-up + timed), images seen and lr; '' when the rows lack a column."""
    need = {"model", "dataset", "workers", "batch_size", "steps", "lr"}
    if runs.empty or not need <= set(runs):
        return ""
    r = runs.iloc[0]
    n, b = int(r["workers"]), int(r["batch_size"])
    steps = int(r["steps"]) + ACCURACY_WARMUP
    return (f"{r['model']} on {r['dataset']}, {n} workers x batch {b}, {steps} steps "
            f"({steps * n * b:,} images, {ACCURACY_WARMUP} of the steps warm-up), plain SGD at "
            f"lr {float(r['lr']):g}, local engines, real compute")


def accuracy_costs(runs: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """Per strategy: median final test accuracy, its difference from `baseline`'s paired by
    seed with a bootstrap interval, and bytes per step relative to the baseline's."""
    ok = runs[runs["error"].fillna("").astype(str) == ""] if "error" in runs else runs
    base = ok[ok["strategy"] == baseline].set_index("seed")
    settings = accuracy_settings(ok)
    out = []
    for strategy, part in ok.groupby("strategy", sort=False):
        p = part.set_index("seed")
        common = p.index.intersection(base.index)
        d = stats.diff_ci(p.loc[common, "test_accuracy"], base.loc[common, "test_accuracy"])
        b = stats.ratio_ci(p.loc[common, "bytes_sent_per_step"],
                           base.loc[common, "bytes_sent_per_step"])
        out.append({"strategy": strategy, "baseline": baseline,
                    "test_accuracy": float(part["test_accuracy"].median()),
                    "accuracy_diff": d.value, "ci_low": d.low, "ci_high": d.high, "runs": d.n,
                    "bytes_ratio": b.value, "settings": settings})
    return pd.DataFrame(out, columns=ACCURACY_COLUMNS)


def figure(S: Beyond) -> Any:
    """Bytes per step per rank and images/sec per strategy, relative to the ring
    (beyond.png)."""
    import matplotlib.pyplot as plt

    from ddlstudy.analysis import plots

    df = S.bytes_ratio
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for ax, col, what in ((axes[0], "bytes_ratio", "bytes sent per step per rank"),
                          (axes[1], "rate_ratio", "images/sec")):
        lo = (df[col] - df[f"{col}_ci_low"]).clip(lower=0).fillna(0)
        hi = (df[f"{col}_ci_high"] - df[col]).clip(lower=0).fillna(0)
        colors = [{"counted": "tab:orange", "wire": "tab:blue"}.get(s, "tab:gray")
                  for s in df["bytes_source"]]
        ax.barh(df["strategy"], df[col], xerr=[lo, hi], color=colors)
        ax.axvline(1.0, color="k", lw=0.8)
        ax.set_xlabel(f"{what} / ring's (median of runs, 95 % interval)")
    axes[0].set_title("orange: counted by ddlstudy's Comm; blue: veth counts over the ring's "
                      "veth counts; gray: analytic", fontsize=9)
    cond = _conditions(S)
    fig.suptitle(f"{S.B.model} at {S.B.workers} workers{': ' + cond if cond else ''}",
                 fontsize=10)
    fig.tight_layout()
    plots.save(fig, S.out, "beyond")
    return fig


def _conditions(S: Beyond) -> str:
    from ddlstudy.train.results import conditions

    return conditions(S.configs[0], S.net) if S.configs else ""


def text(S: Beyond) -> str:
    """The chapter's findings, computed from its tables."""
    from ddlstudy.experiments.stragglers import tta_sentences

    text = summary_lines(S.bytes_ratio, S.slowdown, _conditions(S), S.accuracy_cost)
    tta = tta_sentences(S.tta_runs, S.tta_ratio) if len(S.tta_runs) else []
    if tta:
        tta.append(f"Time-to-accuracy runs: {tta_settings(S.B)}.")
    tta += [S.tta_skipped + "."] if S.tta_skipped else []
    tta += winners_sentences(S.winners, S.B.regime_model, S.B.workers)
    text += "".join(f"\n\n- {x}" for x in tta)
    return text + (f"\n\n- {S.accuracy_skipped}." if S.accuracy_skipped else "")


def summary_lines(ratio: pd.DataFrame, slow: pd.DataFrame, cond: str = "",
                  acc: pd.DataFrame | None = None) -> str:
    """Bullets: each strategy's bytes and rate relative to the ring, then each straggler cell."""
    from ddlstudy.experiments.stragglers import sentences

    lines = []
    for r in ratio.itertuples():
        if r.strategy == BASELINE:
            continue
        b = (f"{r.bytes_ratio:.3g}x the ring's bytes per step per rank "
             f"({SOURCES.get(r.bytes_source, r.bytes_source)})"
             if math.isfinite(r.bytes_ratio) else "bytes not compared")
        rate = (f"{r.rate_ratio:.2f}x its images/sec" + (
            f" [{r.rate_ratio_ci_low:.2f}, {r.rate_ratio_ci_high:.2f}]"
            if math.isfinite(r.rate_ratio_ci_low) else " (no interval)")
            if math.isfinite(r.rate_ratio) else
            f"images/sec not compared (compute {r.compute_mode} here, the ring's differs)")
        lines.append(f"{r.strategy}: {b}, {rate}, {r.runs} run(s).")
    lines += sentences(slow)
    acc = acc if acc is not None else pd.DataFrame()
    for r in acc.itertuples():
        if r.strategy == r.baseline:
            continue
        ci = (f" [{r.ci_low:+.3f}, {r.ci_high:+.3f}]" if math.isfinite(r.ci_low)
              else " (no interval)")
        lines.append(f"{r.strategy}: final test accuracy {r.accuracy_diff:+.3f}{ci} against "
                     f"{r.baseline} (same seeds, {r.runs} runs), at {r.bytes_ratio:.3g}x its "
                     "bytes per step (local engines, real compute).")
    if len(acc) and str(getattr(acc.iloc[0], "settings", "") or "") not in ("", "nan"):
        lines.append(f"Accuracy runs: {acc.iloc[0]['settings']}.")
    if cond:
        lines.append(f"Conditions: {cond}.")
    return "\n\n".join(f"- {x}" for x in lines) or "No run finished."


def summary(folder: Path) -> str:
    """The book's sentence for this chapter, from bytes_ratio.csv, straggler_slowdown.csv and
    accuracy_cost.csv."""
    folder = Path(folder)
    path = folder / "bytes_ratio.csv"
    ratio = pd.read_csv(path) if path.exists() else pd.DataFrame(columns=["strategy"])
    parts = []
    for strategy in ("zero1", "zero3", "ddp_powersgd1"):
        row = ratio[ratio["strategy"] == strategy]
        if len(row) and math.isfinite(float(row["bytes_ratio"].iloc[0])):
            parts.append(f"{strategy} sent {float(row['bytes_ratio'].iloc[0]):.3g}x the ring's "
                         "bytes per step per rank")
    slow_path = folder / "straggler_slowdown.csv"
    if slow_path.exists() and len(slow := pd.read_csv(slow_path)):
        worst = slow.loc[slow["ratio"].idxmin()]
        best = slow.loc[slow["ratio"].idxmax()]
        parts.append(f"with one straggler, {worst['arm']} kept {worst['ratio']:.2f} of its rate "
                     f"and {best['arm']} {best['ratio']:.2f}")
    acc_path = folder / "accuracy_cost.csv"
    if acc_path.exists() and len(acc := pd.read_csv(acc_path)):
        parts += [f"{r.strategy}'s final test accuracy was {r.accuracy_diff:+.3f} from "
                  f"{r.baseline}'s at {r.bytes_ratio:.3g}x its bytes per step"
                  for r in acc.itertuples() if r.strategy != r.baseline]
    tta_path = folder / "straggler_tta_ratio.csv"
    if tta_path.exists() and len(tta := pd.read_csv(tta_path)):
        parts += [f"{r.arm} took x{r.ratio:.2f} the time to its target accuracy with the "
                  "straggler" for r in tta.itertuples()
                  if r.versus == "no straggler" and math.isfinite(r.ratio)]
    if not parts and not path.exists():
        return "`bytes_ratio.csv` was not written."
    return ("; ".join(parts) + ".") if parts else "No strategy was compared with the ring."

