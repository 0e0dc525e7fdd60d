"""The data-parallel training loop, run on the cluster's engines and measured per step and rank.

The driver (`train`) keeps no model: every engine builds its own model, strategy and data from the
config (same seed, same initial weights), keeps them in a module-level dict, and runs the loop in
chunks of steps, one engine call per chunk. Chunking keeps the tqdm bar moving and lets the
driver evaluate between epochs, while a chunk itself runs with no driver in the loop. Each chunk
starts and ends with a barrier over all ranks, servers included; the timed wall time is the sum
of these barrier-to-barrier windows (each rank times its own window on its own clock; the chunk's
window is the longest of them, since a barrier does not release every rank at the same instant),
so aggregate images/sec is all images all workers processed over the time they took together,
not N x rank 0's rate.

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

import numpy as np
import pandas as pd
import torch

from ddlstudy.cluster.engines import RankFailed
from ddlstudy.network.emulated.wire import WireBytes
from ddlstudy.strategies import (
    DEFAULT_TIMEOUT_S,
    STRATEGIES,
    Layout,
    Strategy,
    driver_for,
    flat_params,
    get_strategy,
    make_strategy,
    servers_for,
    strategy_names,
)
from ddlstudy.workload.catalog import DATASETS as DATASET_SPECS
from ddlstudy.workload.catalog import MODELS as MODEL_SPECS
from ddlstudy.workload.catalog import SHAPES

DTYPES = {"float32": torch.float32, "float64": torch.float64}
STEP_COLUMNS = ["step", "rank", "role", "chunk", "compute_s", "comm_s", "comm_wait_s", "update_s",
                "idle_s", "step_s", "bytes_sent", "bytes_recv", "loss", "images", "staleness",
                "source"]
COMPUTE_MODES = ("real", "replay")
# (model, shape, batch, dtype, threads) -> seconds: "measured" replay times, once per driver.
_MEASURED: dict[tuple[Any, ...], float] = {}
CHUNK_TARGET_S = 1.0  # aim for about one engine call per second: a lively bar, little overhead
MIN_TIMED_CHUNKS = 10  # ... but at least this many timed chunks, for the +- of img/sec


@dataclass
class TrainConfig:
    """One training run. `batch_size` is per worker; `steps` are timed, after `warmup_steps`.

    servers: PS server processes (None: 1 for ps_sync/ps_async, 2 for ps_sharded; 0 otherwise).
    shape: model input shape name or (C, H, W); None: the data set's own (synthetic: cifar).
    epochs: when set, train that many passes over the data (steps = epochs x steps per epoch
    minus warm-up) and evaluate after each; eval: test accuracy on real data sets.
    timeout_s: bound on any one communication wait (None: the cluster's collective timeout).
    compute: "real" or "replay" (wait the reference time of `replay_source` instead of
    computing); time_dilation: factor on the replayed wait (1/scale under scaled links).
    """

    model: str = "mlp"
    shape: str | tuple[int, int, int] | None = None
    dataset: str = "synthetic"
    strategy: str = "allreduce"
    algorithm: str = "ring"
    workers: int = 2
    servers: int | None = None
    batch_size: int = 32
    steps: int = 20
    warmup_steps: int = 2
    lr: float = 1e-4
    momentum: float = 0.0
    weight_decay: float = 0.0
    bucket_mb: float = 25.0
    overlap: bool = True
    dtype: str = "float32"
    seed: int = 0
    epochs: int | None = None
    eval: bool = True
    data_root: str = "data"
    verify_data: bool = True  # check the data files' known checksums (False: your own files)
    num_classes: int | None = None
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    timeout_s: float | None = None
    compute: str = "real"
    replay_source: str = "measured"
    time_dilation: float = 1.0
    # faults (ddlstudy.train.checkpoint): checkpoint every N steps; SIGKILL worker R's engine at
    # step K
    checkpoint_every: int | None = None
    fail_worker: int | None = None
    fail_at_step: int | None = None
    # learning-rate schedule (ddlstudy.train.schedule): linear scaling rule + gradual warm-up
    lr_scaling: str = "none"
    lr_base_batch: int = 32
    lr_warmup_epochs: float = 0.0

    @property
    def n_servers(self) -> int:
        return servers_for(self.strategy, self.servers)

    @property
    def world_size(self) -> int:
        # Engines beyond workers and servers (TF parameter servers: ClusterCoordinator's chief).
        return self.workers + self.n_servers + get_strategy(self.strategy).extra_engines

    @property
    def input_shape(self) -> str | tuple[int, int, int]:
        if self.shape is not None:
            return self.shape if isinstance(self.shape, str) else tuple(self.shape)
        spec = DATASET_SPECS.get(self.dataset)  # the data set's own shape (digits: 8x8)
        return spec.shape if spec is not None else "cifar"

    @property
    def real_data(self) -> bool:
        spec = DATASET_SPECS.get(self.dataset)
        return spec is not None and spec.real

    @property
    def label(self) -> str:
        extra = ""
        spec = get_strategy(self.strategy)
        if spec.algorithm_aware:
            extra = f"/{self.algorithm}" + ("" if self.overlap else "/no-overlap")
        elif spec.needs_servers:
            extra = f"/{self.n_servers}srv"
        replay = " replay" if self.compute == "replay" else ""
        return f"{self.strategy}{extra} {self.model} x{self.workers}{replay}"

    def validate(self) -> TrainConfig:
        """Raise ValueError with one line naming the bad field and the valid choices."""
        from ddlstudy.collectives import ALGORITHMS

        def choice(name: str, value: Any, valid: Any) -> None:
            if value not in valid:
                raise ValueError(f"unknown {name} {value!r}; valid: {', '.join(map(str, valid))}")

        choice("model", self.model, MODEL_SPECS)
        choice("strategy", self.strategy, STRATEGIES)
        spec = get_strategy(self.strategy)
        if why := spec.why_missing():  # horovod / tensorflow not installed
            raise ValueError(why)
        choice("dataset", self.dataset, DATASET_SPECS)
        choice("dtype", self.dtype, DTYPES)
        if spec.algorithm_aware:
            choice("algorithm", self.algorithm, ALGORITHMS)
        if isinstance(self.shape, str):
            choice("shape", self.shape, SHAPES)
        for name in ("workers", "batch_size", "steps"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {self.warmup_steps}")
        if spec.family == "single" and self.workers != 1:
            raise ValueError(f"strategy {self.strategy} runs on 1 worker, "
                             f"got workers={self.workers}: "
                             "pass workers=1 (and batch_size = N x b to compare with N workers)")
        if spec.needs_servers and self.n_servers < 1:
            raise ValueError(f"{self.strategy} needs servers >= 1, got {self.servers}")
        if self.servers and not spec.needs_servers:
            raise ValueError(f"servers={self.servers} only applies to "
                             f"{', '.join(strategy_names(family='ps'))}")
        if not (0 < self.lr < math.inf and 0 < self.bucket_mb <= 1 << 16):
            raise ValueError(f"lr must be finite and > 0 and bucket_mb in (0, 65536], got "
                             f"lr={self.lr}, bucket_mb={self.bucket_mb}")
        from ddlstudy.config.params import MAX_SEED, replay_source_problem

        if not 0 <= self.momentum < 1:  # NaN fails this too
            raise ValueError(f"momentum must be in [0, 1), got {self.momentum!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not (
                0 <= self.seed <= MAX_SEED):
            raise ValueError(f"seed must be an integer 0..{MAX_SEED}, got {self.seed!r}")
        if self.compute == "replay" and (problem := replay_source_problem(self.replay_source)):
            raise ValueError(problem)
        if self.timeout_s is not None and not 0 < self.timeout_s <= 86_400:
            raise ValueError(f"timeout must be in (0, 86400] seconds (a day), got "
                             f"{self.timeout_s:g}")
        if self.epochs is not None and self.epochs < 1:
            raise ValueError(f"epochs must be >= 1, got {self.epochs}")
        choice("compute", self.compute, COMPUTE_MODES)
        from ddlstudy.train.schedule import check_schedule

        check_schedule(self)
        if not self.time_dilation > 0:
            raise ValueError(f"time_dilation must be > 0, got {self.time_dilation!r}")
        _check_faults(self)
        if self.time_dilation != 1.0 and self.compute != "replay":
            raise ValueError(f"time_dilation={self.time_dilation:g} only applies to "
                             "compute='replay'")
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _check_faults(config: TrainConfig) -> None:
    """checkpoint_every / fail_worker / fail_at_step: one line naming the bad value and the fix."""
    every, worker, at = config.checkpoint_every, config.fail_worker, config.fail_at_step
    if every is not None and (not isinstance(every, int) or every < 1):
        raise ValueError(f"checkpoint_every must be an integer >= 1, got {every!r}")
    if (worker is None) != (at is None):
        raise ValueError("fail_worker and fail_at_step go together: pass both (e.g. "
                         "--fail-worker 1 --fail-at-step 12) or neither")
    if (every is not None or worker is not None) and (config.lr_scaling != "none"
                                                       or config.lr_warmup_epochs):
        # the schedule's update counter lives in a hook on the engine, not in the checkpoint
        raise ValueError("checkpoints and fault injection do not carry the learning-rate "
                         "schedule yet: drop lr_scaling / lr_warmup_epochs, or the fault options")
    if worker is None:
        return
    if not isinstance(worker, int) or not 0 <= worker < config.workers:
        raise ValueError(f"fail_worker must be a worker rank 0..{config.workers - 1}, got "
                         f"{worker!r}")
    total = config.warmup_steps + config.steps if config.epochs is None else None
    if not isinstance(at, int) or at < 1 or (total is not None and at >= total):
        raise ValueError(f"fail_at_step must be an integer in 1..{(total or 2) - 1} (steps "
                         f"count warm-up steps from 0), got {at!r}")
    if get_strategy(config.strategy).framework:
        raise ValueError(f"fail_worker: {config.strategy} has its own runtime; fault injection "
                         f"covers {', '.join(strategy_names(framework=None))}")


@dataclass
class TrainResult:
    """What a run measured: `summary` (one row), `steps` (per timed step and rank), `evals`
    (test accuracy per epoch), `chunks` (timed windows), final weights of worker 0 if asked."""

    config: TrainConfig
    summary: pd.DataFrame
    steps: pd.DataFrame
    evals: pd.DataFrame
    chunks: pd.DataFrame
    weights: torch.Tensor | None = None
    out_dir: Path | None = None
    failures: pd.DataFrame = field(default_factory=pd.DataFrame)  # one row per dead rank event

    @property
    def row(self) -> dict[str, Any]:
        return self.summary.iloc[0].to_dict()

    @property
    def staleness(self) -> list[int]:
        """ps_async: staleness of every update the server(s) applied in the timed steps."""
        s = self.steps[self.steps["role"] == "server"]["staleness"].dropna()
        return [int(v) for v in s]

    def horovod_lines(self) -> list[str]:
        r, n = self.row, self.config.workers
        return [f"Img/sec per worker: {r['images_per_sec_per_worker']:.1f} "
                f"+-{r['images_per_sec_conf']:.1f}",
                f"Total img/sec on {n} worker(s): {r['images_per_sec']:.1f} "
                f"+-{n * r['images_per_sec_conf']:.1f}"]


# ----------------------------------------------------------------------------- engine side
# One run per engine at a time: model, strategy, data and the step counter, between chunk calls.
_RUNS: dict[str, dict[str, Any]] = {}


def _rank_world() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def load_split(config: TrainConfig, train: bool, n: int | None = None) -> tuple[torch.Tensor,
                                                                           torch.Tensor]:
    from ddlstudy.workload.data import load_dataset

    kw: dict[str, Any] = {"verify": config.verify_data}
    if config.dataset == "synthetic":
        kw = {"n": n, "seed": config.seed if train else config.seed + 1}
        if config.num_classes is not None:
            kw["num_classes"] = config.num_classes
    x, y = load_dataset(config.dataset, root=config.data_root, train=train,
                        shape_hint=config.input_shape, **kw)
    return x.to(DTYPES[config.dtype]).contiguous(), y


def _engine_measure(cfg: dict[str, Any], steps: int = 10, warmup: int = 3) -> float:
    """This engine's median forward + backward time for the config's model (replay 'measured')."""
    from ddlstudy.cluster.engines import engine_device
    from ddlstudy.workload.replay import measure

    config = TrainConfig(**cfg)
    shape = config.input_shape
    if not isinstance(shape, str) or config.model_kwargs or config.dtype != "float32":
        raise ValueError(f"replay_source 'measured' times named shapes in float32 with default "
                         f"model arguments; got shape {shape!r}, dtype {config.dtype}, "
                         f"model_kwargs {config.model_kwargs}")
    table = measure([config.model], shape, config.batch_size, engine_device(), steps, warmup)
    return float(table["compute_s_p50"].iloc[0])


def _engine_setup(cfg: dict[str, Any], run_id: str,
                  replay_s: float | None = None) -> dict[str, Any]:
    """Build this rank's model, strategy and data (every rank seeds the same initial weights)."""
    from ddlstudy.cluster.engines import engine_device
    from ddlstudy.workload.models import build_model

    for old in list(_RUNS):
        _engine_teardown(old)
    config = TrainConfig(**cfg)
    rank, world = _rank_world()
    layout = Layout(config.workers, config.n_servers)
    if world != layout.world_size:
        raise RuntimeError(f"process group has {world} ranks, {config.strategy} needs "
                           f"{layout.world_size}")
    device = engine_device()
    torch.manual_seed(config.seed)
    model = build_model(config.model, config.input_shape, num_classes=config.num_classes,
                        **config.model_kwargs)
    model = model.to(device=device, dtype=DTYPES[config.dtype])
    strategy = _build_strategy(config, model, rank, replay_s)
    run: dict[str, Any] = {"config": config, "rank": rank, "world": world, "role": strategy.role,
                           "strategy": strategy, "device": device, "step": 0, "perm": (-1, None),
                           "base": (0, 0, 0), "replay_s": replay_s}
    info = {"rank": rank, "role": strategy.role, "params": strategy.n_params, "train_size": 0,
            "settings": strategy.settings()}
    if strategy.is_worker:
        global_batch = config.batch_size * config.workers
        x, y = load_split(config, train=True, n=global_batch)
        if len(x) < global_batch:
            raise ValueError(f"{config.dataset} has {len(x)} training samples, fewer than one "
                             f"global batch of {global_batch}")
        run["x"], run["y"] = x, y
        info["train_size"] = len(x)
    if config.lr_scaling != "none" or config.lr_warmup_epochs:
        from ddlstudy.train.schedule import attach_schedule

        size = info["train_size"] or len(load_split(config, train=True,
                                                    n=config.batch_size * config.workers)[0])
        attach_schedule(strategy, config, size)
    _RUNS[run_id] = run
    return info


def _build_strategy(config: TrainConfig, model: torch.nn.Module, rank: int,
                    replay_s: float | None) -> Strategy:
    """This rank's strategy object in the current process group (setup, and after re-forming)."""
    strategy = make_strategy(config.strategy, model, rank=rank, workers=config.workers,
                             servers=config.servers, lr=config.lr, momentum=config.momentum,
                             weight_decay=config.weight_decay, algorithm=config.algorithm,
                             bucket_mb=config.bucket_mb, overlap=config.overlap,
                             timeout_s=config.timeout_s or DEFAULT_TIMEOUT_S)
    if config.compute == "replay":
        if replay_s is None:
            raise ValueError("compute replay needs the reference time (train() resolves it)")
        strategy.set_replay(replay_s * config.time_dilation, seed=config.seed)
    return strategy


def _data_position(run: dict[str, Any], step: int) -> tuple[int, int]:
    """(epoch, first row in that epoch's permutation) of the global batch of `step`.

    Counted from run["base"] = (step0, epoch0, row0), the position where the current global
    batch size took over (0, 0, 0 unless a checkpoint or a shrunk worker set moved it): each
    step takes the next N x b rows, a new epoch starts when fewer than that remain."""
    config: TrainConfig = run["config"]
    g = config.batch_size * config.workers
    size = len(run["x"])
    step0, epoch0, row0 = run["base"]
    d = step - step0
    first = (size - row0) // g  # batches left in the base epoch
    if d < first:
        return epoch0, row0 + d * g
    per_epoch = size // g
    e, j = divmod(d - first, per_epoch)
    return epoch0 + 1 + e, j * g


def _global_batch_rows(run: dict[str, Any], step: int) -> torch.Tensor:
    config: TrainConfig = run["config"]
    b, n = config.batch_size, config.workers
    epoch, row = _data_position(run, step)
    if run["perm"][0] != epoch:
        gen = torch.Generator().manual_seed(config.seed * 1_000_003 + epoch)
        run["perm"] = (epoch, torch.randperm(len(run["x"]), generator=gen))
    rows = run["perm"][1][row:row + b * n]
    return rows[run["rank"] * b:(run["rank"] + 1) * b]


def _engine_chunk(run_id: str, n_steps: int) -> dict[str, Any]:
    """n_steps steps on a worker, or a serve loop (until every worker's STOP) on a server,
    between two barriers over all ranks: the barrier-to-barrier time is the chunk's window."""
    import torch.distributed as dist

    run = _RUNS[run_id]
    strategy: Strategy = run["strategy"]
    if run["world"] > 1:
        dist.barrier()
    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    if strategy.is_worker:
        for _ in range(n_steps):
            _maybe_fail(run)
            idx = _global_batch_rows(run, run["step"])
            x = run["x"][idx].to(run["device"], non_blocking=True)
            y = run["y"][idx].to(run["device"], non_blocking=True)
            stats = strategy.step(x, y)
            rows.append({"step": run["step"], **stats.as_row()})
            run["step"] += 1
        strategy.end_chunk()
    else:
        for stats in strategy.serve():
            rows.append({"step": run["step"], **stats.as_row()})
            run["step"] += 1
    lost = _end_barrier(run) if run["world"] > 1 else []
    wall = time.perf_counter() - t0
    for row in rows:  # a survivor renumbered by a re-formed group keeps its first rank here
        row.update(rank=run.get("first_rank", run["rank"]), role=run["role"])
    return {"rank": run["rank"], "role": run["role"], "wall_s": wall, "end": time.time(),
            "rows": rows, "peers_lost": lost}


def _maybe_fail(run: dict[str, Any]) -> None:
    """Fault injection: the configured worker SIGKILLs its own engine process at the start of
    step fail_at_step (its peers are mid-step: a real crash, nothing cleaned up)."""
    import os
    import signal

    config: TrainConfig = run["config"]
    if config.fail_worker == run["rank"] and config.fail_at_step == run["step"]:
        os.kill(os.getpid(), signal.SIGKILL)


def _end_barrier(run: dict[str, Any]) -> list[int]:
    """The chunk's closing barrier; returns the ranks found dead (async PS goes on without
    them). A fault-tolerant async PS run uses `_store_barrier`, which a dead rank cannot hold
    up; every other run gloo's barrier, which fails (or times out) when a peer is gone."""
    import torch.distributed as dist

    if run.get("peer_pids") and continues_without_dead(run["config"]):
        return _store_barrier(run)
    dist.barrier()
    return []


def _store_barrier(run: dict[str, Any], poll_s: float = 0.002) -> list[int]:
    """Arrive by a counter in the process group's store, then wait until every live rank has.

    Why not gloo's barrier: its dissemination rounds pass through the dead rank, so a live rank
    can wait the whole collective timeout on a peer that left the barrier with an error. The
    lowest live worker also sends the server(s) the STOP each dead worker never will (a worker
    that dies in a chunk dies before its STOP, the chunk's last message), so the server's loop
    ends with every live worker's updates applied."""
    from torch.distributed import distributed_c10d

    config: TrainConfig = run["config"]
    store = distributed_c10d._get_default_store()
    run["barriers"] = run.get("barriers", 0) + 1
    key = f"ddlstudy-end-{run['barriers']}"
    store.add(key, 1)
    deadline = time.monotonic() + (config.timeout_s or DEFAULT_TIMEOUT_S)
    stopped = 0
    while True:
        dead = _dead_peers(run)
        if any(r >= config.workers for r in dead):
            raise RuntimeError(f"server rank(s) {dead} died: async PS cannot go on without them")
        live = [r for r in range(config.workers) if r not in dead]
        if dead and run["rank"] == live[0] and stopped < len(dead):
            run["strategy"].stop_for_dead(len(dead) - stopped)
            stopped = len(dead)
        if int(store.add(key, 0)) >= run["world"] - len(dead):
            return dead
        if time.monotonic() > deadline:
            raise TimeoutError(f"rank {run['rank']}: end-of-chunk barrier not reached by every "
                               f"live rank within {config.timeout_s or DEFAULT_TIMEOUT_S:g} s")
        time.sleep(poll_s)


def continues_without_dead(config: TrainConfig) -> bool:
    """Async PS goes on with the live workers (no step waits for all); every other strategy
    needs every rank in each step, so it restarts from a checkpoint instead."""
    from ddlstudy.strategies import get_strategy

    spec = get_strategy(config.strategy)
    return spec.family == "ps" and not spec.sync and config.workers > 1


def _dead_peers(run: dict[str, Any]) -> list[int]:
    """Ranks of this process group whose engine (on this host) is gone."""
    from ddlstudy.cluster.engines import _alive

    return [r for r, pid in enumerate(run.get("peer_pids", [])) if pid and not _alive(pid)]


def _engine_arm(run_id: str, peer_pids: list[int]) -> None:
    """Tell this rank its peers' pids (how a ps_async survivor tells a dead peer)."""
    _RUNS[run_id]["peer_pids"] = list(peer_pids)


def _cpu_state(obj: Any) -> Any:
    """A state_dict with every tensor copied to CPU (what a checkpoint file holds)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu().clone()
    if isinstance(obj, dict):
        return {k: _cpu_state(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(_cpu_state(v) for v in obj)
    return obj


def _engine_state(run_id: str) -> dict[str, Any]:
    """This rank's part of a checkpoint: worker: model + optimizer + data position; server: its
    shard of the weights, its optimizer, its version and update counter."""
    run = _RUNS[run_id]
    strategy: Strategy = run["strategy"]
    opt = getattr(strategy, "opt", None)
    state: dict[str, Any] = {"rank": run["rank"], "role": run["role"], "step": run["step"],
                             "opt": _cpu_state(opt.state_dict()) if opt is not None else None}
    if strategy.is_worker:
        state["model"] = _cpu_state(strategy.module.state_dict())
        state["data"] = list(_data_position(run, run["step"]))
    else:
        state["w"] = _cpu_state(strategy.w)
        state["version"] = int(strategy.version)
    return state


def _engine_restore(run_id: str, engine: dict[str, Any]) -> int:
    """Load a checkpoint's engine states (worker 0's model and optimizer, each server's shard)
    into this rank; the next step is the checkpoint's. Returns that step."""
    run = _RUNS[run_id]
    strategy: Strategy = run["strategy"]
    config: TrainConfig = run["config"]
    worker, servers = engine["worker"], engine["servers"]
    strategy.module.load_state_dict(worker["model"])
    step = int(worker["step"])
    opt = getattr(strategy, "opt", None)
    if strategy.is_worker:
        if opt is not None and worker.get("opt") is not None:
            opt.load_state_dict(worker["opt"])
        if hasattr(strategy, "versions"):
            strategy.versions = [int(s["version"]) for s in servers]
        run["step"] = step
    else:
        srv = servers[run["rank"] - config.workers]
        with torch.no_grad():
            strategy.w.copy_(srv["w"])
        if srv.get("opt") is not None:
            opt.load_state_dict(srv["opt"])
        strategy.version = int(srv["version"])
        run["step"] = int(srv["step"])
    run["base"] = (step, *map(int, worker["data"]))
    run["perm"] = (-1, None)
    return step


def _engine_relayout(run_id: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """After dead workers were dropped and a group of the survivors formed: rebuild this rank's
    strategy for the smaller layout, keeping its live weights, optimizer and PS version (no
    rollback); the data stream goes on where it was, in global batches of the survivors."""
    import torch.distributed as dist

    run = _RUNS[run_id]
    old: Strategy = run["strategy"]
    state = _engine_state(run_id)
    old.close()
    config = TrainConfig(**cfg)
    rank = dist.get_rank()
    strategy = _build_strategy(config, old.module, rank, run.get("replay_s"))
    if strategy.is_worker:
        if hasattr(old, "versions"):
            strategy.versions = list(old.versions)
        run["base"] = (run["step"], *state["data"])
        run["perm"] = (-1, None)
    else:
        with torch.no_grad():
            strategy.w.copy_(old.w)
        strategy.opt.load_state_dict(old.opt.state_dict())
        strategy.version = old.version
    run.setdefault("first_rank", run["rank"])
    run.update(config=config, rank=rank, world=dist.get_world_size(), role=strategy.role,
               strategy=strategy)
    return {"rank": rank, "role": strategy.role, "step": run["step"]}


def _engine_eval(run_id: str, batch: int = 1000) -> dict[str, float]:
    """Test accuracy and loss of this rank's model (worker 0: the run's model)."""
    run = _RUNS[run_id]
    config: TrainConfig = run["config"]
    if "xt" not in run:
        run["xt"], run["yt"] = load_split(config, train=False)
    model = run["strategy"].module
    was_training = model.training
    model.eval()
    correct, loss_sum = 0, 0.0
    loss_fn = run["strategy"].loss_fn
    with torch.no_grad():
        for i in range(0, len(run["xt"]), batch):
            x = run["xt"][i:i + batch].to(run["device"])
            y = run["yt"][i:i + batch].to(run["device"])
            out = model(x)
            loss_sum += float(loss_fn(out, y)) * len(x)
            correct += int((out.argmax(1) == y).sum())
    model.train(was_training)
    n = len(run["xt"])
    return {"test_accuracy": correct / n, "test_loss": loss_sum / n, "test_size": n}


def _engine_weights(run_id: str) -> torch.Tensor:
    return flat_params(_RUNS[run_id]["strategy"].module).cpu()


def _engine_teardown(run_id: str) -> None:
    run = _RUNS.pop(run_id, None)
    if run is not None:
        run["strategy"].close()


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


def fault_tolerant(config: TrainConfig) -> bool:
    """Runs with checkpoints or an injected failure recover; others fail fast (issue 12)."""
    return config.checkpoint_every is not None or config.fail_worker is not None


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


def _take_checkpoint(cluster: Any, config: TrainConfig, live: TrainConfig, run_id: str,
                     prog: _Progress, timeout_s: float, owner: dict[str, Any] | None = None
                     ) -> dict[str, Any]:
    """Worker 0's and every server's state plus the driver's records, at a chunk boundary;
    `owner` (run_owner) says whose run wrote it."""
    from ddlstudy.train import checkpoint

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
    return pd.DataFrame(chunks, columns=["chunk", "steps", "wall_s", "images", "images_per_sec"])


def _stalled_s(results: list[dict[str, Any] | None]) -> float:
    """The failed chunk's window minus the longest surviving worker's time in its steps: what
    waiting on the dead peer (barrier, server) cost async PS inside that chunk."""
    live = [r for r in results if r is not None]
    busy = max((sum(x["step_s"] for x in r["rows"]) for r in live if r["role"] == "worker"),
               default=0.0)
    return max(0.0, max(r["wall_s"] for r in live) - busy)


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
                         "cluster without an emulated network can start: drop --profile / "
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
            announce(f"Running {config.warmup_steps} warm-up + {steps} timed steps{epochs}"
                     f"{again}...")
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
            t_submit = time.monotonic()
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
                                    "images": images, "images_per_sec": images / wall})
                prog.timed_done += k
                if progress:
                    tqdm.write(f"Iter #{index}: {images / wall / live.workers:.1f} img/sec "
                               "per worker")
            bar.update(k)
            if evaluate and (prog.done % per_epoch == 0 or prog.timed_done >= steps):
                ev = cluster.run_rank(0, _engine_eval, run_id, timeout=timeout_s + 600)
                prog.evals.append({"epoch": prog.done / per_epoch, "step": prog.done, **ev})
                if progress:
                    bar.set_postfix(acc=f"{ev['test_accuracy']:.3f}")
            if every and (prog.done % every == 0 or prog.timed_done >= steps):
                ckpt = _take_checkpoint(cluster, config, live, run_id, prog, timeout_s, owner)
                if out_dir is not None:
                    checkpoint.save(out_dir, ckpt)
                    _write_progress(out_dir, config, prog, prog.done, network=net)
        if return_weights:
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
                        network=net)
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


def _fault_columns(config: TrainConfig, prog: _Progress, live: TrainConfig) -> dict[str, Any]:
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
              network: dict[str, Any] | None = None) -> pd.DataFrame:
    """One row: throughput over the timed windows, medians of the per-step times, bytes."""
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
    }
    return pd.DataFrame([row])


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
