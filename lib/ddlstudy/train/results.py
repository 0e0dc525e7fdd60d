"""A run's records: the per-step and per-chunk tables, the summary row (images/sec, step
times, bytes, faults, compute mode), and writing them (`write_result`), also for a run that
failed part-way (`_write_partial`)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ddlstudy.analysis.validity import replay_lag
from ddlstudy.strategies import (
    get_strategy,
)
from ddlstudy.train.config import (
    STEP_COLUMNS,
    TrainConfig,
    TrainResult,
)

FAILURE_COLUMNS = ["failure", "ranks", "injected", "step", "action", "checkpoint_step",
                   "steps_redone", "detected_after_s", "discarded_s", "stalled_s", "recovery_s",
                   "time_lost_s", "workers_after", "error"]


def _read_failures(out_dir: str | Path | None) -> list[dict[str, Any]]:
    """Failures an earlier attempt of this run recorded (meta.json), so a rerun keeps them."""
    if out_dir is None:
        return []
    try:
        meta = json.loads((Path(out_dir) / "meta.json").read_text())
    except (OSError, ValueError):
        return []
    found = meta.get("failures") or []
    return [dict(f) for f in found if isinstance(f, dict)]


def _fault_columns(config: TrainConfig, prog: Any, live: TrainConfig) -> dict[str, Any]:
    """What faults cost the run, as summary.csv columns (zeros and NaN for a run without)."""
    fails = prog.failures
    return {
        "checkpoint_every": config.checkpoint_every if config.checkpoint_every else math.nan,
        "failures": len(fails),
        "restarts": sum(f["action"] == "restart" for f in fails),
        "continued": sum(f["action"] == "continue" for f in fails),
        "steps_redone": int(sum(f["steps_redone"] for f in fails)),
        "time_lost_s": float(sum(f["time_lost_s"] for f in fails)) if fails else 0.0,
        "recovery_s": float(sum(f["recovery_s"] for f in fails)) if fails else 0.0,
        "workers_final": live.workers,
        "resumed_from_step": (prog.resumed_from if prog.resumed_from is not None
                              else math.nan),
        "steps_completed": prog.done,
    }


def _compute_columns(config: TrainConfig, replay_s: float) -> dict[str, Any]:
    """How compute was done, as every record of a run states it."""
    replay = config.compute == "replay"
    return {"compute_mode": config.compute, "replay_source": config.replay_source if replay else "",
            "replay_s": replay_s, "time_dilation": config.time_dilation}


def conditions(config: TrainConfig, network: dict[str, Any] | None = None) -> str:
    """One phrase for titles and text: how compute was done and what links carried the run."""
    parts = []
    if config.compute == "replay":
        dil = f", x{config.time_dilation:g} dilated" if config.time_dilation != 1 else ""
        parts.append(f"compute replayed from {config.replay_source}{dil}")
    profile = (network or {}).get("profile", "none")
    if profile not in ("none", "loopback", "unshaped") and network and network.get("scale"):
        parts.append(f"links shaped to {profile}-like x {network['scale']:g}")
    elif profile == "unshaped":
        parts.append("namespaced links, unshaped")
    return "; ".join(parts)


def _steps_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    for col in STEP_COLUMNS:
        if col not in df:
            df[col] = pd.Series(dtype=float)
    df = df[STEP_COLUMNS]
    if len(df):
        df = df.sort_values(["role", "rank", "step"], ascending=[False, True, True],
                            kind="stable").reset_index(drop=True)
    return df


def summarize(config: TrainConfig, steps: pd.DataFrame, chunks: pd.DataFrame,
              evals: pd.DataFrame, n_params: int, *, replay_s: float = math.nan,
              network: dict[str, Any] | None = None,
              tiers_analytic: Sequence[dict[str, float] | None] = ()) -> pd.DataFrame:
    """One row: throughput over the timed windows, medians of the per-step times, bytes (also
    per link tier: counted by the strategy, and its algorithm's analytic split per worker,
    `tiers_analytic`, one dict or None per worker from the engines)."""
    workers = steps[steps["role"] == "worker"]
    servers = steps[steps["role"] == "server"]
    wall = float(chunks["wall_s"].sum()) if len(chunks) else math.nan
    images = int(chunks["images"].sum()) if len(chunks) else 0
    ips = images / wall if wall and wall > 0 else math.nan
    per_worker_chunks = chunks["images_per_sec"] / config.workers if len(chunks) else pd.Series()
    conf = float(1.96 * np.std(per_worker_chunks)) if len(per_worker_chunks) else math.nan
    timed_steps = int(workers["step"].nunique()) if len(workers) else 0

    def med(df: pd.DataFrame, col: str) -> float:
        vals = df[col].dropna()
        return float(vals.median()) if len(vals) else math.nan

    step_p50 = (float(workers.groupby("step")["step_s"].max().median()) if len(workers)
                else math.nan)
    first = workers[workers["step"] == workers["step"].min()]["loss"].mean() if len(workers) \
        else math.nan
    last = workers[workers["step"] == workers["step"].max()]["loss"].mean() if len(workers) \
        else math.nan
    spec = get_strategy(config.strategy)
    stale = servers["staleness"].dropna() if spec.records_staleness else pd.Series()
    row = {
        "strategy": config.strategy,
        "algorithm": config.algorithm if spec.algorithm_aware else "",
        "overlap": config.overlap if spec.algorithm_aware else "",
        "bucket_mb": config.bucket_mb if "bucket_mb" in spec.options else math.nan,
        "model": config.model,
        "shape": str(config.input_shape),
        "dataset": config.dataset,
        "dtype": config.dtype,
        "workers": config.workers,
        "servers": config.n_servers,
        "batch_size": config.batch_size,
        "params": n_params,
        # the untimed steps run first (at least the strategy's warmup_min_steps), then the timed
        "warmup_steps": config.warmup_steps,
        "steps": timed_steps,
        "wall_s": wall,
        "images": images,
        "images_per_sec": ips,
        "images_per_sec_per_worker": ips / config.workers,
        "images_per_sec_conf": conf,
        "step_time_p50_s": step_p50,
        "compute_s": med(workers, "compute_s"),
        "comm_s": med(workers, "comm_s"),
        "comm_wait_s": med(workers, "comm_wait_s"),
        "update_s": med(workers, "update_s"),
        "bytes_sent_per_step": float(workers["bytes_sent"].mean()) if len(workers) else math.nan,
        "bytes_recv_per_step": float(workers["bytes_recv"].mean()) if len(workers) else math.nan,
        "server_bytes_sent_per_step": (float(servers["bytes_sent"].sum()) / timed_steps
                                       if len(servers) and timed_steps else math.nan),
        "server_bytes_recv_per_step": (float(servers["bytes_recv"].sum()) / timed_steps
                                       if len(servers) and timed_steps else math.nan),
        # ddp's bytes are 2(N-1)/N x the bucket bytes its hook saw, not counted on the wire
        "bytes_source": spec.bytes_source,
        **tier_columns(workers, tiers_analytic),
        "server_update_s": med(servers, "update_s"),
        "staleness_mean": float(stale.mean()) if len(stale) else math.nan,
        "staleness_max": float(stale.max()) if len(stale) else math.nan,
        "loss_first": float(first),
        "loss_last": float(last),
        "test_accuracy": float(evals["test_accuracy"].iloc[-1]) if len(evals) else math.nan,
        "lr": config.lr,
        "seed": config.seed,
        **_compute_columns(config, replay_s),
        "images_per_sec_cluster": ips * config.time_dilation,
        "network": (network or {}).get("profile", "none"),
        "network_scale": (network or {}).get("scale"),
        # nodes of several GPUs and emulated latency (ddlstudy.network.emulated.nodes / latency)
        "gpus_per_node": int((network or {}).get("gpus_per_node") or 1),
        "rank_nodes": ",".join(map(str, (network or {}).get("rank_nodes") or [])),
        "latency_emulated_s": float((network or {}).get("latency_emulated_s") or 0.0),
        # the cell's links together ask more than the host's measured ceiling
        # (ddlstudy.network.emulated.netem)
        "cpu_bound": _cpu_bound(network, len(set((network or {}).get("rank_nodes") or []))
                                or config.world_size),  # one link per node
        # measured, not predicted: the share of the timed chunks in which some task on the
        # driver's host waited for a CPU (records.store.cpu_stall_s), weighted by chunk length
        "host_cpu_pressure": _weighted(chunks, "host_cpu_pressure"),
    }
    # a lone replayed worker's compute over the replayed step, - 1 (analysis.validity); NaN
    # where not judged. Readers recompute it from the columns, so older records are judged too.
    row["replay_lag"] = float(replay_lag(pd.DataFrame([row])).iloc[0])
    return pd.DataFrame([row])


TIER_STEP_COLUMNS = ("bytes_sent_intra", "bytes_sent_inter", "bytes_recv_intra",
                     "bytes_recv_inter")


def tier_columns(workers: pd.DataFrame,
                 analytic: Sequence[dict[str, float] | None] = ()) -> dict[str, float]:
    """Per-tier bytes per step, mean over workers: `<col>_per_step` as the Comm harness counted
    them (by the peer's node, `collectives.placement`) and `analytic_<col>_per_step` from the
    algorithm's structure; NaN where a step or a worker has none (strategies without a split,
    the library's own all_reduce)."""
    out = {}
    for col in TIER_STEP_COLUMNS:
        vals = workers[col] if col in workers else pd.Series(dtype=float)
        out[f"{col}_per_step"] = (float(vals.mean()) if len(vals) and not vals.isna().any()
                                  else math.nan)
        got = [a[col] for a in analytic if a is not None]
        out[f"analytic_{col}_per_step"] = (float(np.mean(got)) if got and len(got) == len(analytic)
                                           else math.nan)
    return out


def _weighted(chunks: pd.DataFrame, col: str) -> float:
    """`col` averaged over the chunks weighted by their wall time; NaN if any chunk lacks it."""
    if col not in chunks or chunks.empty or chunks[col].isna().any():
        return math.nan
    w = chunks["wall_s"].astype(float)
    return float((chunks[col].astype(float) * w).sum() / w.sum()) if w.sum() > 0 else math.nan


def _cpu_bound(network: dict[str, Any] | None, nodes: int) -> bool:
    from ddlstudy.network.emulated.netem import cpu_bound

    return cpu_bound(network, nodes)


def write_result(result: TrainResult, out_dir: str | Path, **extra: Any) -> Path:
    """steps.csv, summary.csv, chunks.csv, eval.csv (real data) and meta.json under out_dir."""
    from ddlstudy.records import store as records

    out = Path(out_dir)
    records.write_table(result.steps, out, "steps")
    records.write_table(result.summary, out, "summary")
    records.write_table(result.chunks, out, "chunks")
    if len(result.evals):
        records.write_table(result.evals, out, "eval")
    if len(result.failures):
        records.write_table(result.failures, out, "failures")
    records.write_meta(out, result.config.to_dict(), status="ok", **extra)
    return out


class NonFiniteLoss(RuntimeError):
    """A worker's loss became NaN or inf: the run stops (one line) and its record says failed."""


def _check_losses(results: list[dict[str, Any]], config: TrainConfig) -> None:
    """Raise NonFiniteLoss at the first worker step whose loss is NaN or inf (replayed compute
    has no forward pass: its loss is NaN by design, nothing to check)."""
    if config.compute == "replay":
        return
    for res in results:
        for row in res.get("rows", ()):
            loss = row.get("loss")
            if row.get("role") == "worker" and loss is not None and not math.isfinite(loss):
                raise NonFiniteLoss(
                    f"the loss became {loss} at step {row.get('step')} on worker "
                    f"{row.get('rank')} (lr {config.lr:g}, momentum {config.momentum:g}); "
                    "lower --lr or check the data")


def _write_partial(out_dir: str | Path, config: TrainConfig, rows: list[dict[str, Any]],
                   error: BaseException, **extra: Any) -> None:
    from ddlstudy.records import store as records

    try:
        if rows:
            records.write_table(_steps_frame(rows), out_dir, "steps")
        records.write_meta(out_dir, config.to_dict(),
                           status=f"failed: {type(error).__name__}: {error}", **extra)
    except Exception:  # noqa: BLE001 - the original error matters more
        pass

