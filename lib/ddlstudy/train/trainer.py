"""The data-parallel training loop, run on the cluster's engines and measured per step and rank.

The driver (`train`) keeps no model: every engine builds its own model, strategy and data from the
config (same seed, same initial weights), keeps them in a module-level dict, and runs the loop in
chunks of steps, one engine call per chunk. Chunking keeps the tqdm bar moving and lets the
driver evaluate between epochs, while a chunk itself runs with no driver in the loop. Each chunk
starts and ends with a barrier over all ranks, servers included; the timed wall time is the sum
of these barrier-to-barrier windows (each rank times its own window on its own clock; the chunk's
window is the longest of them, since a barrier does not release every rank at the same instant),
so aggregate images/sec is all images all workers processed over the time they took together,
not N x rank 0's rate. Strategies that shard the model (fsdp, zero3) gather it for rank 0 in a
call of its own (`_sync_model`) before an evaluation, a checkpoint or the final weights, after
the chunk's window and wire counters were taken: that gather is in no chunk's time or bytes.

Data: every step draws one global batch of N x b samples from a seeded per-epoch permutation;
worker r takes rows r*b..(r+1)*b. `single` with batch N*b therefore sees exactly the union of
what N workers see, which is what makes the strategies comparable to it weight for weight.
Synthetic data is one global batch generated on every engine (Horovod's synthetic benchmark
reuses one batch too), so throughput runs never wait on I/O.

Compute replay (`compute="replay"`): workers wait a reference forward + backward time instead of
computing (see `ddlstudy.strategies`), while gradients of the model's real sizes go through the
real strategy and collectives. The reference comes from `replay_source`: "measured" (this
model's single-worker step timed on rank 0 alone, before the run), "gpu" (the stored H100
table) or a CSV path. `time_dilation` multiplies the wait: with links scaled by `scale`
(ddlstudy.network.emulated.netem), 1/scale keeps the real cluster's compute:communication ratio,
and images/sec
x time_dilation (`images_per_sec_cluster`) is the rate the real cluster would reach.

Layout: `config.py` (TrainConfig, TrainResult), `rank.py` (the engine side), `results.py`
(summaries and records), this module (the driver loop, `train`). Names from the first three are
imported here too, so `ddlstudy.train.trainer.X` keeps working.
"""

from __future__ import annotations

import json
import math
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ddlstudy.cluster.engines import RankFailed
from ddlstudy.network.emulated.wire import WireBytes
from ddlstudy.records.store import cpu_stall_s
from ddlstudy.strategies import (
    driver_for,
)
from ddlstudy.strategies.registry import warmup_min_steps
from ddlstudy.train.config import (  # noqa: F401 - ddlstudy.train.trainer.X keeps working
    _MEASURED,
    CHUNK_TARGET_S,
    COMPUTE_MODES,
    MIN_TIMED_CHUNKS,
    STEP_COLUMNS,
    TrainConfig,
    TrainResult,
    _check_faults,
    continues_without_dead,
    fault_tolerant,
)
from ddlstudy.train.rank import (  # noqa: F401 - ddlstudy.train.trainer.X keeps working
    _RUNS,
    DTYPES,
    _build_strategy,
    _cpu_state,
    _data_position,
    _dead_peers,
    _end_barrier,
    _engine_arm,
    _engine_chunk,
    _engine_eval,
    _engine_measure,
    _engine_relayout,
    _engine_restore,
    _engine_setup,
    _engine_state,
    _engine_sync_model,
    _engine_teardown,
    _engine_weights,
    _global_batch_rows,
    _maybe_fail,
    _rank_world,
    _store_barrier,
    load_split,
)
from ddlstudy.train.results import (  # noqa: F401 - ddlstudy.train.trainer.X keeps working
    FAILURE_COLUMNS,
    NonFiniteLoss,
    _check_losses,
    _compute_columns,
    _cpu_bound,
    _fault_columns,
    _read_failures,
    _steps_frame,
    _write_partial,
    conditions,
    summarize,
    write_result,
)


