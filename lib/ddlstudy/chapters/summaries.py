"""Two or three sentences per chapter saying what *this run* found, computed from its records.

The book (ddlstudy.report.book) puts each summary at the top of its chapter's page, so a reader
gets the
finding before the code and figures. Every sentence is built from the chapter's CSVs: a chapter
whose records are missing says which file it lacks instead of a finding. One function per
chapter, named by its chapter registry record (`Chapter.summary`); 03 runs once per model
(`03_ps_vs_ring-mlp` uses the `03_ps_vs_ring` function).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

Summary = Callable[[Path], str]


class MissingRecords(Exception):
    """A table the summary needs is absent or lacks a column: said in one sentence instead."""


def _table(folder: Path, name: str, *columns: str) -> pd.DataFrame:
    """The chapter's table `name`, with the columns the summary reads (else MissingRecords)."""
    path = folder / f"{name}.csv"
    if not path.exists():
        raise MissingRecords(f"`{name}.csv` was not written")
    df = pd.read_csv(path)
    if "error" in df.columns:
        df = df[df["error"].isna() | (df["error"].astype(str) == "")]
    lacking = [c for c in columns if c not in df.columns]
    if lacking:
        raise MissingRecords(f"`{name}.csv` has no column {', '.join(lacking)}")
    if df.empty:
        raise MissingRecords(f"`{name}.csv` has no successful rows")
    return df


