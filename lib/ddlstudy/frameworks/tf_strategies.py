"""TensorFlow strategies on the ipyparallel engines: tf_allreduce, tf_ps_sync, tf_ps_async.

Each runs TF's own distribution code, one TF task per engine, and writes the same records as the
torch trainer (ddlstudy.train.trainer.summarize / write_result: images/sec, step time, the compute /
communication split where TF lets us time it, bytes per step).

- `tf_allreduce`: MultiWorkerMirroredStrategy with CommunicationOptions(implementation=RING);
  one worker task per engine, a custom `tf.function` step (Keras 3 `fit` fails under MWMS,
  keras-team/keras#20585): forward + backward, then one packed `all_reduce(MEAN)` of the
  gradients in the replica context, then plain SGD. tf.timestamp() between the three parts
  gives compute_s, comm_wait_s (the all-reduce, not overlapped) and update_s.
- `tf_ps_async`: ParameterServerStrategy + ClusterCoordinator. Workers N tasks, parameter
  servers S tasks (`--servers`, default 1), and the coordinator ("chief" task) on one more
  engine. The coordinator schedules N closures per step and never waits between steps: each
  closure reads the variables from the servers, computes its gradient on a worker and applies
  it at once (SGD on the servers); a version counter on the servers gives each update's
  staleness (updates applied by others between its read and its apply).
- `tf_ps_sync`: the same tasks, synchronous as Shi 2019 and Wang (NCHC) ran parameter servers: per
  step the coordinator schedules N closures (one per data shard), each adds its gradient / N
  into accumulators colocated with the variables on the servers; `coordinator.join()` is the
  barrier; then one update (w -= lr * acc; acc = 0) runs on the servers (resource ops run where
  their variables live). This replaces tf.compat.v1's SyncReplicasOptimizer, which hung here
  in MonitoredTrainingSession and lets a fast worker fill a round with two of its own
  gradients; tests/test_frameworks.py shows it synchronous (equal to single-process training
  with the global batch, staleness 0).

Data: synthetic only, generated inside the TF graph on the task that uses it (stateless
random ops keyed by seed, step and shard), never shipped from the driver: shard r of step s is
the same tensor in every strategy and in `reference_sgd`, so runs are comparable weight for
weight. Other data sets give one line naming the fix.

Addresses: the cluster spec names each engine's own address (ddlstudy.cluster.engines's `host_ip`),
but TF's gRPC server binds 0.0.0.0 whatever TF_CONFIG says (TF has no option for it). A local
cluster's engines carry ddlstudy.cluster.loopback's shim (LD_PRELOAD), which rewrites that
wildcard bind to the address the spec names (127.0.0.1 locally, the veth address in an emulated
network; v4-mapped on gRPC's dual-stack socket): a task on a local address without the shim is
refused before any server starts. TF catches SIGTERM: the cluster's
stop kills engines with SIGKILL after a grace period. A process can host one TF server once
(a second MWMS run in the same engines hung): each TF run needs fresh engines, and an engine
that ran TF refuses a second run with one line.

Compute replay (`--compute replay`): the step waits the replayed forward + backward time (the
reference time x time_dilation) INSIDE the tf.function step, on the task that computes (an MWMS
worker; under PS the worker running the closure): an in-graph sleep (tf.data's SleepDataset
kernel, `_replay_wait`), ordered by control dependencies between reading the variables and
sending the gradients, so tf.timestamp() still splits compute / communication / update. The
replayed gradients are `REPLAY_GRAD_SCALE` x the variables just read, one tensor of each real
variable's shape and dtype: under MWMS they go through the same packed RING all-reduce, under PS
the closure first pulls every variable from the servers (what a forward pass reads) and then
pushes its gradient back (assign on the servers), so the real variables' bytes cross the real
(shaped) links. No overlap of communication with compute is modelled (TF's custom step has none
in real mode either).

Bytes per worker step are analytic, as FINDINGS measured them on the namespace counters: ring
all-reduce 2(N-1)/N x 4P each way, a PS worker 4P each way (P parameters, 4 bytes each in
float32).
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

import numpy as np

from ddlstudy.frameworks import TF_PS_STRATEGIES as TF_PS
from ddlstudy.network.emulated.wire import COUNTER, WireBytes

FIX = "run `make setup` (it installs tensorflow-cpu, pinned in pyproject.toml)"

ROLES = {"worker": "worker", "ps": "server", "chief": "coordinator"}  # TF job -> record role
REPLAY_GRAD_SCALE = 1e-3  # replayed gradient = this x the weights just read (bounded, real sizes)
# This engine's TF state: strategy, model, step functions (one TF run per process).
_TF: dict[str, Any] = {}


def import_tf() -> Any:
    """tensorflow, or ImportError with one line naming the fix."""
    try:
        import tensorflow as tf
    except ImportError as err:
        raise ImportError(f"tensorflow is not installed ({err}); {FIX}") from None
    return tf


def engines_needed(strategy: str, workers: int, servers: int) -> int:
    """Engines a TF run takes: workers, plus servers and the coordinator for the PS ones."""
    return workers + (servers + 1 if strategy in TF_PS else 0)


def check_config(config: Any) -> None:
    """Raise ValueError (one line) for what the TF strategies cannot run."""
    from ddlstudy.frameworks.keras_models import KERAS_MODELS

    if config.model not in KERAS_MODELS:
        raise ValueError(f"model {config.model!r} has no TensorFlow (Keras) version; "
                         f"{config.strategy} trains: {', '.join(KERAS_MODELS)}")
    if config.dataset != "synthetic":
        raise ValueError(f"{config.strategy} trains on synthetic data only (generated on the "
                         f"workers); use --dataset synthetic")
    if config.momentum or config.weight_decay:
        raise ValueError(f"{config.strategy} runs plain SGD; set momentum and weight_decay to 0")
    if config.model_kwargs and config.model != "mlp":
        raise ValueError(f"model arguments {config.model_kwargs} apply to mlp only under TF")


# ----------------------------------------------------------------------------- engine side
def batch(tf: Any, shape: tuple[int, int, int], classes: int, b: int, seed: int, step: Any,
          shard: Any, dtype: str) -> tuple[Any, Any]:
    """Shard `shard` of step `step`: b images (channels-last) and labels, stateless random."""
    key = tf.stack([tf.cast(seed * 1_000_003 + step, tf.int64), tf.cast(shard, tf.int64)])
    c, h, w = shape
    x = tf.random.stateless_normal((b, h, w, c), seed=key, dtype=dtype)
    y = tf.random.stateless_uniform((b,), seed=key + 7, minval=0, maxval=classes,
                                    dtype=tf.int64)
    return x, y


def _loss(tf: Any, model: Any, x: Any, y: Any) -> Any:
    logits = model(x, training=True)
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))


def _replay_wait(tf: Any, seconds: float, after: Any) -> Any:
    """A tensor ready `seconds` after `after` ran, on the device executing the function.

    tf has no sleep op in its public API; tf.data's SleepDataset kernel sleeps once per
    GetNext, and an empty dataset calls it once (at end of sequence): reduce() over it is one
    wait of `seconds`, executed where the step runs (a remote PS worker included; a
    tf.py_function would call back into the coordinator's Python).
    """
    from tensorflow.python.data.experimental.ops import testing

    with tf.control_dependencies(after):
        ds = tf.data.Dataset.range(0).apply(testing.sleep(int(seconds * 1e6)))
        return ds.reduce(tf.constant(0, tf.int64), lambda a, b: a + b)


def _replayed_grads(tf: Any, values: list[Any]) -> list[Any]:
    """Gradients of the real variables' shapes: REPLAY_GRAD_SCALE x the weights read."""
    return [tf.cast(REPLAY_GRAD_SCALE, v.dtype) * v for v in values]


def _fields(cfg: dict[str, Any]) -> dict[str, Any]:
    """The TrainConfig fields of an engine-side cfg (which also carries e.g. replay_wait_s)."""
    from dataclasses import fields

    from ddlstudy.train.trainer import TrainConfig

    names = {f.name for f in fields(TrainConfig)}
    return {k: v for k, v in cfg.items() if k in names}


def _shape(cfg: dict[str, Any]) -> tuple[tuple[int, int, int], int]:
    from ddlstudy.train.trainer import TrainConfig
    from ddlstudy.workload.models import _resolve_shape

    in_shape, classes = _resolve_shape(TrainConfig(**_fields(cfg)).input_shape)
    return in_shape, int(cfg.get("num_classes") or classes or 10)


def _build(cfg: dict[str, Any]) -> Any:
    import keras

    from ddlstudy.frameworks.keras_models import build_keras_model
    from ddlstudy.train.trainer import TrainConfig

    keras.utils.set_random_seed(cfg["seed"])
    in_shape, classes = _shape(cfg)
    return build_keras_model(cfg["model"], in_shape, classes, dtype=cfg["dtype"],
                             **TrainConfig(**_fields(cfg)).model_kwargs)


def _flat(model: Any) -> np.ndarray:
    return np.concatenate([np.asarray(v.numpy()).reshape(-1) for v in model.trainable_variables])


def engine_address() -> dict[str, Any]:
    """This engine's address, a free port, whether it already ran TF (then it must not), and
    whether its wildcard binds go to that address (the loopback shim) and must (a local one)."""
    from ddlstudy.cluster import loopback
    from ddlstudy.frameworks import free_port, host_ip

    ip = host_ip()
    return {"ip": ip, "port": free_port(), "used": bool(_TF), "pid": os.getpid(),
            **loopback.engine_state(ip)}


def engine_setup(cfg: dict[str, Any], spec: dict[str, list[str]],
                 jobs: list[tuple[str, int]]) -> dict[str, Any]:
    """Become TF task jobs[rank] of `spec` (all engines at once): a server, an MWMS worker, or
    the coordinator with the model's variables on the servers. TF's threads: the engine's
    torch thread count (the cluster gives each engine its share of the cores)."""
    import json

    import torch

    from ddlstudy.cluster import loopback
    from ddlstudy.cluster.engines import engine_rank

    job, index = jobs[engine_rank()]
    loopback.bind_to(spec[job][index].rsplit(":", 1)[0])  # the shim binds TF's 0.0.0.0 here
    threads = torch.get_num_threads()
    tf = import_tf()
    if _TF:
        raise RuntimeError("this engine already ran TensorFlow; TF runs need fresh engines")
    _TF["claimed"] = True
    if threads:
        tf.config.threading.set_intra_op_parallelism_threads(int(threads))
        tf.config.threading.set_inter_op_parallelism_threads(1)
    os.environ["TF_CONFIG"] = json.dumps({"cluster": spec, "task": {"type": job,
                                                                    "index": index}})
    strategy = cfg["strategy"]
    if strategy == "tf_allreduce":
        return _setup_mwms(tf, cfg, index)
    if job != "chief":
        server = tf.distribute.Server(tf.train.ClusterSpec(spec), job_name=job,
                                      task_index=index, protocol="grpc", start=True)
        _TF.update(server=server, role="server" if job == "ps" else "worker")
        return {"job": job, "index": index, "params": 0}
    return _setup_coordinator(tf, cfg, spec)


def _setup_mwms(tf: Any, cfg: dict[str, Any], rank: int) -> dict[str, Any]:
    impl = tf.distribute.experimental.CommunicationImplementation.RING
    strategy = tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(
            implementation=impl, timeout_seconds=cfg.get("timeout_s") or 120.0))
    with strategy.scope():
        model = _build(cfg)
    in_shape, classes = _shape(cfg)
    lr, b, seed, dtype = cfg["lr"], cfg["batch_size"], cfg["seed"], cfg["dtype"]
    variables = model.trainable_variables
    mean = tf.distribute.ReduceOp.MEAN

    replay = cfg.get("replay_wait_s")

    def replica_step(step: Any) -> Any:
        t0 = tf.timestamp()
        if replay is not None:  # wait the replayed compute, then the replayed gradients
            waited = _replay_wait(tf, replay, [t0])
            with tf.control_dependencies([waited]):
                grads = _replayed_grads(tf, [tf.identity(v.value) for v in variables])
            loss = tf.constant(math.nan, dtype)
        else:
            with tf.control_dependencies([t0]):
                x, y = batch(tf, in_shape, classes, b, seed, step, rank, dtype)
            with tf.GradientTape() as tape:
                loss = _loss(tf, model, x, y)
            grads = tape.gradient(loss, variables)
        with tf.control_dependencies(grads):
            t1 = tf.timestamp()
        with tf.control_dependencies([t1]):
            grads = tf.distribute.get_replica_context().all_reduce(mean, grads)
        with tf.control_dependencies(grads):
            t2 = tf.timestamp()
        with tf.control_dependencies([t2]):
            ops = [v.assign_sub(tf.cast(lr, g.dtype) * g) for v, g in zip(variables, grads,
                                                                          strict=True)]
        with tf.control_dependencies(ops):
            t3 = tf.timestamp()
        return loss, tf.stack([t0, t1, t2, t3])

    @tf.function
    def train_step(step: Any) -> Any:
        loss, ts = strategy.run(replica_step, args=(step,))
        return strategy.experimental_local_results(loss)[0], \
            strategy.experimental_local_results(ts)[0]

    n_params = int(sum(np.prod(v.shape) for v in variables))
    _TF.update(role="worker", kind="mwms", strategy=strategy, model=model, step_fn=train_step,
               rank=rank, step=0, params=n_params, initial=_flat(model))
    return {"job": "worker", "index": rank, "params": n_params}