# ----------------------------------------------------------------------------- driver side
def replay_seconds(cluster: Any, config: TrainConfig, timeout_s: float = 600) -> float:
    """The reference forward + backward seconds a replayed worker waits (before dilation).

    'measured' runs on rank 0 while every other engine is idle, once per model, shape, batch
    and engine thread count per driver process; 'gpu' or a CSV path reads a table.
    """
    from ddlstudy.workload import replay

    if config.replay_source == "measured":
        threads = cluster.info()[0].get("threads") if cluster.info() else None
        key = (config.model, str(config.input_shape), config.batch_size, config.dtype,
               json.dumps(config.model_kwargs, sort_keys=True), threads)
        if key not in _MEASURED:
            _MEASURED[key] = float(cluster.run_rank(0, _engine_measure, config.to_dict(),
                                                    timeout=timeout_s))
        return _MEASURED[key]
    shape = config.input_shape
    if not isinstance(shape, str):
        raise ValueError(f"replay tables are per named shape (cifar, mnist, imagenet); the run's "
                         f"shape is {shape!r}: set shape, or use replay_source 'measured'")
    return replay.compute_time(replay.load_table(config.replay_source), config.model, shape,
                               config.batch_size)


def network_info(cluster: Any = None, network: dict[str, Any] | None = None) -> dict[str, Any]:
    """What network the engines talk over, for the records: `network` as the caller passes it
    to train(), else the cluster's own `network_info` field (Cluster declares it;
    grid.emulated_cluster sets it), else none, unshaped."""
    info = network if network is not None else getattr(cluster, "network_info", None)
    if info:
        return dict(info)
    return {"profile": "none", "scale": None, "latency_emulated": False,
            "note": "no emulated network: engines talk over the host's own interfaces, unshaped"}


def _chunk_size(remaining: int, step_time: float | None, cap: int, to_boundary: int | None) -> int:
    k = 1 if step_time is None else max(1, int(CHUNK_TARGET_S / max(step_time, 1e-6)))
    k = min(k, remaining, cap)
    if to_boundary:
        k = min(k, to_boundary)
    return max(1, k)


@dataclass
class _Progress:
    """The driver's counters and records. A checkpoint stores a copy (JSON); a restart returns
    to it, keeping `failures`, which only grow."""

    done: int = 0  # steps completed, warm-up included
    timed_done: int = 0
    rows: list[dict[str, Any]] = field(default_factory=list)
    chunks: list[dict[str, Any]] = field(default_factory=list)
    evals: list[dict[str, Any]] = field(default_factory=list)
    windows: list[list[float]] = field(default_factory=list)  # [first step, steps, wall_s]
    failures: list[dict[str, Any]] = field(default_factory=list)
    resumed_from: int | None = None  # a rerun's checkpoint step

    def restored(self, snapshot: dict[str, Any] | None) -> _Progress:
        """The progress at a checkpoint (None: the start), with this run's failures."""
        back = _Progress(**snapshot) if snapshot else _Progress()
        back.failures, back.resumed_from = self.failures, self.resumed_from
        return back


def _resume_point(config: TrainConfig, out_dir: str | Path | None) -> dict[str, Any] | None:
    """The newest good checkpoint of this same configuration in out_dir, or None."""
    from ddlstudy.train import checkpoint

    if out_dir is None or not fault_tolerant(config):
        return None
    state = checkpoint.latest(out_dir)
    if state is not None and state.get("fingerprint") != checkpoint.fingerprint(config.to_dict()):
        raise ValueError(f"{out_dir} holds checkpoints of another configuration: pass another "
                         f"--out, or delete {checkpoint.folder(out_dir)} to start over")
    return state


def _start_engines(cluster: Any, config: TrainConfig, run_id: str, replay_s: float, world: int,
                   timeout_s: float, armed: bool, ckpt: dict[str, Any] | None
                   ) -> list[dict[str, Any]]:
    """Build every rank's run (fault injection only while `armed`), then load `ckpt`."""
    cfg = dict(config.to_dict(), timeout_s=timeout_s)
    if not armed:
        cfg.update(fail_worker=None, fail_at_step=None)
    infos = cluster.run(_engine_setup, cfg, run_id, None if math.isnan(replay_s) else replay_s,
                        world_size=world, timeout=timeout_s + 300)
    if fault_tolerant(config):
        pids = [int(i["pid"]) for i in cluster.info()[:world]]
        cluster.run(_engine_arm, run_id, pids, world_size=world, timeout=timeout_s + 30)
    if ckpt is not None:
        cluster.run(_engine_restore, run_id, ckpt["engine"], world_size=world,
                    timeout=timeout_s + 300)
    return infos


