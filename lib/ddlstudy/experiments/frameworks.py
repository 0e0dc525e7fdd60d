"""Chapter 07's grid: Horovod and TensorFlow beside ddlstudy's own strategies, on the same links.

Wang (NCHC) compared Distributed TensorFlow's parameter servers with Horovod on ResNet-50 over
10 GbE and InfiniBand; Shi 2019 paired TensorFlow's PS with Horovod's ring. Here every strategy
of `frameworks.strategies` trains the same model with the same per-worker batch at each worker
count, on each profile's emulated links (or on loopback, profile "none"), with the same
compute (replayed under emulation).

Engines: the torch-driven strategies (ddlstudy's own, torch DDP, Horovod) share one cluster per
profile (run_grid, interleaved repeats); a TensorFlow cell needs fresh engines (a TF server
cannot restart in a process), so each TF cell and repeat gets its own cluster on links of the
same profile and the same scale (the scale is fixed per profile for all cells, so every cell's
links and compute dilation are the same). TF cells therefore run after the shared cluster's,
not interleaved with them: the records say so (`engines` column: shared / fresh).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm.auto import tqdm

from ddlstudy.experiments import grid
from ddlstudy.frameworks import HOROVOD_STRATEGIES, TF_STRATEGIES
from ddlstudy.train.trainer import TrainConfig, train


def profile_scale(profile: str, configs: Sequence[TrainConfig], scale: float | None,
                  offload_off: bool) -> float | None:
    """One scale for every cell of a profile: the given one, else the largest that fits the
    biggest cell's engines (netem.scale_for); None on loopback."""
    if profile == "none" or scale is not None:
        return None if profile == "none" else scale
    from ddlstudy.network.emulated import netem

    ok, _ = netem.available()
    return netem.scale_for(profile, grid.engines_needed(configs), offload_off) if ok else None


def run_profile(configs: Sequence[TrainConfig], profile: str, out: Path, *, repeats: int = 1,
                scale: float | None = None, offload_off: bool = False,
                **cluster_kwargs: Any) -> pd.DataFrame:
    """Every config on `profile` links (see the module docstring); summary rows of every cell
    and repeat with `repeat`, `profile` and `engines`; failed cells carry `error`."""
    out = Path(out)
    scale = profile_scale(profile, configs, scale, offload_off)
    shared = [c for c in configs if c.strategy not in TF_STRATEGIES]
    fresh = [c for c in configs if c.strategy in TF_STRATEGIES]
    frames = []
    done = on_record(shared, out, repeats, scale) if shared else None
    if done is not None:  # a resumed run: every shared cell read back, no engines started
        frames.append(done.assign(engines="shared"))
    elif shared:
        with grid.emulated_cluster(profile, grid.engines_needed(shared), scale,
                                   offload_off=offload_off, **cluster_kwargs) as cluster:
            cells = grid.dilate(shared, cluster)
            frames.append(grid.run_grid(cluster, cells, out, repeats=repeats)
                          .assign(engines="shared"))
    for rep, config in tqdm(grid.interleaved(fresh, repeats), desc=f"TF cells ({profile})",
                            unit="run", disable=not fresh):
        frames.append(_fresh_cell(config, profile, out, rep, repeats, scale, offload_off,
                                  cluster_kwargs).assign(engines="fresh"))
    summary = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return summary.assign(profile=profile)


def as_dilated(config: TrainConfig, scale: float | None) -> TrainConfig:
    """The config as a cluster on links x `scale` will run it (grid.dilation), known before
    any cluster starts: replayed compute stretched by 1/scale, else as is."""
    stretch = 1.0 / scale if scale and config.compute == "replay" else 1.0
    return replace(config, time_dilation=stretch).validate()


def on_record(configs: Sequence[TrainConfig], out: Path, repeats: int,
              scale: float | None) -> pd.DataFrame | None:
    """Every cell and repeat's summary when all are finished on record (grid._finished: same
    parameters), else None: a resumed chapter then starts no engines for them."""
    rows = []
    for rep, config in grid.interleaved(configs, repeats):
        folder = grid.repeat_dir(Path(out), config, rep, repeats)
        done = grid._finished(folder, as_dilated(config, scale))
        if done is None:
            return None
        rows.append(done.assign(repeat=rep, reused=True, error=""))
    return pd.concat(rows, ignore_index=True) if rows else None