def _setup_coordinator(tf: Any, cfg: dict[str, Any], spec: dict[str, list[str]]
                       ) -> dict[str, Any]:
    from tensorflow.python.distribute.cluster_resolver import SimpleClusterResolver

    resolver = SimpleClusterResolver(tf.train.ClusterSpec(spec), task_type="chief", task_id=0,
                                     rpc_layer="grpc")
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    sync = cfg["strategy"] == "tf_ps_sync"
    with strategy.scope():
        model = _build(cfg)
        variables = model.trainable_variables
        accs = []
        if sync:
            for v in variables:
                with strategy.extended.colocate_vars_with(v.value):  # the tf.Variable
                    accs.append(tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False))
        version = tf.Variable(0, dtype=tf.int64, trainable=False)
    in_shape, classes = _shape(cfg)
    lr, b, seed, dtype, n = cfg["lr"], cfg["batch_size"], cfg["seed"], cfg["dtype"], \
        cfg["workers"]
    replay = cfg.get("replay_wait_s")

    def replayed(read: Any) -> tuple[Any, list[Any]]:
        """Pull every variable to this worker, wait the replayed compute, make the gradients."""
        with tf.control_dependencies([read]):
            pulled = [tf.identity(v.value) for v in variables]
        waited = _replay_wait(tf, replay, pulled)
        with tf.control_dependencies([waited]):
            return tf.constant(math.nan, dtype), _replayed_grads(tf, pulled)

    @tf.function
    def closure(step: Any, shard: Any) -> Any:
        t0 = tf.timestamp()
        with tf.control_dependencies([t0]):
            read = version.read_value()
        if replay is not None:
            loss, grads = replayed(read)
        else:
            with tf.control_dependencies([read]):
                x, y = batch(tf, in_shape, classes, b, seed, step, shard, dtype)
            with tf.GradientTape() as tape:
                loss = _loss(tf, model, x, y)
            grads = tape.gradient(loss, variables)
        with tf.control_dependencies(grads):
            t1 = tf.timestamp()
        with tf.control_dependencies([t1]):
            if sync:
                ops = [a.assign_add(g / tf.cast(n, g.dtype)) for a, g in zip(accs, grads,
                                                                              strict=True)]
            else:
                ops = [v.assign_sub(tf.cast(lr, g.dtype) * g) for v, g in zip(variables, grads,
                                                                              strict=True)]
        with tf.control_dependencies(ops):
            applied = version.assign_add(1) if not sync else version.read_value()
            t2 = tf.timestamp()
        stale = applied - 1 - read if not sync else tf.constant(0, tf.int64)
        return loss, tf.stack([t0, t1, t2]), stale

    @tf.function
    def apply_sync() -> None:
        # Pinned to each accumulator's server: unpinned, the multiply and the zeros ran on the
        # coordinator, and each step moved the model twice more between it and the servers
        # (measured: a server received 2.4 x the model per step with 1 worker, not 1 x).
        for v, a in zip(variables, accs, strict=True):
            with tf.device(a.device):
                v.assign_sub(tf.cast(lr, a.dtype) * a)
                a.assign(tf.zeros_like(a))
        version.assign_add(1)

    n_params = int(sum(np.prod(v.shape) for v in variables))
    _TF.update(role="coordinator", kind="ps", sync=sync, strategy=strategy,
               coordinator=coordinator, model=model, closure=closure, apply=apply_sync,
               workers=n, step=0, params=n_params, initial=_flat(model))
    return {"job": "chief", "index": 0, "params": n_params}