def run_owner() -> dict[str, Any]:
    """Who is running: pid, host and start time (ISO, UTC) of this driver process. A checkpoint
    carries it, so a resumed run can say whose run it continues."""
    import datetime as dt
    import socket

    return {"pid": os.getpid(), "host": socket.gethostname(),
            "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}


def owner_line(owner: dict[str, Any] | None) -> str:
    """' (written by pid P on H, run started T)' for a checkpoint's owner, '' when unknown."""
    if not owner:
        return ""
    return (f" (written by pid {owner.get('pid')} on {owner.get('host')}, run started "
            f"{owner.get('started')})")


def _sync_model(cluster: Any, run_id: str, world: int, timeout_s: float, syncs: bool) -> None:
    """Before the driver reads rank 0's model (evaluation, checkpoint, final weights): a
    strategy that shards the model (`syncs: Strategy.syncs_model`: fsdp, zero3) gathers it on
    every rank (`_engine_sync_model`), as an engine call of its own after the last chunk's wall
    time and wire counters were taken, so neither holds it. Other strategies: no call."""
    if syncs:
        cluster.run(_engine_sync_model, run_id, world_size=world, timeout=timeout_s + 120)


def _take_checkpoint(cluster: Any, config: TrainConfig, live: TrainConfig, run_id: str,
                     prog: _Progress, timeout_s: float, owner: dict[str, Any] | None = None,
                     syncs: bool = False) -> dict[str, Any]:
    """Worker 0's and every server's state plus the driver's records, at a chunk boundary;
    `owner` (run_owner) says whose run wrote it; `syncs`: gather a sharded model first
    (`_sync_model`, on the live ranks)."""
    from ddlstudy.train import checkpoint

    _sync_model(cluster, run_id, live.world_size, timeout_s, syncs)
    servers = range(live.workers, live.workers + live.n_servers)
    engine = {"worker": cluster.run_rank(0, _engine_state, run_id, timeout=timeout_s + 120),
              "servers": [cluster.run_rank(r, _engine_state, run_id, timeout=timeout_s + 120)
                          for r in servers]}
    snap = asdict(prog)
    for key in ("failures", "resumed_from"):
        snap.pop(key)
    return {"step": prog.done, "fingerprint": checkpoint.fingerprint(config.to_dict()),
            "engine": engine, "driver": checkpoint.pack_driver(snap),
            "workers": live.workers, "written": time.time(), "run": dict(owner or {})}


def _write_progress(out_dir: str | Path, config: TrainConfig, prog: _Progress, ckpt_step: int,
                    **extra: Any) -> None:
    """Records up to a checkpoint, so a run killed outright leaves them (meta says 'running')."""
    from ddlstudy.records import store as records

    records.write_table(_steps_frame(prog.rows), out_dir, "steps")
    records.write_table(_chunks_frame(prog.chunks), out_dir, "chunks")
    if prog.failures:
        records.write_table(pd.DataFrame(prog.failures), out_dir, "failures")
    records.write_meta(out_dir, config.to_dict(), status=f"running: checkpoint at step "
                       f"{ckpt_step}", failures=prog.failures, **extra)


def _chunks_frame(chunks: list[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame(chunks, columns=["chunk", "steps", "wall_s", "images", "images_per_sec",
                                         "host_cpu_pressure"])


def _pressure(stall_0: float | None, t_0: float) -> float:
    """The share of the time since `t_0` (submit, monotonic) in which some task on the driver's
    host waited for a CPU (`records.store.cpu_stall_s`); NaN without pressure information."""
    stall_1, elapsed = cpu_stall_s(), time.monotonic() - t_0
    if stall_0 is None or stall_1 is None or elapsed <= 0:
        return math.nan
    return min(1.0, max(0.0, (stall_1 - stall_0) / elapsed))


def _stalled_s(results: list[dict[str, Any] | None]) -> float:
    """The failed chunk's window minus the longest surviving worker's time in its steps: what
    waiting on the dead peer (barrier, server) cost async PS inside that chunk."""
    live = [r for r in results if r is not None]
    busy = max((sum(x["step_s"] for x in r["rows"]) for r in live if r["role"] == "worker"),
               default=0.0)
    return max(0.0, max(r["wall_s"] for r in live) - busy)


def _warmup_floor(config: TrainConfig) -> str:
    """' (<strategy>'s minimum: ...)' when the strategy's registry entry sets the warm-up's
    floor (`warmup_min_steps`, which TrainConfig raised warmup_steps to), else ''."""
    need = warmup_min_steps(config.strategy)
    if not need or config.warmup_steps != need:
        return ""
    return (f" ({config.strategy}'s minimum: its first {need} steps are not representative, "
            "so they are never timed)")


def train(cluster: Any, config: TrainConfig, out_dir: str | Path | None = None,
          progress: bool = True, *, return_weights: bool = False,
          announce: Callable[[str], None] | None = None,
          network: dict[str, Any] | None = None) -> TrainResult:
    """Run `config` on the cluster's engines (ranks 0..world_size-1); write records to out_dir.

    The cluster needs workers + servers engines. Raises ValueError for a bad config (one line),
    TimeoutError / the engine's exception when a rank fails; with out_dir set, a failed run
    still writes the steps it finished and a meta.json that names the error.

    Faults (`checkpoint_every`, `fail_worker`): checkpoints at chunk boundaries every N steps
    (ddlstudy.train.checkpoint; in out_dir, or in memory without one). When a worker's engine dies,
    async PS re-forms its process group with the survivors and goes on (no step redone); every
    other strategy stops all engines, starts fresh ones and resumes from the last checkpoint
    (the start when there is none). A rerun with the same out_dir resumes from its newest
    checkpoint. `announce` gets one line saying what will run (the steps, once known).
    """
    from dataclasses import replace

    from tqdm.auto import tqdm

    from ddlstudy.train import checkpoint

    config.validate()
    own_driver = driver_for(config.strategy)
    if own_driver is not None:  # TF has its own driver, same records
        return own_driver(cluster, config, out_dir, progress, return_weights=return_weights,
                          network=network)
    world = config.world_size
    if cluster.size < world:
        raise ValueError(f"{config.strategy} with {config.workers} workers and "
                         f"{config.n_servers} servers needs {world} engines; the cluster has "
                         f"{cluster.size}: start it with --workers {world}")
    tolerant = fault_tolerant(config)
    if tolerant and not continues_without_dead(config) and not getattr(cluster, "can_restart",
                                                                        False):
        raise ValueError(f"{config.strategy} recovers on fresh engines, which only a local "
                         "cluster without an emulated network can start: drop --ipp-profile / "
                         "--network, or the fault options")
    ckpt = _resume_point(config, out_dir)
    owner = run_owner()
    resumed_run = dict(ckpt.get("run") or {}) if ckpt is not None else None
    timeout_s = config.timeout_s or cluster.collective_timeout_s
    cluster.init_process_group(world_size=world, timeout_s=timeout_s)
    run_id = uuid.uuid4().hex[:12]
    replay_s = replay_seconds(cluster, config) if config.compute == "replay" else math.nan
    net = network_info(cluster, network)
    prog = _Progress()
    if ckpt is not None:
        prog = _Progress(**checkpoint.driver_records(ckpt))
        prog.resumed_from = int(ckpt["step"])
        old = _read_failures(out_dir)
        prog.failures = old
    armed = config.fail_worker is not None and not any(f.get("injected") for f in prog.failures)
    live = config  # the layout that runs: async PS loses workers that die
    weights = None
    bar = None
    error: BaseException | None = None
    infos: list[dict[str, Any]] = []
    try:
        infos = _start_engines(cluster, config, run_id, replay_s, world, timeout_s, armed, ckpt)
        train_size = infos[0]["train_size"]
        syncs = bool(infos[0].get("syncs_model"))  # rank 0's model needs _sync_model first
        per_epoch = train_size // (config.batch_size * config.workers)
        steps = config.steps
        if config.epochs is not None:
            steps = max(1, config.epochs * per_epoch - config.warmup_steps)
        if armed and config.fail_at_step >= config.warmup_steps + steps:
            raise ValueError(f"fail_at_step {config.fail_at_step} is past the run's last step "
                             f"{config.warmup_steps + steps - 1}")
        if announce is not None:
            epochs = (f" ({config.epochs} epoch(s) of {per_epoch} steps)"
                      if config.epochs is not None else "")
            again = (f"; resuming from the checkpoint at step {prog.done}"
                     f"{owner_line(ckpt.get('run') if ckpt is not None else None)}"
                     if prog.resumed_from is not None else "")
            announce(f"Running {config.warmup_steps} warm-up{_warmup_floor(config)} + {steps} "
                     f"timed steps{epochs}{again}...")
        evaluate = config.eval and config.real_data
        bar = tqdm(total=config.warmup_steps + steps, initial=prog.done, desc=config.label,
                   unit="step", disable=not progress, dynamic_ncols=True)
        step_time = None
        every = config.checkpoint_every
        wire = WireBytes(cluster, world)  # per-node bytes on emulated links (emulated.wire)
        while prog.timed_done < steps:
            warm = prog.done < config.warmup_steps
            remaining = config.warmup_steps - prog.done if warm else steps - prog.timed_done
            cap = remaining if warm else max(1, math.ceil(steps / MIN_TIMED_CHUNKS))
            bounds = [per_epoch - prog.done % per_epoch if evaluate else 0,
                      every - prog.done % every if every else 0]
            k = _chunk_size(remaining, step_time, cap, min([b for b in bounds if b] or [0]))
            budget = 600.0 if step_time is None else 10 * step_time + 60
            t_submit, stall_0 = time.monotonic(), cpu_stall_s()
            wire.mark(timed=not warm)
            pending = cluster.submit(_engine_chunk, run_id, k, world_size=world)
            wait_s = timeout_s + 60 + k * budget
            try:
                results = cluster.wait(pending, wait_s)
            except RankFailed as err:
                if not tolerant:
                    raise
                t_detect = time.monotonic()
                dead = cluster.dead_ranks(world)
                injected = armed and config.fail_worker in dead
                armed = armed and not injected
                where = config.fail_at_step if injected else prog.done
                failure = {"failure": len(prog.failures), "ranks": " ".join(map(str, dead)),
                           "error": str(err).split(";")[0], "injected": injected, "step": where,
                           "detected_after_s": t_detect - t_submit}
                if (continues_without_dead(live) and dead and len(dead) < live.workers
                        and all(r < live.workers for r in dead)):
                    results = cluster.wait(pending, wait_s, ignore=dead)  # survivors finish
                    t_back = time.monotonic()
                    live = replace(live, workers=live.workers - len(dead), fail_worker=None,
                                   fail_at_step=None)
                    cluster.drop_ranks(dead)
                    world -= len(dead)
                    cluster.init_process_group(world_size=world, timeout_s=timeout_s)
                    cluster.run(_engine_relayout, run_id, dict(live.to_dict(),
                                                               timeout_s=timeout_s),
                                world_size=world, timeout=timeout_s + 120)
                    cluster.run(_engine_arm, run_id, [int(i["pid"]) for i in cluster.info()],
                                world_size=world, timeout=timeout_s + 30)
                    stalled = _stalled_s(results)
                    recovery = time.monotonic() - t_back
                    failure.update(action="continue", checkpoint_step=math.nan, steps_redone=0,
                                   discarded_s=0.0, stalled_s=stalled, recovery_s=recovery,
                                   time_lost_s=stalled + recovery, workers_after=live.workers)
                    prog.failures.append(failure)
                    results = [r for r in results if r is not None]
                else:
                    back_to = int(ckpt["step"]) if ckpt is not None else 0
                    discarded = sum(w[2] for w in prog.windows if w[0] >= back_to)
                    cluster.restart()
                    live, world = config, config.world_size
                    cluster.init_process_group(world_size=world, timeout_s=timeout_s)
                    _start_engines(cluster, config, run_id, replay_s, world, timeout_s, armed,
                                   ckpt)
                    snapshot = checkpoint.driver_records(ckpt) if ckpt is not None else None
                    prog = prog.restored(snapshot)
                    recovery = time.monotonic() - t_detect
                    stalled = t_detect - t_submit
                    failure.update(action="restart", checkpoint_step=back_to,
                                   steps_redone=max(0, where - back_to), discarded_s=discarded,
                                   stalled_s=stalled, recovery_s=recovery,
                                   time_lost_s=discarded + stalled + recovery,
                                   workers_after=live.workers)
                    prog.failures.append(failure)
                    step_time = None
                    bar.reset(total=config.warmup_steps + steps)
                    bar.update(prog.done)
                    if progress:
                        tqdm.write(f"rank(s) {failure['ranks']} died at step {where}: restarted "
                                   f"on fresh engines from step {back_to}")
                    continue
                if progress:
                    tqdm.write(f"rank(s) {failure['ranks']} died at step {where}: going on with "
                               f"{live.workers} workers")
            _check_losses(results, config)  # a NaN / inf loss stops the run (record: failed)
            wall = max(r["wall_s"] for r in results)  # barrier release skew: the longest
            step_time = wall / k
            prog.windows.append([prog.done, k, wall])
            prog.done += k
            if not warm:
                wire.add()
                index = len(prog.chunks)
                chunk_rows = [dict(r, chunk=index) for res in results for r in res["rows"]]
                prog.rows += chunk_rows
                images = sum(r["images"] for r in chunk_rows if r["role"] == "worker")
                prog.chunks.append({"chunk": index, "steps": k, "wall_s": wall,
                                    "images": images, "images_per_sec": images / wall,
                                    "host_cpu_pressure": _pressure(stall_0, t_submit)})
                prog.timed_done += k
                if progress:
                    tqdm.write(f"Iter #{index}: {images / wall / live.workers:.1f} img/sec "
                               "per worker")
            bar.update(k)
            if evaluate and (prog.done % per_epoch == 0 or prog.timed_done >= steps):
                _sync_model(cluster, run_id, world, timeout_s, syncs)  # after wire.add()
                ev = cluster.run_rank(0, _engine_eval, run_id, timeout=timeout_s + 600)
                prog.evals.append({"epoch": prog.done / per_epoch, "step": prog.done, **ev})
                if progress:
                    bar.set_postfix(acc=f"{ev['test_accuracy']:.3f}")
            if every and (prog.done % every == 0 or prog.timed_done >= steps):
                ckpt = _take_checkpoint(cluster, config, live, run_id, prog, timeout_s, owner,
                                        syncs)
                if out_dir is not None:
                    checkpoint.save(out_dir, ckpt)
                    _write_progress(out_dir, config, prog, prog.done, network=net)
        if return_weights:
            _sync_model(cluster, run_id, world, timeout_s, syncs)
            weights = cluster.run_rank(0, _engine_weights, run_id, timeout=timeout_s + 60)
    except BaseException as err:
        error = err
        raise
    finally:
        if bar is not None:
            bar.close()
        try:  # after a signal or a dead rank the engines are stopped, not waited on
            if not isinstance(error, (KeyboardInterrupt, RankFailed, TimeoutError)):
                cluster.run(_engine_teardown, run_id, world_size=world, timeout=30)
        except Exception:  # noqa: BLE001 - a stuck engine must not hide the real error
            pass
        if error is not None and out_dir is not None:
            _write_partial(out_dir, config, prog.rows, error, network=net,
                           failures=prog.failures)
    n_params = infos[0]["params"] if infos else 0
    steps_df = _steps_frame(prog.rows).assign(**_compute_columns(config, replay_s))
    chunks_df = _chunks_frame(prog.chunks)
    evals_df = pd.DataFrame(prog.evals, columns=["epoch", "step", "test_accuracy", "test_loss",
                                                 "test_size"])
    summary = summarize(config, steps_df, chunks_df, evals_df, n_params, replay_s=replay_s,
                        network=net, tiers_analytic=[i.get("tiers_analytic") for i in infos
                                                     if i.get("role") == "worker"])
    settings = infos[0].get("settings", {}) if infos else {}  # rank 0's framework tuning
    summary = summary.assign(**_fault_columns(config, prog, live), **settings)
    if infos:
        wire.apply_to_run(summary, config, prog.timed_done)
    result = TrainResult(config, summary, steps_df, evals_df, chunks_df, weights)
    result.failures = pd.DataFrame(prog.failures, columns=FAILURE_COLUMNS)
    if out_dir is not None:
        result.out_dir = write_result(result, out_dir, engines=cluster.info()[:world],
                                      network=net, failures=prog.failures,
                                      resumed_from=prog.resumed_from, settings=settings,
                                      run=owner, resumed_from_run=resumed_run,
                                      **_compute_columns(config, replay_s))
    return result


