"""The engine side of a training run: each engine builds its model, strategy and data from the
config, keeps them in `_RUNS` between chunk calls, and runs chunks of steps with barriers; plus
the fault, checkpoint and evaluation hooks the driver calls. Functions here are what the driver
sends to the engines (`cluster.run(_engine_setup, ...)`), so they are pickled by this module's
name."""

from __future__ import annotations

import os
import time
from typing import Any

import torch

from ddlstudy.strategies import (
    DEFAULT_TIMEOUT_S,
    Layout,
    Strategy,
    flat_params,
    make_strategy,
)
from ddlstudy.train.config import DTYPE_NAMES, TrainConfig, continues_without_dead

DTYPES = {name: getattr(torch, name) for name in DTYPE_NAMES}  # config names them torch-free

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


def worker_data(config: TrainConfig, global_batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The training rows a worker slices its batches from. Replayed compute on synthetic data
    never reads an image (no forward pass), so it gets one generated image viewed
    `global_batch` times (zero strides: one image of memory): the full set was 1.2 GB per engine
    at 224x224 x 2048 rows, and sixteen such engines did not fit this 23 GB host."""
    if config.compute == "replay" and config.dataset == "synthetic":
        x, y = load_split(config, train=True, n=1)
        return x.expand(global_batch, *x.shape[1:]), y.expand(global_batch)
    return load_split(config, train=True, n=global_batch)


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
            "settings": strategy.settings(), "syncs_model": strategy.syncs_model,
            "tiers_analytic": strategy.analytic_tiers() if strategy.is_worker else None}
    if strategy.is_worker:
        global_batch = config.batch_size * config.workers
        x, y = worker_data(config, global_batch)
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
        slow = config.straggler_factor if rank == config.straggler_rank else 1.0
        strategy.set_replay(replay_s * config.time_dilation * slow, seed=config.seed)
    if rank == config.straggler_rank and strategy.is_worker:
        _slow_down(strategy, config)
    return strategy


def _slow_down(strategy: Strategy, config: TrainConfig) -> None:
    """Make this worker the run's straggler: before each step's compute it waits
    `straggler_delay_s` (dilated like replayed compute) plus, under real compute, (factor - 1) x
    its previous step's compute time (replay already waits factor x the reference time). The
    wait comes first, so no gradient is ready earlier: an overlapped all-reduce cannot hide it."""
    inner = strategy._forward_backward
    delay = config.straggler_delay_s * (config.time_dilation if config.compute == "replay"
                                        else 1.0)
    extra = config.straggler_factor - 1.0 if config.compute == "real" else 0.0
    last = {"compute_s": 0.0}

    def slowed(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
        wait = delay + extra * last["compute_s"]
        if wait > 0:
            time.sleep(wait)
        t0 = time.perf_counter()
        loss = inner(model, x, y)
        last["compute_s"] = time.perf_counter() - t0
        return loss

    strategy._forward_backward = slowed  # type: ignore[method-assign]


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


def batch_rows(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """x's rows `idx`. Replay's data is one image viewed N times (stride 0, `worker_data`): any
    rows of it are its first len(idx), a view, so a replayed step copies no batch (ResNet-50 at
    224x224, batch 128: 77 MB per engine per step otherwise, never read)."""
    if x.dim() > 0 and x.stride(0) == 0:
        return x[: len(idx)]
    return x[idx]


def _engine_chunk(run_id: str, n_steps: int) -> dict[str, Any]:
    """n_steps steps on a worker, or a serve loop (until every worker's STOP) on a server,
    between two barriers over all ranks: the barrier-to-barrier time is the chunk's window.

    Inside the window a worker runs its steps and `end_chunk` (what training needs: the PS
    strategies' STOP to their servers), nothing else. Gathering a sharded model for rank 0
    (fsdp, zero3) is `_engine_sync_model`, a call of its own that the driver makes after it read
    the chunk's wall time and wire counters: not part of any chunk's wall_s or counted bytes."""
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
            x = batch_rows(run["x"], idx).to(run["device"], non_blocking=True)
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


def _engine_sync_model(run_id: str) -> None:
    """Every rank: make rank 0's `strategy.module` the current full model (Strategy.sync_model:
    a gather over the workers for fsdp and zero3, a no-op elsewhere). The driver calls it before
    it reads rank 0's model (evaluation, checkpoint, final weights), outside every chunk's timed
    window and after that chunk's wire counters were read."""
    _RUNS[run_id]["strategy"].sync_model()


def _maybe_fail(run: dict[str, Any]) -> None:
    """Fault injection: the configured worker SIGKILLs its own engine process at the start of
    step fail_at_step (its peers are mid-step: a real crash, nothing cleaned up)."""
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
    shard of the weights, its optimizer, its version and update counter. A sharded model is
    read after `_engine_sync_model` (the driver's `_take_checkpoint`)."""
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


def _has_state(opt_state: dict[str, Any] | None) -> bool:
    """An optimizer state dict that holds a tensor (SGD: a momentum buffer)."""
    return bool(opt_state) and any(
        isinstance(v, torch.Tensor) for st in opt_state.get("state", {}).values()
        for v in st.values())


def _engine_restore(run_id: str, engine: dict[str, Any]) -> int:
    """Load a checkpoint's engine states (worker 0's model and optimizer, each server's shard)
    into this rank; the next step is the checkpoint's. Returns that step.

    The model goes into what the strategy trains (`Strategy.load_weights`: the sharded
    strategies set their shards from it; loading only `module` left zero1-3 and fsdp on their
    initial weights). Worker 0's optimizer state is every worker's where each holds the whole
    model's; a strategy that shards it (`shards_optimizer`) restarts from an empty state, which
    is exact only without momentum (plain SGD keeps none): with momentum the restore raises
    (a rerun of a checkpointed run, a restart after a failure) rather than go on from a state
    that differs; TrainConfig refuses fault injection for such a run up front."""
    run = _RUNS[run_id]
    strategy: Strategy = run["strategy"]
    config: TrainConfig = run["config"]
    worker, servers = engine["worker"], engine["servers"]
    step = int(worker["step"])
    opt = getattr(strategy, "opt", None)
    if strategy.shards_optimizer and (config.momentum or _has_state(worker.get("opt"))):
        raise RuntimeError(f"{strategy.name}: a checkpoint holds worker 0's optimizer state, "
                           "not each rank's shard of it (momentum); restore needs momentum 0")
    strategy.load_weights(worker["model"])
    if strategy.is_worker:
        if opt is not None and worker.get("opt") is not None and not strategy.shards_optimizer:
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
    """Test accuracy and loss of this rank's model (worker 0: the run's model; a sharded one
    after `_engine_sync_model`, which the driver runs first)."""
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
    """This rank's model as one flat vector (rank 0: the run's; after `_engine_sync_model`)."""
    return flat_params(_RUNS[run_id]["strategy"].module).cpu()


def _engine_teardown(run_id: str) -> None:
    run = _RUNS.pop(run_id, None)
    if run is not None:
        run["strategy"].close()