def engine_chunk(n_steps: int) -> dict[str, Any]:
    """Run n_steps (MWMS worker: its own steps; coordinator: N closures per step)."""
    if _TF.get("kind") == "mwms":
        return _chunk_mwms(n_steps)
    if _TF.get("kind") == "ps":
        return _chunk_ps(n_steps)
    return {"rows": [], "start": math.nan, "end": math.nan}


def _row(step: int, rank: int, **kw: Any) -> dict[str, Any]:
    row = {"step": step, "rank": rank, "role": "worker", "compute_s": math.nan,
           "comm_s": math.nan, "comm_wait_s": math.nan, "update_s": math.nan, "idle_s": 0.0,
           "step_s": math.nan, "bytes_sent": 0, "bytes_recv": 0, "loss": math.nan, "images": 0,
           "staleness": math.nan, "source": -1}
    row.update(kw)
    return row


def _chunk_mwms(n_steps: int) -> dict[str, Any]:
    import tensorflow as tf

    rows, start = [], time.time()
    for _ in range(n_steps):
        step = _TF["step"]
        t_start = time.perf_counter()
        loss, ts = _TF["step_fn"](tf.constant(step, tf.int64))
        ts = ts.numpy()
        rows.append(_row(step, _TF["rank"], loss=float(loss), compute_s=ts[1] - ts[0],
                         comm_wait_s=ts[2] - ts[1], comm_s=ts[2] - ts[1], update_s=ts[3] - ts[2],
                         step_s=time.perf_counter() - t_start))
        _TF["step"] += 1
    return {"rows": rows, "start": start, "end": time.time()}