def _size(n: float) -> str:
    """Bytes as the chapters print them (8 B, 64 KiB, 16 MiB)."""
    for unit, scale in (("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n:g} B"


def background(folder: Path) -> str:
    """Chapter 00: the float32 summation-order drift and the cost formulas' cheapest algorithm."""
    drift = _table(folder, "bracketing_drift", "algorithm", "max_rel_err", "ranks_identical")
    worst = drift.loc[drift["max_rel_err"].idxmax()]
    same = bool(drift["ranks_identical"].astype(bool).all())
    text = (f"Summing the same float32 gradients in {drift['algorithm'].nunique()} algorithms' "
            f"orders, the largest "
            f"relative error was {worst.max_rel_err:.1e} ({worst.algorithm}); every replica "
            f"{'ended bit-identical' if same else 'did NOT end bit-identical'}.")
    costs = _table(folder, "worked_costs", "network", "size", "ranks", "algorithm",
                   "predicted_ms")
    last = costs[(costs["network"] == costs["network"].iloc[-1])
                 & (costs["size"] == costs["size"].iloc[-1])
                 & (costs["ranks"] == costs["ranks"].max())]
    lo, hi = last.loc[last["predicted_ms"].idxmin()], last.loc[last["predicted_ms"].idxmax()]
    return text + (f" By the alpha-beta formulas (analytic, not measured), {lo['size']} on "
                   f"{lo.network} with {lo.ranks} ranks costs {lo.predicted_ms:.3g} ms by "
                   f"{lo.algorithm} and {hi.predicted_ms:.3g} ms by {hi.algorithm}.")


def cluster_setup(folder: Path) -> str:
    """Chapter 01: how many engines on how many hosts, ping-pong latency and bandwidth."""
    engines = _table(folder, "engines", "host", "device")
    p2p = _table(folder, "p2p", "size_bytes", "latency_us", "bandwidth_GBps")
    small = p2p.loc[p2p["size_bytes"].idxmin()]
    big = p2p.loc[p2p["size_bytes"].idxmax()]
    devices = ", ".join(sorted(engines["device"].astype(str).unique()))
    return (f"{len(engines)} engines on {engines['host'].nunique()} host(s), devices: "
            f"{devices}. Node-to-node ping-pong took {small.latency_us:.0f} us at "
            f"{_size(small.size_bytes)} and reached {big.bandwidth_GBps:.3g} GB/s at "
            f"{_size(big.size_bytes)}.")


def collectives(folder: Path) -> str:
    """Chapter 02: fastest and slowest all-reduce at the largest size, correctness, model fit."""
    from ddlstudy.chapters.ch02_collectives import order  # the chapter's finding, computed once

    df = _table(folder, "collectives", "algorithm", "ranks", "size_bytes", "time_p50_s", "wrong")
    df = df[df["algorithm"] != "reference"] if (df["algorithm"] != "reference").any() else df
    ranks, size = df["ranks"].max(), df["size_bytes"].max()
    t = order(df, ranks, size)  # fastest first, median over repeats
    fastest, slowest = t.iloc[0], t.iloc[-1]
    repeats = int(df["repeat"].nunique()) if "repeat" in df.columns else 1
    wrong = int(df["wrong"].sum())
    text = (f"At {_size(size)} with {ranks} ranks the fastest all-reduce "
            f"was {fastest.algorithm} ({fastest.time_p50_s * 1e3:.3g} ms, median of {repeats} "
            f"repeat(s)) and the slowest {slowest.algorithm} ({slowest.time_p50_s * 1e3:.3g} ms). "
            + ("Every result matched the float64 reference." if wrong == 0 else
               f"{wrong} results did NOT match the float64 reference."))
    try:
        fit = _table(folder, "costmodel_fit", "median_abs_rel_err")
        text += (f" The alpha-beta-gamma fit is off by {fit['median_abs_rel_err'].iloc[0]:.0%} "
                 "(median) on these measurements.")
    except MissingRecords:
        pass
    return text


def _rate(df: pd.DataFrame) -> str:
    """Cluster-equivalent images/sec when the run was time-dilated, else measured images/sec."""
    dilated = "time_dilation" in df.columns and (df["time_dilation"].fillna(1) != 1).any()
    return "images_per_sec_cluster" if dilated else "images_per_sec"


def _conditions(df: pd.DataFrame) -> str:
    """What kind of number this is: measured on one host, replayed compute, shaped links."""
    parts = []
    if "compute_mode" in df.columns and (df["compute_mode"] == "replay").any():
        parts.append(f"compute replayed from {df['replay_source'].iloc[0]}")
    net = str(df["network"].iloc[0]) if "network" in df.columns else "none"
    if net not in ("none", "nan", "loopback"):
        parts.append(f"links shaped to an emulated {net}")
    return "; ".join(parts) if parts else "measured on this host, where workers share its cores"


def ps_vs_ring(folder: Path) -> str:
    """Chapter 03 (one model): PS vs ring throughput at the most workers and their speed-ups."""
    df = _table(folder, "summary", "strategy", "workers", "model", "images_per_sec")
    rate = _rate(df)
    ips = df.groupby(["strategy", "workers"])[rate].median()
    top = int(df["workers"].max())
    model = df["model"].iloc[0]
    at_top = {s: ips[(s, top)] for s in df["strategy"].unique() if (s, top) in ips.index}
    text = (f"{model}, {top} workers ({_conditions(df)}): "
            + ", ".join(f"{s} {v:.1f} img/s" for s, v in at_top.items()) + ".")
    speedups = {s: ips[(s, top)] / ips[(s, 1)] for s in at_top if (s, 1) in ips.index}
    if speedups and top > 1:
        text += (f" Speed-up from 1 to {top} workers: "
                 + ", ".join(f"{s} {v:.2f}x" for s, v in speedups.items()) + ".")
    if "repeat" in df.columns and df["repeat"].nunique() > 1:
        text += f" Medians of {df['repeat'].nunique()} interleaved repeats."
    return text


def utilization_traffic(folder: Path) -> str:
    """Chapter 04: bytes per node per step, PS server vs ring worker, against the theory."""
    df = _table(folder, "traffic_per_step", "strategy", "workers", "worker_sent_per_step_MB")
    parts = []
    for _, r in df.sort_values("workers").iterrows():
        if r.strategy == "ps_sync" and "server_recv / model" in df.columns:
            parts.append(f"with {r.workers} workers the PS server received "
                         f"{r['server_recv / model']:.2f}x the model per step")
        elif "worker_sent / model" in df.columns:
            theory = 2 * (r.workers - 1) / r.workers
            parts.append(f"each {r.strategy} worker at {r.workers} workers sent "
                         f"{r['worker_sent / model']:.2f}x the model (ring theory "
                         f"2(N-1)/N = {theory:.2f})")
    if not parts:
        raise MissingRecords("`traffic_per_step.csv` has no per-model ratios")
    return "Bytes per node per step (counted by the strategies): " + "; ".join(parts) + "."


def network_profiles(folder: Path) -> str:
    """Chapter 05: scaling efficiency per emulated network profile at the most workers."""
    df = _table(folder, "summary", "profile", "workers", "efficiency")
    top = int(df["workers"].max())
    eff = df[df["workers"] == top].groupby("profile")["efficiency"].median().sort_values()
    return (f"At {top} workers ({_conditions(df)}), ring all-reduce scaling efficiency was "
            + ", ".join(f"{p} {v:.0%}" for p, v in eff.items())
            + ". Emulated links: bandwidth shaped and scaled, latency not emulated.")


def projection(folder: Path) -> str:
    """Chapter 06: projected (analytic model) scaling efficiency and its validation error."""
    df = _table(folder, "scaling_efficiency", "profile", "workers", "efficiency")
    top = int(df["workers"].max())
    eff = df[df["workers"] == top].groupby("profile")["efficiency"].median()
    text = (f"Projected by the step-time model (analytic, not measured): at {top} workers, "
            "scaling efficiency " + ", ".join(f"{p} {v:.0%}" for p, v in eff.items()) + ".")
    if "validation_error" in df.columns and df["validation_error"].notna().any():
        text += (f" The model's median error on held-out measured cells was "
                 f"{df['validation_error'].dropna().iloc[0]:.1%}.")
    return text


def convergence(folder: Path) -> str:
    """Chapter 08: do the synchronous strategies follow single's curve; the bracketing gap."""
    gaps = _table(folder, "gaps", "strategy", "max_abs_gap", "verdict")
    sync = gaps[gaps["strategy"] != "ps_async"]
    text = ("Largest test-accuracy gap to single (batch N x b) over epochs and seeds: "
            + ", ".join(f"{s} {v:.4f}" for s, v in
                        sync.groupby("strategy")["max_abs_gap"].max().items()) + ".")
    asy = gaps[gaps["strategy"] == "ps_async"]
    if len(asy):
        text += (f" ps_async's final accuracy against single: "
                 f"{', '.join(asy['verdict'].astype(str))}.")
    path = folder / "bracketing.csv"
    if path.exists():
        br = pd.read_csv(path)
        if len(br):
            acc = br.groupby("algorithm")["test_accuracy"].median()
            text += (" Final accuracy per all-reduce algorithm (median over seeds): "
                     + ", ".join(f"{a} {v:.4f}" for a, v in acc.items()) + ".")
    return text


def batch_size(folder: Path) -> str:
    """Chapter 09: time per epoch and accuracy at the smallest and largest batch."""
    df = _table(folder, "sweep", "model", "batch_size", "workers", "time_per_epoch_s")
    parts = []
    for (model, n), g in df.groupby(["model", "workers"]):
        med = g.groupby("batch_size")[["time_per_epoch_s", "test_accuracy"]].median()
        lo, hi = med.index.min(), med.index.max()
        acc = (f", test accuracy {med.loc[lo, 'test_accuracy']:.3f} -> "
               f"{med.loc[hi, 'test_accuracy']:.3f}"
               if med["test_accuracy"].notna().all() else "")
        parts.append(f"{model} x{n}: batch {lo} -> {hi}, time per epoch "
                     f"{med.loc[lo, 'time_per_epoch_s']:.3g} -> "
                     f"{med.loc[hi, 'time_per_epoch_s']:.3g} s{acc}")
    return ("On this host (workers share its cores): " + "; ".join(parts) + "."
            + ("" if (folder / "malik.csv").exists()
               else " Malik 2018's emulated sweep was not run."))


# verdict families as claims.csv writes them (a verdict may carry its reason after a colon)
VERDICTS = ("agrees", "differs", "inconclusive", "set by configuration", "not measured")


def verdict_word(verdict: object) -> str:
    """The verdict's family (claims.csv's verdict column holds it as is)."""
    text = str(verdict)
    return next((v for v in VERDICTS if text.startswith(v)), text)


def verdict_counts(part: pd.DataFrame) -> str:
    """'2 agrees, 3 differs, ...' over claims.csv rows, in VERDICTS order: the one way the book
    states how a paper fared (tests/test_book.py checks every page against claims.csv)."""
    counts = part["verdict"].map(verdict_word).value_counts()
    return ", ".join(f"{int(counts[v])} {v}" for v in VERDICTS if v in counts)


def claims_summary(df: pd.DataFrame) -> str:
    """One paragraph: rows per verdict over all papers, then per paper (from claims.csv)."""
    n_claims = df["claim_id"].nunique() if "claim_id" in df else len(df)
    per = "; ".join(f"{p}: {verdict_counts(df[df['paper'] == p])}"
                    for p in dict.fromkeys(df["paper"].astype(str)))
    return (f"{n_claims} claims of {df['paper'].nunique()} papers, tested as {len(df)} rows "
            f"(one per testbed or measurement): {verdict_counts(df)}. Per paper: {per}.")


def conclusions(folder: Path) -> str:
    """Chapter 99: per verdict and per paper, the rows of claims.csv (the claims engine's
    verdicts, counted; never a verdict of its own)."""
    return claims_summary(_table(folder, "claims", "paper", "verdict"))


def frameworks(folder: Path) -> str:
    """Chapter 07: the strategies by images/sec at the most workers per profile."""
    from ddlstudy.experiments.frameworks import summary_text

    return summary_text(_table(folder, "scaling", "profile", "strategy", "workers",
                               "images_per_sec_cluster", "efficiency"))


def faults(folder: Path) -> str:
    """Chapter 10: how each strategy recovered from a dead worker, and what it lost."""
    from ddlstudy.train.recovery import summary_text

    return summary_text(_table(folder, "costs", "strategy", "recovery", "time_lost_s",
                               "steps_redone"))


def summary_functions() -> dict[str, Summary]:
    """chapter -> its summary function, as the chapter registry names them (live)."""
    from ddlstudy.chapters.registry import CHAPTERS
    from ddlstudy.registry import resolve

    return {name: resolve(c.summary) for name, c in CHAPTERS.items() if c.summary}


def summarize(chapter: str, folder: Path) -> str:
    """The chapter's summary, or one sentence saying which records it lacks."""
    fn = summary_functions().get(chapter)
    if fn is None:
        tables = sorted(p.stem for p in folder.glob("*.csv"))
        return (f"No summary function for {chapter}; its records: "
                + (", ".join(f"`{t}.csv`" for t in tables) or "none") + ".")
    try:
        return fn(folder)
    except MissingRecords as err:
        return f"No summary: {err} in this run."