def _fresh_cell(config: TrainConfig, profile: str, out: Path, rep: int, repeats: int,
                scale: float | None, offload_off: bool, cluster_kwargs: dict[str, Any]
                ) -> pd.DataFrame:
    """One TF cell and repeat on its own engines (reused from its folder when finished)."""
    folder = grid.repeat_dir(out, config, rep, repeats)
    done = grid._finished(folder, as_dilated(config, scale))
    if done is not None:  # no engines started for a cell already on record
        return done.assign(repeat=rep, reused=True, error="")
    with grid.emulated_cluster(profile, config.world_size, scale, offload_off=offload_off,
                               **cluster_kwargs) as cluster:
        cell = grid.dilate([config], cluster)[0]
        done = grid._finished(folder, cell)
        if done is not None:
            return done.assign(repeat=rep, reused=True, error="")
        try:
            result = train(cluster, cell, out_dir=folder, progress=False)
        except (ValueError, TimeoutError, RuntimeError) as err:
            tqdm.write(f"FAILED {cell.label} r{rep}: {err}")
            return pd.DataFrame([{"strategy": cell.strategy, "model": cell.model,
                                  "workers": cell.workers, "repeat": rep, "reused": False,
                                  "error": f"{type(err).__name__}: {err}"}])
    return result.summary.assign(repeat=rep, reused=False, error="")


def scaling(summary: pd.DataFrame) -> pd.DataFrame:
    """Per profile: speed-up and scaling efficiency over the same strategy at 1 worker
    (medians over repeats), as Wang (NCHC) defines them."""
    from ddlstudy.analysis import plots

    ok = summary[summary["error"].fillna("").astype(str) == ""] if "error" in summary \
        else summary
    keys = ["profile", "model", "strategy", "workers"]
    med = ok.groupby(keys, as_index=False).median(numeric_only=True)
    parts = [plots.add_speedup(g) for _, g in med.groupby("profile")]
    return pd.concat(parts, ignore_index=True) if parts else med


# ---------------------------------------------------------------- what chapter 99 reads
# Malik 2018's "almost linear" read as: scaling efficiency at the top worker count above 90 %.
NEAR_LINEAR = 0.9
# Wang (NCHC), Sec. IV / Fig 4: "Horovod is 17% faster than Distributed TensorFlow".
WANG_RATIO = 1.17
# Wang's and Shi 2019's "Distributed TensorFlow" is its parameter servers (sync first).
TF_PS_ORDER = ("tf_ps_sync", "tf_ps_async")


def source(profile: str) -> str:
    """How a profile's cells were measured, for claims.csv's source column."""
    if profile in ("none", "loopback"):
        return "measured on one host (loopback, unshaped)"
    return f"emulated ({profile}-like shaped links, replayed compute)"


def _labelled(summary: pd.DataFrame) -> pd.DataFrame:
    """The summary with `profile` and `network` columns (records without them: loopback)."""
    if "network" not in summary:
        summary = summary.assign(network=summary.get("profile", "none"))
    if "profile" not in summary:
        summary = summary.assign(profile=summary["network"])
    return summary


def _cells(summary: pd.DataFrame, chunks: pd.DataFrame, cells: list[dict[str, Any]]
           ) -> tuple[Any, str] | None:
    """ratio_ci of the first cell's images/sec over the second's (paired over interleaved
    repeats, else over each run's timed chunks), with the unit; None when a cell is missing."""
    from ddlstudy.analysis import stats, units

    values, unit = units.cell_values(summary, chunks, cells)
    if any(len(v.dropna()) == 0 for v in values):
        return None
    a, b = values
    if unit == units.REPEATS:
        common = a.dropna().index.intersection(b.dropna().index)
        a, b = a.loc[common], b.loc[common]
    return stats.ratio_ci(a, b, paired=unit == units.REPEATS), unit


def efficiency_estimates(summary: pd.DataFrame, chunks: pd.DataFrame,
                         strategy: str = "horovod") -> list[dict[str, Any]]:
    """Per profile: the strategy's scaling efficiency at its top worker count (images/sec at
    N / (N x at 1)) with its interval and unit (ddlstudy.analysis.units)."""
    from dataclasses import replace as with_

    out = []
    if summary.empty or "strategy" not in summary:
        return out
    summary = _labelled(summary)
    for profile, part in summary[summary["strategy"] == strategy].groupby("profile"):
        workers = set(part["workers"].astype(int))
        if 1 not in workers or max(workers) < 2:
            continue
        top, net = max(workers), part["network"].iloc[0]
        found = _cells(part, chunks, [{"strategy": strategy, "workers": top, "network": net},
                                      {"strategy": strategy, "workers": 1, "network": net}])
        if found is None:
            continue
        est, unit = found
        est = with_(est, value=est.value / top, low=est.low / top, high=est.high / top)
        out.append({"profile": str(profile), "top": top, "est": est, "unit": unit})
    return out