def _chunk_ps(n_steps: int) -> dict[str, Any]:
    import tensorflow as tf

    coord, n = _TF["coordinator"], _TF["workers"]
    rows, start = [], time.time()
    pending: list[tuple[int, int, Any, float]] = []

    def collect() -> None:
        for step, shard, rv, t_step in pending:
            loss, ts, stale = rv.fetch()
            rows.append(_row(step, shard, loss=float(loss), compute_s=ts[1] - ts[0],
                             comm_s=ts[2] - ts[1],
                             step_s=ts[2] - ts[0] if math.isnan(t_step) else t_step,
                             staleness=float(stale) if not _TF["sync"] else 0.0))
        pending.clear()

    for _ in range(n_steps):
        step = _TF["step"]
        t0 = time.perf_counter()
        rvs = [coord.schedule(_TF["closure"], args=(tf.constant(step, tf.int64),
                                                    tf.constant(shard, tf.int64)))
               for shard in range(n)]
        if _TF["sync"]:
            coord.join()
            t1 = time.perf_counter()
            _TF["apply"]()
            t2 = time.perf_counter()
            pending.extend((step, s, rv, t2 - t0) for s, rv in enumerate(rvs))
            collect()
            for r in rows[-n:]:
                r["update_s"] = t2 - t1
        else:  # async: a step's time is its closure's, on the worker's clock
            pending.extend((step, s, rv, math.nan) for s, rv in enumerate(rvs))
        _TF["step"] += 1
    coord.join()
    collect()
    return {"rows": rows, "start": start, "end": time.time()}


