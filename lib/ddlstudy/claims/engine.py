"""Every claim of the five papers beside this run's measurement, with an interval and a verdict.

Each claim is stated as its paper states it (quoted, with page/figure) and names the chapter
that measures it. The compared quantity (a ratio, a slope) gets a 95 % interval from the
repeats (ddlstudy.analysis.stats); the verdict is "agrees"/"differs" only when that interval
excludes the
no-effect value, "inconclusive" when it contains it, and "not measured" when records, repeats
or inputs are missing or NaN. Reasons are computed from the numbers, never fixed text.

Only the chapter folders the current params name are read (`chapter_folders`), never a glob, so
folders left by an earlier parameter set in the same run folder cannot mix in.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ddlstudy.analysis import stats, units
from ddlstudy.analysis.stats import Interval

Claim = dict[str, Any]
Folders = dict[str, list[str]]
COLUMNS = ["paper", "claim", "where", "chapter", "quantity", "value", "ci_low", "ci_high",
           "no_effect", "expected", "repeats", "interval", "source", "verdict", "reason"]
# Fourie 2019's accuracy gap that bracketing would have to explain (Fig 16: 7-10 %).
FOURIE_GAP = 0.07
# Malik 2018 "almost linear": scaling efficiency compared with half of linear.
HALF_LINEAR = 0.5
PROJECTION = "06_projection/scaling_efficiency.csv"
DISTRIBUTED_TF = ("tf_ps_sync", "tf_allreduce")


EMULATED_03 = "03_ps_vs_ring-emulated"


def chapter_folders(chapters: Sequence[str], models: Sequence[str],
                    emulated_models: Sequence[str] = ()) -> Folders:
    """chapter -> the folders this parameter set writes (chapter 03: one per model; its
    emulated-cluster section, one per `network.chapter03_models`, under EMULATED_03)."""
    folders = {ch: ([f"{ch}-{m}" for m in models] if ch == "03_ps_vs_ring" else [ch])
               for ch in chapters}
    if "03_ps_vs_ring" in chapters and emulated_models:
        folders[EMULATED_03] = [f"{EMULATED_03}-{m}" for m in emulated_models]
    return folders


def _read(run_dir: Path, folders: Folders, chapter: str, name: str) -> pd.DataFrame:
    """Concatenated `name`.csv of the chapter's named folders; empty when none exists."""
    frames = [pd.read_csv(run_dir / f / f"{name}.csv") for f in folders.get(chapter, [])
              if (run_dir / f / f"{name}.csv").exists()]
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _chunks(run_dir: Path, folders: Folders, chapter: str, summary: pd.DataFrame
            ) -> pd.DataFrame:
    """Timed chunks of the chapter's cells (ddlstudy.analysis.units): from the run's own runs/
    folders,
    or from results/reference/ when the chapter showed the committed reference run."""
    from ddlstudy.records import reference

    frames = []
    for folder in folders.get(chapter, []):
        root = run_dir / folder / "runs"
        if not root.exists() and "ref_git_sha" in summary:
            root = reference.reference_dir() / folder / "runs"
        frames.append(units.chunk_rates(root))
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _unit_row(paper: str, claim: str, where: str, chapter: str, quantity: str,
              est: Interval, unit: str, no_effect: float, direction: int, source: str,
              why: str = "") -> Claim:
    """A row whose interval came from `unit` (ddlstudy.analysis.units): the unit is named in
    `interval`
    and in the reason, so chunks of one run never read as independent repeats."""
    row = _row(paper, claim, where, chapter, quantity, est, no_effect, direction, source,
               "; ".join(x for x in (why, f"unit: {units.UNIT_NOTE[unit]}") if x))
    if row["interval"]:
        row["interval"] += f" over {unit}"
    return row


def _ok(df: pd.DataFrame) -> pd.DataFrame:
    """Rows without an error, each with a `repeat` (0 when the table has none)."""
    if df.empty:
        return df
    if "error" in df:
        err = df["error"]
        df = df[~(err.notna() & (err.astype(str) != ""))]
    if "cpu_bound" in df:  # the host, not the emulated link, set these cells' pace
        df = df[~df["cpu_bound"].fillna(False).astype(bool)]
    if "repeat" not in df:
        df = df.assign(repeat=0)
    return df.assign(repeat=df["repeat"].fillna(0).astype(int))


def _row(paper: str, claim: str, where: str, chapter: str, quantity: str, est: Interval | None,
         no_effect: float, direction: int, source: str = "measured", why: str = "") -> Claim:
    """One claims.csv row; verdict and reason from the interval (or `why` when not measured)."""
    expected = ("above" if direction > 0 else "below") + f" {no_effect:g}"
    base = {"paper": paper, "claim": claim, "where": where, "chapter": chapter,
            "quantity": quantity, "no_effect": no_effect, "expected": expected, "source": source}
    if est is None:
        return {**base, "value": math.nan, "ci_low": math.nan, "ci_high": math.nan,
                "repeats": 0, "interval": "", "verdict": stats.NOT_MEASURED, "reason": why}
    verdict = stats.interval_verdict(est, no_effect, direction)
    reason = stats.reason(est, no_effect, direction, quantity)
    return {**base, "value": est.value, "ci_low": est.low, "ci_high": est.high, "repeats": est.n,
            "interval": f"{est.coverage:.0%} {est.method}" if est.measured else "",
            "verdict": verdict, "reason": reason + (f"; {why}" if why else "")}