def horovod_vs_tf(summary: pd.DataFrame, chunks: pd.DataFrame) -> list[dict[str, Any]]:
    """Per profile: Horovod images/sec over TF parameter servers' at the most workers both
    ran (Wang (NCHC): 2 nodes), with interval and unit."""
    out = []
    if summary.empty or "strategy" not in summary:
        return out
    for profile, part in _labelled(summary).groupby("profile"):
        have = set(part["strategy"])
        tf = next((s for s in TF_PS_ORDER if s in have), None)
        if "horovod" not in have or tf is None:
            continue
        common = (set(part[part["strategy"] == "horovod"]["workers"].astype(int))
                  & set(part[part["strategy"] == tf]["workers"].astype(int)))
        if not common:
            continue
        top, net = max(common), part["network"].iloc[0]
        found = _cells(part, chunks, [{"strategy": "horovod", "workers": top, "network": net},
                                      {"strategy": tf, "workers": top, "network": net}])
        if found is not None:
            out.append({"profile": str(profile), "top": top, "tf": tf, "est": found[0],
                        "unit": found[1]})
    return out


def pair(summary: pd.DataFrame, chunks: pd.DataFrame, a: str, b: str) -> list[dict[str, Any]]:
    """Per profile: a's images/sec over b's at the most workers both ran, with interval and
    unit (the chapter's comparisons beside the papers' pairings)."""
    out = []
    if summary.empty or "strategy" not in summary:
        return out
    for profile, part in _labelled(summary).groupby("profile"):
        common = (set(part[part["strategy"] == a]["workers"].astype(int))
                  & set(part[part["strategy"] == b]["workers"].astype(int)))
        if not common:
            continue
        top, net = max(common), part["network"].iloc[0]
        found = _cells(part, chunks, [{"strategy": a, "workers": top, "network": net},
                                      {"strategy": b, "workers": top, "network": net}])
        if found is not None:
            out.append({"profile": str(profile), "top": top, "a": a, "b": b,
                        "est": found[0], "unit": found[1]})
    return out


def summary_text(scaled: pd.DataFrame) -> str:
    """Chapter 07's two-sentence summary from its scaling table: per profile, the strategies
    by cluster-equivalent images/sec at the most workers, with scaling efficiency."""
    parts = []
    for profile, part in scaled.groupby("profile"):
        top = int(part["workers"].max())
        at = part[part["workers"] == top].sort_values("images_per_sec_cluster", ascending=False)
        parts.append(f"{source(str(profile))}, {top} workers: " + ", ".join(
            f"{r.strategy} {r.images_per_sec_cluster:.0f} img/s ({r.efficiency:.0%} efficiency)"
            for r in at.itertuples()))
    return ("Horovod and TensorFlow beside ddlstudy's own strategies (medians over repeats; "
            "orders without intervals are not claimed): " + "; ".join(parts) + ".")


TUNING = ["hvd_fusion_threshold_bytes", "hvd_cycle_time_ms", "hvd_cache_capacity",
          "hvd_autotune", "hvd_tuning_set"]


def tuning_text(summary: pd.DataFrame) -> str:
    """One sentence: Horovod's tuning as its runs' records carry it (frameworks.horovod.tuning:
    values in effect on rank 0, defaults included), and how many runs predate that record."""
    hv = (summary[summary["strategy"].isin(HOROVOD_STRATEGIES)] if "strategy" in summary
          else summary[:0])  # horovod and horovod_fp16 carry the same tuning columns
    if hv.empty:
        return ""
    known = hv.dropna(subset=TUNING[:4]) if set(TUNING[:4]) <= set(hv) else hv[:0]
    parts = []
    for (fusion, cycle, cache, auto), g in (known.groupby(TUNING[:4]) if len(known) else ()):
        names = {str(x) for x in g.get("hvd_tuning_set", pd.Series(dtype=str)).dropna()} - {""}
        how = ("set in the environment: " + ", ".join(sorted(names)) if names
               else "all Horovod defaults")
        parts.append(f"tensor fusion threshold {fusion / 2**20:g} MiB, cycle time {cycle:g} ms, "
                     f"response cache {int(cache)} entries, autotune {'on' if auto else 'off'} "
                     f"({how}; {len(g)} run{'s' * (len(g) != 1)})")
    unknown = len(hv) - len(known)
    missing = (f"not on record for {unknown} run{'s' * (unknown != 1)} (measured before the "
               "records carried it)")
    if not parts:
        return f"Horovod's tuning is {missing}."
    if unknown:
        parts.append(missing)
    return "Horovod ran with " + "; ".join(parts) + "."


def order_text(f: dict[str, Any]) -> str:
    """One sentence on a `pair` result: which is faster only when the interval excludes 1."""
    from ddlstudy.analysis import units

    est, a, b = f["est"], f["a"], f["b"]
    if not est.measured:
        word = "no order (too few values for an interval)"
    elif est.low > 1:
        word = f"{a} faster"
    elif est.high < 1:
        word = f"{b} faster"
    else:
        word = "no order (the interval contains 1)"
    return (f"{source(f['profile'])}, {f['top']} workers: {a} / {b} images/sec "
            f"{est.text('.3f')}: {word} (over {units.UNIT_NOTE[f['unit']]}).")