def engine_weights(initial: bool = False) -> np.ndarray | None:
    """The model's flat trainable weights (MWMS worker or coordinator), else None."""
    if "model" not in _TF:
        return None
    return np.asarray(_TF["initial"]) if initial else _flat(_TF["model"])


# ----------------------------------------------------------------------------- driver side
def _chunk_rows(results: list[dict[str, Any]], index: int) -> tuple[list[dict[str, Any]], float]:
    starts = [r["start"] for r in results if r["rows"]]
    ends = [r["end"] for r in results if r["rows"]]
    rows = [dict(row, chunk=index) for r in results for row in r["rows"]]
    return rows, (max(ends) - min(starts)) if starts else math.nan


def train(cluster: Any, config: Any, out_dir: Any = None, progress: bool = True, *,
          return_weights: bool = False, network: dict[str, Any] | None = None) -> Any:
    """Run a TF strategy on the cluster's first engines; same TrainResult as trainer.train."""
    import pandas as pd
    from tqdm.auto import tqdm

    from ddlstudy.cluster import loopback
    from ddlstudy.train import trainer

    config.validate()
    check_config(config)  # tensorflow itself is imported on the engines only, never here
    world = config.world_size
    if cluster.size < world:
        raise ValueError(f"{config.strategy} with {config.workers} workers needs {world} "
                         f"engines; the cluster has {cluster.size}: start it with --workers "
                         f"{world}")
    addrs = cluster.run(engine_address, world_size=world, timeout=60)
    for _ in range(5):  # engines sharing one address (loopback) probe ports independently
        if len({(a["ip"], a["port"]) for a in addrs}) == len(addrs):
            break
        addrs = cluster.run(engine_address, world_size=world, timeout=60)
    if any(a["used"] for a in addrs):
        raise ValueError(f"{config.strategy}: these engines already ran TensorFlow (a TF "
                         "server cannot restart in a process); start a fresh cluster")
    loopback.check_engines(config.strategy, addrs)  # before any TF server starts
    jobs = _jobs(config)
    spec: dict[str, list[str]] = {}
    for (job, _), a in zip(jobs, addrs, strict=True):
        spec.setdefault(job, []).append(f"{a['ip']}:{a['port']}")
    timeout_s = config.timeout_s or cluster.collective_timeout_s
    replay_s = (trainer.replay_seconds(cluster, config) if config.compute == "replay"
                else math.nan)
    cfg = dict(config.to_dict(), timeout_s=timeout_s,
               replay_wait_s=None if math.isnan(replay_s) else replay_s * config.time_dilation)
    infos = cluster.run(engine_setup, cfg, spec, jobs, world_size=world,
                        timeout=timeout_s + 300)
    runners = [r for r, (job, _) in enumerate(jobs) if job == "chief"] or \
        list(range(config.workers))
    rows: list[dict[str, Any]] = []
    chunks: list[dict[str, Any]] = []
    bar = tqdm(total=config.warmup_steps + config.steps, desc=config.label, unit="step",
               disable=not progress, dynamic_ncols=True)
    done, timed, step_time = 0, 0, None
    wire = WireBytes(cluster, world)  # per-node bytes on emulated links (else nothing)
    try:
        while timed < config.steps:
            warm = done < config.warmup_steps
            remaining = config.warmup_steps - done if warm else config.steps - timed
            cap = remaining if warm else max(1, math.ceil(config.steps / trainer.MIN_TIMED_CHUNKS))
            k = trainer._chunk_size(remaining, step_time, cap, None)
            budget = 600.0 if step_time is None else 10 * step_time + 60
            if not warm:
                wire.mark()
            results = cluster.run(engine_chunk, k, world_size=world,
                                  timeout=timeout_s + 60 + k * budget)
            wire.add()
            chunk_rows, wall = _chunk_rows(results, len(chunks))
            step_time = wall / k
            done += k
            if not warm:
                images = config.workers * config.batch_size * k
                rows += [dict(r, images=config.batch_size) for r in chunk_rows]
                chunks.append({"chunk": len(chunks), "steps": k, "wall_s": wall,
                               "images": images, "images_per_sec": images / wall})
                timed += k
            bar.update(k)
        weights = initial = None
        if return_weights:
            src = runners[0]
            weights = cluster.run_rank(src, engine_weights, timeout=120)
            initial = cluster.run_rank(src, engine_weights, True, timeout=120)
    finally:
        bar.close()
    n_params = infos[runners[0]]["params"]
    _add_bytes(rows, config, n_params)
    steps_df = trainer._steps_frame(rows).assign(**trainer._compute_columns(config, replay_s))
    chunks_df = pd.DataFrame(chunks, columns=["chunk", "steps", "wall_s", "images",
                                              "images_per_sec"])
    evals_df = pd.DataFrame(columns=["epoch", "step", "test_accuracy", "test_loss", "test_size"])
    net = trainer.network_info(cluster, network)
    summary = trainer.summarize(config, steps_df, chunks_df, evals_df, n_params,
                                replay_s=replay_s, network=net)
    summary["bytes_source"] = "analytic"
    wire.apply(summary, [ROLES[job] for job, _ in jobs], timed, replace=True)
    stale = steps_df["staleness"].dropna()
    if config.strategy in TF_PS and len(stale):
        summary["staleness_mean"], summary["staleness_max"] = stale.mean(), stale.max()
    result = trainer.TrainResult(config, summary, steps_df, evals_df, chunks_df,
                                 None if weights is None else _torch(weights))
    result.initial_weights = None if initial is None else _torch(initial)
    if out_dir is not None:
        result.out_dir = trainer.write_result(
            result, out_dir, engines=cluster.info()[:world], network=net,
            tf_cluster=spec, tf_version=_tf_version(),
            bytes_note=(COUNTER if wire.counting else
                        "analytic: ring 2(N-1)/N x 4P, PS worker 4P each way"),
            **trainer._compute_columns(config, replay_s))
    return result