def _missing(chapter: str, folders: Folders, needs: str = "") -> str:
    """Why a claim is not measured, naming the chapter and what it lacks."""
    if chapter not in folders:
        return f"chapter {chapter} is not in this run's report.chapters"
    return (f"chapter {chapter} ({', '.join(folders[chapter])}) has no usable records"
            + (f": needs {needs}" if needs else ""))


def _by_repeat(df: pd.DataFrame, column: str, **where: Any) -> pd.Series:
    """`column` of the rows matching `where`, one value per repeat (median if several)."""
    sel = df
    for key, val in where.items():
        sel = sel[sel[key] == val]
    return sel.groupby("repeat")[column].median()


def _paired(a: pd.Series, b: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Values of two per-repeat series on the repeats both have (interleaved pairs)."""
    common = a.index.intersection(b.index)
    return a.loc[common].to_numpy(float), b.loc[common].to_numpy(float)


def _speedup(df: pd.DataFrame, strategy: str, top: int, **where: Any) -> pd.Series:
    """Per repeat: images/sec at `top` workers over images/sec at 1 worker."""
    hi = _by_repeat(df, "images_per_sec", strategy=strategy, workers=top, **where)
    lo = _by_repeat(df, "images_per_sec", strategy=strategy, workers=1, **where)
    common = hi.index.intersection(lo.index)
    return hi.loc[common] / lo.loc[common]


# ----------------------------------------------------------------------------- Shi 2019
SHI = "Shi 2019"


def shi_scaling(run_dir: Path, folders: Folders) -> list[Claim]:
    claim = ("\"as we increase the number of Worker nodes in the cluster under Parameter Server "
             "architecture, the speed-up of training process tends to level off ... [for Ring "
             "All-Reduce] the speed-up of the training process is roughly proportional to the "
             "number of nodes\"")
    where = "Ch. 5; Figs 4.3, 4.4"
    rows = _shi_scaling_rows(run_dir, folders, claim, where, "03_ps_vs_ring",
                             "measured on one host (workers share its cores and loopback)")
    if EMULATED_03 in folders:
        rows += _shi_scaling_rows(run_dir, folders, claim, where, EMULATED_03,
                                  "emulated (shaped links, replayed compute)")
    return rows


def _shi_scaling_rows(run_dir: Path, folders: Folders, claim: str, where: str, ch: str,
                      source: str) -> list[Claim]:
    """One row per model of chapter `ch`: ring speed-up over PS speed-up, over interleaved
    repeats (paired) or, for cells run once, their timed chunks (ddlstudy.analysis.units)."""
    summary = _ok(_read(run_dir, folders, ch, "summary"))
    need = "ps_sync and allreduce at 1 and >1 workers"
    if summary.empty or not {"images_per_sec", "strategy", "workers"} <= set(summary):
        return [_row(SHI, claim, where, ch, "ring speed-up / PS speed-up", None, 1, 1, source,
                     why=_missing(ch, folders, need))]
    chunks = _chunks(run_dir, folders, ch, summary)
    rows = []
    for model, part in summary.groupby("model"):
        top = int(part["workers"].max())
        quantity = f"{model}: ring speed-up / PS speed-up at {top} workers"
        est, unit = units.speedup_ratio(part, chunks, {"strategy": "allreduce", "model": model},
                                        {"strategy": "ps_sync", "model": model}, top)
        if top < 2 or not math.isfinite(est.value):
            rows.append(_row(SHI, claim, where, ch, quantity, None, 1, 1, source,
                             why=_missing(ch, folders, need)))
            continue
        ring, ps = _speedup(part, "allreduce", top), _speedup(part, "ps_sync", top)
        rows.append(_unit_row(SHI, claim, where, ch, quantity, est, unit, 1, 1, source,
                              why=f"ring speed-up median {ring.median():.2f}, PS "
                                  f"{ps.median():.2f} (of the cells' summaries)"))
    return rows


def shi_traffic(run_dir: Path, folders: Folders) -> list[Claim]:
    claim_ps = ("\"the network traffic between Worker nodes and Parameter Server node is "
                "proportional the number of Worker nodes in the cluster\"")
    claim_ring = ("\"the communication overhead between Worker nodes in Ring All-Reduce "
                  "architecture is roughly the same\" as workers are added")
    where, ch = "Ch. 5; Figs 4.15, 4.18, 5.1", "04_utilization_traffic"
    summary = _ok(_read(run_dir, folders, ch, "summary"))
    q_ps = "slope of PS server bytes received per step (in models) vs workers"
    q_ring = ("growth of each ring worker's bytes per step / growth of the PS server's, "
              "lowest to highest worker count (1: the ring grows like the PS)")
    cols = {"server_bytes_recv_per_step", "bytes_sent_per_step", "params", "strategy"}
    if summary.empty or not cols <= set(summary):
        why = _missing(ch, folders, "ps_sync and allreduce at two or more worker counts")
        return [_row(SHI, claim_ps, where, ch, q_ps, None, 0, 1, why=why),
                _row(SHI, claim_ring, where, ch, q_ring, None, 1, -1, why=why)]
    model_bytes = float(summary["params"].iloc[0]) * 4
    ps = summary[summary["strategy"] == "ps_sync"]
    ring = summary[summary["strategy"] == "allreduce"]
    counts = sorted(n for n in set(ps["workers"]) & set(ring["workers"]) if n > 1)
    why = ("" if len(counts) >= 2 else
           _missing(ch, folders, f"two or more worker counts with both PS and ring (has "
                                 f"{counts or 'none'})"))
    slope = (stats.slope_ci(ps["workers"], ps["server_bytes_recv_per_step"] / model_bytes)
             if len(counts) >= 2 else None)
    growth = None
    if len(counts) >= 2:
        lo, hi = counts[0], counts[-1]
        ring_g = (_by_repeat(ring, "bytes_sent_per_step", workers=hi)
                  / _by_repeat(ring, "bytes_sent_per_step", workers=lo)).dropna()
        ps_g = (_by_repeat(ps, "server_bytes_recv_per_step", workers=hi)
                / _by_repeat(ps, "server_bytes_recv_per_step", workers=lo)).dropna()
        growth = stats.ratio_ci(*_paired(ring_g, ps_g))
        q_ring = q_ring.replace("lowest to highest worker count", f"{lo} to {hi} workers")
    source = "measured (bytes counted from the tensors each strategy sent)"
    return [_row(SHI, claim_ps, where, ch, q_ps, slope, 0, 1, source, why),
            _row(SHI, claim_ring, where, ch, q_ring, growth, 1, -1, source, why)]


# ----------------------------------------------------------------------------- Fourie 2019
FOURIE = "Fourie 2019"


def fourie_ring_vs_tree(run_dir: Path, folders: Folders) -> list[Claim]:
    claim = ("\"'allreduce' tree/butterfly (green) operation scales worse than the 'allreduce "
             "ring' (blue) and the 'allreduce ring async' (orange) operations\"")
    where, ch = "Sec. 2 Results, runtime vs message size and processes", "02_collectives"
    bench = _ok(_read(run_dir, folders, ch, "collectives"))
    quantity = "time of the faster of tree/recursive doubling / time of ring (same repeat)"
    if bench.empty or "ring" not in set(bench.get("algorithm", [])):
        return [_row(FOURIE, claim, where, ch, quantity, None, 1, 1,
                     why=_missing(ch, folders, "ring and tree or recursive_doubling"))]
    p = int(bench["ranks"].max())
    at = bench[bench["ranks"] == p]
    size = int(at["size_bytes"].max())
    at = at[at["size_bytes"] == size]
    logs = [a for a in ("tree", "recursive_doubling") if a in set(at["algorithm"])]
    quantity = (f"{p} ranks, {size} B: time of the faster of {'/'.join(logs) or 'tree'} / time "
                "of ring (same repeat)")
    if not logs:
        return [_row(FOURIE, claim, where, ch, quantity, None, 1, 1,
                     why=_missing(ch, folders, "tree or recursive_doubling"))]
    ring = _by_repeat(at, "time_p50_s", algorithm="ring")
    best_log = pd.concat([_by_repeat(at, "time_p50_s", algorithm=a) for a in logs],
                         axis=1).min(axis=1)
    return [_row(FOURIE, claim, where, ch, quantity, stats.ratio_ci(*_paired(best_log, ring)),
                 1, 1)]


def fourie_bracketing(run_dir: Path, folders: Folders) -> list[Claim]:
    claim = ("\"the upperbound for accuracy of the ring-based algorithms was consistently 7-10% "
             "lower than that of the tree/butterfly-based algorithm ... possibly caused by "
             "aforementioned 'bracketing' and rounding errors\"")
    where = "Sec. 2 Results, Fig 16"
    return [_bracketing_accuracy(run_dir, folders, claim, where),
            _bracketing_drift(run_dir, folders, claim, where)]


RING_BASED = ("ring", "ring_pipelined")
TREE_BASED = ("tree", "recursive_doubling")  # recursive doubling is the butterfly


def _bracketing_accuracy(run_dir: Path, folders: Folders, claim: str, where: str) -> Claim:
    """Chapter 08: best ring-based minus best tree/butterfly final accuracy, same seed, against
    the paper's -7 % (the gap is 'below -0.07' if the paper holds here)."""
    ch = "08_convergence"
    acc = _ok(_read(run_dir, folders, ch, "bracketing"))
    quantity = ("best ring-based minus best tree/butterfly-based final test accuracy, same seed "
                f"(vs -{FOURIE_GAP:g}: the paper's gap)")
    have = set(acc["algorithm"]) if "algorithm" in acc else set()
    rings, trees = sorted(have & set(RING_BASED)), sorted(have & set(TREE_BASED))
    if acc.empty or "test_accuracy" not in acc or not rings or not trees:
        return _row(FOURIE, claim, where, ch, quantity, None, -FOURIE_GAP, -1,
                    why=_missing(ch, folders, "bracketing.csv with a ring-based and a "
                                              "tree/butterfly-based algorithm"))
    seeds = acc.groupby(["seed", "algorithm"])["test_accuracy"].median().unstack()
    ring, tree = seeds[rings].max(axis=1), seeds[trees].max(axis=1)
    first = acc.iloc[0]
    setup = ", ".join(f"{k} {first[k]}" for k in ("dataset", "dtype", "workers", "epoch")
                      if k in acc)
    quantity = (f"max({'/'.join(rings)}) - max({'/'.join(trees)}) final test accuracy, same seed"
                + (f" ({setup})" if setup else ""))
    why = (f"median accuracy ring-based {ring.median():.4f}, tree/butterfly-based "
           f"{tree.median():.4f} over {len(seeds)} seed(s)")
    drift = _read(run_dir, folders, "00_background", "bracketing_drift")
    if not drift.empty and "max_rel_err" in drift:
        why += (f"; chapter 00's largest float32 summation-order error is "
                f"{drift['max_rel_err'].max():.1e} of sum|x|")
    return _row(FOURIE, claim, where, ch, quantity, stats.diff_ci(*_paired(ring, tree)),
                -FOURIE_GAP, -1, "measured (real training, one host, float32)", why)


def _bracketing_drift(run_dir: Path, folders: Folders, claim: str, where: str) -> Claim:
    """Chapter 00: how large float32 summation-order errors are next to the 7 % gap."""
    ch = "00_background"
    drift = _read(run_dir, folders, ch, "bracketing_drift")
    quantity = ("largest float32 all-reduce error relative to sum|x| (any algorithm) / the 7 % "
                "accuracy gap it would have to explain")
    if drift.empty or "max_rel_err" not in drift:
        return _row(FOURIE, claim, where, ch, quantity, None, 1, 1,
                    why=_missing(ch, folders, "bracketing_drift.csv"))
    trials = drift.assign(trial=drift.get("trial", 0)).groupby("trial")
    worst = trials["max_rel_err"].max() / FOURIE_GAP
    identical = bool(drift["ranks_identical"].astype(str).str.lower().eq("true").all())
    why = (f"ranks bit-identical in every trial: {identical}"
           + ("" if identical else " (replicas can drift apart: a mechanism bracketing alone "
                                   "does not rule out)"))
    return _row(FOURIE, claim, where, ch, quantity, stats.median_ci(worst), 1, 1,
                "measured (in-process ranks, seeded data, one trial per repeat)", why)


# ----------------------------------------------------------------------------- Malik 2018
MALIK = "Malik 2018"


def _frameworks(run_dir: Path, folders: Folders) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """Chapter 07's summary and timed chunks for its claims, and where they come from: this
    run's records when it ran the chapter ("" label), else the committed `make reference` cells
    (results/reference/07_frameworks) labelled "reference run: <host, dates, git sha>; ", never
    as measured now (as chapters 03 and 05 fall back to them)."""
    from ddlstudy.records import reference

    ch = "07_frameworks"
    if ch in folders:
        summary = _ok(_read(run_dir, folders, ch, "summary"))
        chunks = _chunks(run_dir, folders, ch, summary) if not summary.empty else pd.DataFrame()
        return summary, chunks, ""
    cells = _ok(reference.load(ch))
    if cells.empty:
        return cells, pd.DataFrame(), ""
    runs = reference.reference_dir() / ch / "runs"
    return cells, units.chunk_rates(runs), f"{reference.label(cells)}; "


def malik_horovod(run_dir: Path, folders: Folders) -> list[Claim]:
    """Chapter 07's Horovod cells: scaling efficiency at the top worker count per profile,
    against "almost linear" read as above frameworks.compare.NEAR_LINEAR (90 %)."""
    from ddlstudy.experiments import frameworks as compare

    claim = ("Horovod (AlexNet, GoogLeNet, ResNet50): \"Throughput performance and latency "
             "performance is almost linear\"")
    where, ch = "slides 'AlexNet/GoogleNet/ResNet50 using Horovod'", "07_frameworks"
    summary, chunks, ref = _frameworks(run_dir, folders)
    found = compare.efficiency_estimates(summary, chunks)
    if not found:
        quantity = (f"Horovod scaling efficiency at the top worker count (above "
                    f"{compare.NEAR_LINEAR:g}: almost linear)")
        return [_row(MALIK, claim, where, ch, quantity, None, compare.NEAR_LINEAR, 1,
                     why=_missing(ch, folders, "horovod at 1 and >= 2 workers "
                                               "(frameworks.strategies, frameworks.workers)"))]
    return [_unit_row(MALIK, claim, where, ch,
                      f"Horovod scaling efficiency at {f['top']} workers on {f['profile']} "
                      f"links (above {compare.NEAR_LINEAR:g}: almost linear)", f["est"],
                      f["unit"], compare.NEAR_LINEAR, 1, ref + compare.source(f["profile"]))
            for f in found]


# "Same performance" read as: the largest batch's images/sec within this factor of the smallest's.
SAME_WITHIN = 1.1


def malik_batch(run_dir: Path, folders: Folders) -> list[Claim]:
    """Chapter 09's emulated sweep (malik.csv: per timed chunk, cluster-equivalent images/sec
    per model and batch): largest / smallest batch, interval over chunks (one run per cell)."""
    where, ch = "slides 'AlexNet/GoogleNet/ResNet50 using Horovod' (batch 64, 128, 256, 512)", \
        "09_batch_size"
    claims = {"alexnet": ("AlexNet with Horovod: \"larger batch size shows the best result\"",
                          1.0, 1),
              "googlenet": ("GoogLeNet with Horovod: \"All batch size shows same performance\"",
                            SAME_WITHIN, -1),
              "resnet50": ("ResNet50 with Horovod: \"All batch size shows same performance\"",
                           SAME_WITHIN, -1)}
    chunks = _ok(_read(run_dir, folders, ch, "malik"))
    source = "emulated (shaped links, replayed compute)"
    rows = []
    for model, (claim, no_effect, direction) in claims.items():
        quantity = (f"{model}: cluster-equivalent images/sec at the largest / smallest batch"
                    + ("" if direction > 0 else f" (same: below {SAME_WITHIN:g})"))
        part = chunks[chunks["model"] == model] if "model" in chunks else chunks
        if part.empty or part["batch_size"].nunique() < 2:
            rows.append(_row(MALIK, claim, where, ch, quantity, None, no_effect, direction,
                             source, why=_missing(ch, folders, f"malik.csv with {model} at two "
                                                               "batch sizes (emulated sweep: "
                                                               "batch_sweep.malik_models, root)")))
            continue
        lo, hi = int(part["batch_size"].min()), int(part["batch_size"].max())
        rate = "images_per_sec_cluster"
        est = stats.ratio_ci(part.loc[part["batch_size"] == hi, rate],
                             part.loc[part["batch_size"] == lo, rate], paired=False)
        rows.append(_unit_row(MALIK, claim, where, ch,
                              quantity.replace("the largest / smallest batch",
                                               f"batch {hi} / batch {lo}"),
                              est, units.CHUNKS, no_effect, direction, source))
    return rows


def malik_ps_bottleneck(run_dir: Path, folders: Folders) -> list[Claim]:
    claim = ("Parameter Server TensorFlow: \"The scalability in poor - AlexNet has large number "
             "of parameters - Communication is the main bottleneck here\"")
    where = "slide 'Using Parameter Server Tensorflow APIs'"
    rows = [_malik_ps_row(run_dir, folders, claim, where, "03_ps_vs_ring",
                          "measured on one host (workers share its cores and loopback)")]
    if EMULATED_03 in folders:
        rows.append(_malik_ps_row(run_dir, folders, claim, where, EMULATED_03,
                                  "emulated (shaped links, replayed compute)"))
    return rows


def _malik_ps_row(run_dir: Path, folders: Folders, claim: str, where: str, ch: str,
                  source: str) -> Claim:
    """PS speed-up of the lightest model over the heaviest's, from chapter `ch`'s cells."""
    summary = _ok(_read(run_dir, folders, ch, "summary"))
    quantity = "PS speed-up of the lightest model / of the heaviest (by parameters)"
    if summary.empty or "params" not in summary or summary["model"].nunique() < 2:
        return _row(MALIK, claim, where, ch, quantity, None, 1, 1, source,
                    why=_missing(ch, folders, "two or more models"))
    ps = summary[summary["strategy"] == "ps_sync"]
    sizes = ps.groupby("model")["params"].first().sort_values()
    top = int(ps["workers"].max()) if len(ps) else 0
    if len(sizes) < 2 or top < 2:
        return _row(MALIK, claim, where, ch, quantity, None, 1, 1, source,
                    why=_missing(ch, folders, "ps_sync at 1 and >1 workers for two models"))
    light, heavy = sizes.index[0], sizes.index[-1]
    quantity = (f"PS speed-up at {top} workers of {light} ({sizes[light] / 1e6:.1f} M params) / "
                f"of {heavy} ({sizes[heavy] / 1e6:.1f} M)")
    est, unit = units.speedup_ratio(ps, _chunks(run_dir, folders, ch, summary),
                                    {"strategy": "ps_sync", "model": light},
                                    {"strategy": "ps_sync", "model": heavy}, top)
    if not math.isfinite(est.value):
        return _row(MALIK, claim, where, ch, quantity, None, 1, 1, source,
                    why=_missing(ch, folders, "ps_sync at 1 and >1 workers for both models"))
    return _unit_row(MALIK, claim, where, ch, quantity, est, unit, 1, 1, source)


# ----------------------------------------------------------------------------- Pani
PANI = "Pani"


def pani_coordination(run_dir: Path, folders: Folders) -> list[Claim]:
    claim = ("\"in the case of small architecture and dataset, the ratio of data transfer to "
             "computation is high as less computation is performed per iteration\"")
    where, ch = "Sec. VIII Summary", "03_ps_vs_ring"
    summary = _ok(_read(run_dir, folders, ch, "summary"))
    quantity = "ring comm/compute of the least-compute model / of the most-compute model"
    if (summary.empty or not {"comm_s", "compute_s"} <= set(summary)
            or summary["model"].nunique() < 2):
        return [_row(PANI, claim, where, ch, quantity, None, 1, 1,
                     why=_missing(ch, folders, "two or more models in training.models"))]
    ring = summary[(summary["strategy"] == "allreduce") & (summary["workers"] > 1)]
    if ring.empty:
        return [_row(PANI, claim, where, ch, quantity, None, 1, 1,
                     why=_missing(ch, folders, "allreduce at more than 1 worker"))]
    top = int(ring["workers"].max())
    ring = ring[ring["workers"] == top]
    order = ring.groupby("model")["compute_s"].median().sort_values()
    small, big = order.index[0], order.index[-1]
    ratio = {m: _by_repeat(ring, "comm_s", model=m) / _by_repeat(ring, "compute_s", model=m)
             for m in (small, big)}
    quantity = (f"ring comm/compute at {top} workers: {small} (least compute) / {big} (most), "
                "same repeat")
    return [_row(PANI, claim, where, ch, quantity,
                 stats.ratio_ci(*_paired(ratio[small], ratio[big])), 1, 1)]


def pani_one_gpu_fastest(run_dir: Path, folders: Folders) -> list[Claim]:
    claim = ("\"The single GPU trains faster as compared to any other combination of GPUs. Also "
             "the increasing order of training time are two, four, and eight GPUs\"")
    where, ch = "Sec. V, Figs 2-3 (MNIST, shallow CNN)", "03_ps_vs_ring"
    summary = _ok(_read(run_dir, folders, ch, "summary"))
    quantity = "ring speed-up over 1 worker at the top worker count (below 1: one is fastest)"
    if summary.empty or "images_per_sec" not in summary:
        return [_row(PANI, claim, where, ch, quantity, None, 1, -1,
                     why=_missing(ch, folders, "allreduce at 1 and >1 workers"))]
    rows = []
    for model, part in summary.groupby("model"):
        top = int(part["workers"].max())
        sp = _speedup(part, "allreduce", top)
        q = f"{model}: ring speed-up at {top} workers over 1 (below 1: one worker is fastest)"
        rows.append(_row(PANI, claim, where, ch, q, stats.median_ci(sp) if top > 1 else None,
                         1, -1, why="" if top > 1 else _missing(ch, folders, ">1 workers")))
    return rows


def pani_batch_and_device(run_dir: Path, folders: Folders) -> list[Claim]:
    loss = ("\"with the increase in batch size, the average loss increased across the board\"")
    error = ("\"The classification error ... decreases with any increase in batch size\"")
    device = ("\"the average loss remained almost the same for different sets of CPU and GPU "
              "combinations\"; run time differs widely across CPU and GPU generations")
    where = "Sec. V, Figs 1-3 (shallow CNN, MNIST, batch 32-8192)"
    return [_pani_batch_row(run_dir, folders, loss, where, "test_loss", "test loss", 1),
            _pani_batch_row(run_dir, folders, error, where, "test_error", "test error", -1),
            _row(PANI, device, "Sec. V, Figs 7-10", "not measured yet",
                 "loss on GPU / loss on CPU, same model and batch", None, 1, 1,
                 why="not measured yet: no chapter trains the same model on CPU and GPU")]


def _pani_batch_row(run_dir: Path, folders: Folders, claim: str, where: str, column: str,
                    what: str, direction: int) -> Claim:
    """Chapter 09 (sweep.csv, trained cells): `what` at the largest / smallest batch, 1 worker,
    paired by seed; the learning-rate rule the sweep used is named in the quantity."""
    ch = "09_batch_size"
    sweep = _ok(_read(run_dir, folders, ch, "sweep"))
    quantity = f"{what} at the largest / smallest batch size (1 worker, same seed)"
    if not sweep.empty and "test_accuracy" in sweep:
        sweep = sweep[sweep["test_accuracy"].notna()].assign(
            test_error=lambda d: 1 - d["test_accuracy"])
    if sweep.empty or column not in sweep:
        return _row(PANI, claim, where, ch, quantity, None, 1, direction,
                    why=_missing(ch, folders, "sweep.csv with trained (accuracy) cells"))
    one = sweep[sweep["workers"] == sweep["workers"].min()]
    model = "shallow_cnn" if "shallow_cnn" in set(one["model"]) else str(one["model"].iloc[0])
    one = one[one["model"] == model]
    lo, hi = int(one["batch_size"].min()), int(one["batch_size"].max())
    if lo == hi:
        return _row(PANI, claim, where, ch, quantity, None, 1, direction,
                    why=_missing(ch, folders, "two or more batch sizes"))
    a = one[one["batch_size"] == hi].groupby("seed")[column].median()
    b = one[one["batch_size"] == lo].groupby("seed")[column].median()
    rule = str(one["lr_rule"].iloc[0]) if "lr_rule" in one else "lr as configured"
    quantity = (f"{model}: {what} at batch {hi} / batch {lo}, {int(one['workers'].iloc[0])} "
                f"worker, same seed ({rule})")
    return _row(PANI, claim, where, ch, quantity, stats.ratio_ci(*_paired(a, b)), 1, direction,
                "measured (one host, CPU)")


# ----------------------------------------------------------------------------- Wang (NCHC)
WANG = "Wang (NCHC)"


def wang_netpipe(run_dir: Path, folders: Folders) -> list[Claim]:
    claim = ("NetPIPE node-to-node bandwidth rises with message size; \"the InfiniBand network "
             "... shows an average of 14 times faster than 10 GbE while the message size is "
             "1000 Kbytes\"")
    where, ch = "Sec. IV, Fig 2", "01_cluster_setup"
    p2p = _ok(_read(run_dir, folders, ch, "p2p"))
    quantity = "point-to-point bandwidth at the largest / smallest message (per peer and repeat)"
    ib_vs_10g = _row(WANG, claim, where, "not measured yet",
                     "InfiniBand / 10GbE bandwidth at 1000 KB", None, 1, 1,
                     why="not measured yet: chapter 01 measures one link type (this host's)")
    if p2p.empty or "bandwidth_gbps" not in p2p:
        return [_row(WANG, claim, where, ch, quantity, None, 1, 1,
                     why=_missing(ch, folders, "p2p.csv")), ib_vs_10g]
    lo, hi = p2p["size_bytes"].min(), p2p["size_bytes"].max()
    keys = [k for k in ("peer", "repeat") if k in p2p]
    big = p2p[p2p["size_bytes"] == hi].groupby(keys)["bandwidth_gbps"].median()
    small = p2p[p2p["size_bytes"] == lo].groupby(keys)["bandwidth_gbps"].median()
    quantity = f"point-to-point bandwidth at {hi} B / at {lo} B (per peer and repeat)"
    return [_row(WANG, claim, where, ch, quantity, stats.ratio_ci(*_paired(big, small)), 1, 1),
            ib_vs_10g]


def wang_horovod_vs_tf(run_dir: Path, folders: Folders) -> list[Claim]:
    """Chapter 07: Horovod / TF parameter servers images/sec at the most workers both ran,
    per profile (the paper: 1.17, 2 nodes, ResNet-50); agrees when the interval is above 1."""
    from ddlstudy.experiments import frameworks as compare

    claim = ("ResNet-50, 2 nodes, batch 128/256: \"the training performance of Horovod is 17% "
             "faster than Distributed TensorFlow\"")
    where, ch = "Sec. IV, Fig 4", "07_frameworks"
    summary, chunks, ref = _frameworks(run_dir, folders)
    found = compare.horovod_vs_tf(summary, chunks)
    if not found:
        quantity = (f"Horovod images/sec / Distributed TensorFlow (parameter servers) "
                    f"images/sec, same workers (paper: {compare.WANG_RATIO:g})")
        return [_row(WANG, claim, where, ch, quantity, None, 1, 1,
                     why=_missing(ch, folders, "horovod and tf_ps_sync (or tf_ps_async) at "
                                               "the same worker count in frameworks.strategies"))]
    return [_unit_row(WANG, claim, where, ch,
                      f"Horovod / {f['tf']} images/sec at {f['top']} workers on {f['profile']} "
                      f"links (paper: {compare.WANG_RATIO:g})", f["est"], f["unit"], 1, 1,
                      ref + compare.source(f["profile"]))
            for f in found]


def wang_ib_vs_10gbe(run_dir: Path, folders: Folders) -> list[Claim]:
    claim = ("\"With 64 GPUs, we achieved 89% scaling efficiency ... over the InfiniBand network, "
             "but 65% scaling efficiency over 10b GbE\" (ResNet-50)")
    where = "Sec. IV, Fig 5"
    rows = [_emulated_profiles(run_dir, folders, claim, where)]
    rows.append(_projected_profiles(run_dir, folders, claim, where))
    return rows


def _emulated_profiles(run_dir: Path, folders: Folders, claim: str, where: str) -> Claim:
    ch = "05_network_profiles"
    summary = _ok(_read(run_dir, folders, ch, "summary"))
    quantity = "scaling efficiency on IB-EDR-like / on 10GbE-like links at the top worker count"
    need = "IB-EDR and 10GbE profiles at 1 and >1 workers"
    if summary.empty or "profile" not in summary or not {"IB-EDR", "10GbE"} <= set(
            summary["profile"]):
        return _row(WANG, claim, where, ch, quantity, None, 1, 1,
                    why=_missing(ch, folders, need))
    top = int(summary["workers"].max())
    quantity = (f"scaling efficiency at {top} workers, IB-EDR-like / 10GbE-like links "
                "(emulated links, compute replayed)")
    source = "emulated (shaped links, replayed compute)"
    part = summary.assign(network=summary["profile"])
    est, unit = units.speedup_ratio(part, _chunks(run_dir, folders, ch, summary),
                                    {"network": "IB-EDR"}, {"network": "10GbE"}, top)
    if top < 2 or not math.isfinite(est.value):
        return _row(WANG, claim, where, ch, quantity, None, 1, 1, source,
                    why=_missing(ch, folders, need))
    return _unit_row(WANG, claim, where, ch, quantity, est, unit, 1, 1, source)


def _projected_profiles(run_dir: Path, folders: Folders, claim: str, where: str) -> Claim:
    """Engineer M's step-time model at 64 workers, if chapter 06 wrote it (else not measured)."""
    ch = "06_projection"
    quantity = "projected scaling efficiency at 64 workers, IB-EDR / 10GbE"
    path = run_dir / PROJECTION
    if ch not in folders:
        return _row(WANG, claim, where, ch, quantity, None, 1, 1, "projected",
                    why=f"not measured: chapter {ch} is not in this run's report.chapters")
    if not path.exists():
        return _row(WANG, claim, where, ch, quantity, None, 1, 1, "projected",
                    why=f"not measured: {PROJECTION} not in this run")
    proj = pd.read_csv(path)
    at = proj[proj["workers"] == 64].set_index("profile") if "workers" in proj else proj
    if not {"IB-EDR", "10GbE"} <= set(at.index):
        return _row(WANG, claim, where, ch, quantity, None, 1, 1, "projected",
                    why=f"not measured: {PROJECTION} has no IB-EDR and 10GbE rows at 64 workers")
    ib, ge = at.loc["IB-EDR"], at.loc["10GbE"]
    err = float(max(ib["validation_error"], ge["validation_error"]))
    value = float(ib["efficiency"]) / float(ge["efficiency"])
    cells = int(min(ib["n_cells"], ge["n_cells"]))
    est = (Interval(value, value * (1 - err) / (1 + err), value * (1 + err) / (1 - err), cells,
                    f"interval from the model's validation error over {cells} cells", math.nan)
           if 0 <= err < 1 and all(map(math.isfinite, (value, err))) else None)
    label = f"projected (model validated to {err:.0%} on {cells} cells)"
    return _row(WANG, claim, where, ch, quantity + f": IB {float(ib['efficiency']):.0%}, 10GbE "
                f"{float(ge['efficiency']):.0%}", est, 1, 1, label,
                "" if est else f"validation error {err} unusable")


CLAIMS: list[Callable[[Path, Folders], list[Claim]]] = [
    shi_scaling, shi_traffic, fourie_ring_vs_tree, fourie_bracketing, malik_horovod,
    malik_batch, malik_ps_bottleneck, pani_coordination, pani_one_gpu_fastest,
    pani_batch_and_device, wang_netpipe, wang_horovod_vs_tf, wang_ib_vs_10gbe]


def claims_table(run_dir: str | Path, folders: Folders | None = None) -> pd.DataFrame:
    """Every claim's row; `folders` from `chapter_folders` (default: the run's own meta.json)."""
    run = Path(run_dir)
    if folders is None:
        folders = folders_from_meta(run)
    rows = [row for claim in CLAIMS for row in claim(run, folders)]
    return pd.DataFrame(rows, columns=COLUMNS)


def folders_from_meta(run: Path) -> Folders:
    """The folders the run's recorded params name (meta.json at the run root); none if absent."""
    meta = run / "meta.json"
    if not meta.exists():
        return {}
    from ddlstudy.records.store import read_meta

    params = read_meta(run).get("params", {})
    return chapter_folders(params.get("report", {}).get("chapters", []),
                           params.get("training", {}).get("models", []),
                           params.get("network", {}).get("chapter03_models", []))


# ----------------------------------------------------------------------------- CLI
DECIDED = (stats.AGREES, stats.DIFFERS)
KEY = ["paper", "chapter", "source", "quantity"]


def _claims_csv(path: str | Path) -> pd.DataFrame:
    """A run's claims: RUN/99_conclusions/claims.csv, or a claims.csv named directly."""
    p = Path(path)
    csv = p / "99_conclusions" / "claims.csv" if p.is_dir() else p
    if not csv.exists():
        raise FileNotFoundError(f"{csv} not found: give a run folder that ran 99_conclusions "
                                "(python -m ddlstudy.report ... --out DIR) or a claims.csv")
    df = pd.read_csv(csv)
    missing = {"verdict", *KEY} - set(df)
    if missing:
        raise ValueError(f"{csv} lacks column(s) {', '.join(sorted(missing))}: not a claims.csv "
                         "written by ddlstudy.claims.engine")
    return df


def _keyed(df: pd.DataFrame) -> pd.DataFrame:
    """Claims keyed by paper, chapter, source and quantity with every number masked (a
    quantity or label may carry measured figures, e.g. a projection's efficiencies), plus the
    occurrence within that key."""
    import re

    key = df[KEY].astype(str).apply(lambda col: col.map(
        lambda s: re.sub(r"\d+(\.\d+)?", "#", s)))
    key["k"] = key.groupby(KEY).cumcount()
    return df.assign(key=key.apply(lambda r: " | ".join(map(str, r)), axis=1))


def compare(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Per claim both runs' verdicts and `status`: same, conflict (both agrees/differs and not
    equal), undecided (one or both inconclusive or not measured) or only-in-one-run."""
    ka, kb = _keyed(a), _keyed(b)
    cols = ["key", "paper", "quantity", "verdict"]
    both = ka[cols].merge(kb[cols], on="key", how="outer", suffixes=("_a", "_b"))
    for col in ("paper", "quantity"):  # as run A words it, else as run B
        both[col] = both[f"{col}_a"].fillna(both[f"{col}_b"])

    def status(r: pd.Series) -> str:
        va, vb = r["verdict_a"], r["verdict_b"]
        if pd.isna(va) or pd.isna(vb):
            return "only in run " + ("B" if pd.isna(va) else "A")
        if va in DECIDED and vb in DECIDED:
            return "same" if va == vb else "CONFLICT"
        return "same" if va == vb else "undecided in one"
    both["status"] = both.apply(status, axis=1)
    return both[["paper", "quantity", "verdict_a", "verdict_b", "status"]]


def _print_compare(table: pd.DataFrame, a: str, b: str) -> int:
    """Print the comparison; 1 when a decided verdict of one run contradicts the other's."""
    width = 70
    for r in table.itertuples():
        q = r.quantity if len(r.quantity) <= width else r.quantity[:width - 3] + "..."
        print(f"{r.paper:<12} {q:<{width}}  {r.verdict_a!s:<13} {r.verdict_b!s:<13} {r.status}")
    bad = table[table["status"] == "CONFLICT"]
    decided = int((table["verdict_a"].isin(DECIDED) & table["verdict_b"].isin(DECIDED)).sum())
    print(f"A = {a}, B = {b}: {len(table)} claims, {decided} decided in both, "
          f"{len(bad)} conflicting" + (": " + "; ".join(f"{r.paper}: {r.quantity}"
                                                          for r in bad.itertuples())
                                       if len(bad) else ""))
    return 1 if len(bad) else 0


def main(argv: list[str] | None = None) -> int:
    """`python -m ddlstudy.conclusions table RUN` | `compare RUN_A RUN_B`."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m ddlstudy.conclusions",
                                     description="Chapter 99's claims from a run's records, "
                                     "or two runs' verdicts side by side.")
    sub = parser.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("table", help="every claim's verdict from a run folder's records")
    t.add_argument("run", help="a run folder (python -m ddlstudy.report ... --out DIR)")
    c = sub.add_parser("compare", help="both runs' verdicts per claim; exit 1 when a decided "
                       "(agrees/differs) verdict of one run contradicts the other's")
    c.add_argument("run_a")
    c.add_argument("run_b")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "table":
            run = Path(args.run)
            if not (run / "meta.json").exists():
                raise FileNotFoundError(f"{run}/meta.json not found: give a run folder "
                                        "written by python -m ddlstudy.report")
            table = claims_table(run)
            with pd.option_context("display.width", 200, "display.max_colwidth", 80):
                print(table[["paper", "chapter", "quantity", "value", "ci_low", "ci_high",
                             "repeats", "verdict"]].to_string(index=False))
            return 0
        return _print_compare(compare(_claims_csv(args.run_a), _claims_csv(args.run_b)),
                              args.run_a, args.run_b)
    except (FileNotFoundError, ValueError, pd.errors.ParserError,
            pd.errors.EmptyDataError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