def _jobs(config: Any) -> list[tuple[str, int]]:
    """(TF job, task index) per rank: workers 0..N-1, then ps tasks, then the chief."""
    jobs = [("worker", i) for i in range(config.workers)]
    if config.strategy in TF_PS:
        jobs += [("ps", i) for i in range(config.n_servers)] + [("chief", 0)]
    return jobs


def _add_bytes(rows: list[dict[str, Any]], config: Any, n_params: int) -> None:
    size = 8 if config.dtype == "float64" else 4
    n = config.workers
    per = (2 * (n - 1) * n_params * size // n if config.strategy == "tf_allreduce"
           else n_params * size)
    for r in rows:
        r["bytes_sent"] = r["bytes_recv"] = per


def _torch(a: np.ndarray) -> Any:
    import torch

    return torch.from_numpy(np.asarray(a))


def _tf_version() -> str:
    import importlib.metadata as md

    return md.version("tensorflow-cpu")


def reference_sgd(cfg: dict[str, Any], steps: int, initial: np.ndarray) -> np.ndarray:
    """Single-process TF SGD on the union of the N shards (batch N x b) from `initial`: what
    tf_allreduce and tf_ps_sync must reproduce. Runs in the calling process."""
    tf = import_tf()
    model = _build(cfg)
    variables = model.trainable_variables
    off = 0
    for v in variables:
        size = int(np.prod(v.shape))
        v.assign(initial[off:off + size].reshape(v.shape))
        off += size
    in_shape, classes = _shape(cfg)
    for step in range(steps):
        parts = [batch(tf, in_shape, classes, cfg["batch_size"], cfg["seed"], step, r,
                       cfg["dtype"]) for r in range(cfg["workers"])]
        x = tf.concat([p[0] for p in parts], 0)
        y = tf.concat([p[1] for p in parts], 0)
        with tf.GradientTape() as tape:
            loss = _loss(tf, model, x, y)
        for v, g in zip(variables, tape.gradient(loss, variables), strict=True):
            v.assign_sub(cfg["lr"] * g)
    return _flat(model)
