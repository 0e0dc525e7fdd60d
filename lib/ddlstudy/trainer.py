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
(ddlstudy.netem), 1/scale keeps the real cluster's compute:communication ratio, and images/sec
x time_dilation (`images_per_sec_cluster`) is the rate the real cluster would reach.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from ddlstudy.cluster import RankFailed
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
from ddlstudy.workloads import DATASETS as DATASET_SPECS
from ddlstudy.workloads import MODELS as MODEL_SPECS
from ddlstudy.workloads import SHAPES

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
    # learning-rate schedule (ddlstudy.dynamics): linear scaling rule + gradual warm-up
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
        if self.timeout_s is not None and not 0 < self.timeout_s <= 86_400:
            raise ValueError(f"timeout must be in (0, 86400] seconds (a day), got "
                             f"{self.timeout_s:g}")
        if self.epochs is not None and self.epochs < 1:
            raise ValueError(f"epochs must be >= 1, got {self.epochs}")
        choice("compute", self.compute, COMPUTE_MODES)
        from ddlstudy.dynamics import check_schedule

        check_schedule(self)
        if not self.time_dilation > 0:
            raise ValueError(f"time_dilation must be > 0, got {self.time_dilation!r}")
        if self.time_dilation != 1.0 and self.compute != "replay":
            raise ValueError(f"time_dilation={self.time_dilation:g} only applies to "
                             "compute='replay'")
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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


def _load(config: TrainConfig, train: bool, n: int | None = None) -> tuple[torch.Tensor,
                                                                           torch.Tensor]:
    from ddlstudy.data import load_dataset

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
    from ddlstudy.cluster import engine_device
    from ddlstudy.replay import measure

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
    from ddlstudy.cluster import engine_device
    from ddlstudy.models import build_model

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
    strategy = make_strategy(config.strategy, model, rank=rank, workers=config.workers,
                             servers=config.servers, lr=config.lr, momentum=config.momentum,
                             weight_decay=config.weight_decay, algorithm=config.algorithm,
                             bucket_mb=config.bucket_mb, overlap=config.overlap,
                             timeout_s=config.timeout_s or DEFAULT_TIMEOUT_S)
    if config.compute == "replay":
        if replay_s is None:
            raise ValueError("compute replay needs the reference time (train() resolves it)")
        strategy.set_replay(replay_s * config.time_dilation, seed=config.seed)
    run: dict[str, Any] = {"config": config, "rank": rank, "world": world, "role": strategy.role,
                           "strategy": strategy, "device": device, "step": 0, "perm": (-1, None)}
    info = {"rank": rank, "role": strategy.role, "params": strategy.n_params, "train_size": 0}
    if strategy.is_worker:
        global_batch = config.batch_size * config.workers
        x, y = _load(config, train=True, n=global_batch)
        if len(x) < global_batch:
            raise ValueError(f"{config.dataset} has {len(x)} training samples, fewer than one "
                             f"global batch of {global_batch}")
        run["x"], run["y"] = x, y
        info["train_size"] = len(x)
    if config.lr_scaling != "none" or config.lr_warmup_epochs:
        from ddlstudy.dynamics import attach_schedule

        attach_schedule(strategy, config, info["train_size"] or None)
    _RUNS[run_id] = run
    return info


def _global_batch_rows(run: dict[str, Any], step: int) -> torch.Tensor:
    config: TrainConfig = run["config"]
    b, n = config.batch_size, config.workers
    g = b * n
    per_epoch = len(run["x"]) // g
    epoch, j = divmod(step, per_epoch)
    if run["perm"][0] != epoch:
        gen = torch.Generator().manual_seed(config.seed * 1_000_003 + epoch)
        run["perm"] = (epoch, torch.randperm(len(run["x"]), generator=gen))
    rows = run["perm"][1][j * g:(j + 1) * g]
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
    if run["world"] > 1:
        dist.barrier()
    wall = time.perf_counter() - t0
    for row in rows:
        row.update(rank=run["rank"], role=run["role"])
    return {"rank": run["rank"], "role": run["role"], "wall_s": wall, "end": time.time(),
            "rows": rows}


def _engine_eval(run_id: str, batch: int = 1000) -> dict[str, float]:
    """Test accuracy and loss of this rank's model (worker 0: the run's model)."""
    run = _RUNS[run_id]
    config: TrainConfig = run["config"]
    if "xt" not in run:
        run["xt"], run["yt"] = _load(config, train=False)
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
    from ddlstudy import replay

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


def train(cluster: Any, config: TrainConfig, out_dir: str | Path | None = None,
          progress: bool = True, *, return_weights: bool = False,
          network: dict[str, Any] | None = None) -> TrainResult:
    """Run `config` on the cluster's engines (ranks 0..world_size-1); write records to out_dir.

    The cluster needs workers + servers engines. Raises ValueError for a bad config (one line),
    TimeoutError / the engine's exception when a rank fails; with out_dir set, a failed run
    still writes the steps it finished and a meta.json that names the error.
    """
    from tqdm.auto import tqdm

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
    timeout_s = config.timeout_s or cluster.collective_timeout_s
    cluster.init_process_group(world_size=world, timeout_s=timeout_s)
    run_id = uuid.uuid4().hex[:12]
    replay_s = replay_seconds(cluster, config) if config.compute == "replay" else math.nan
    net = network_info(cluster, network)
    rows: list[dict[str, Any]] = []
    chunks: list[dict[str, Any]] = []
    evals: list[dict[str, Any]] = []
    weights = None
    bar = None
    error: BaseException | None = None
    infos: list[dict[str, Any]] = []
    try:
        cfg = dict(config.to_dict(), timeout_s=timeout_s)
        infos = cluster.run(_engine_setup, cfg, run_id,
                            None if math.isnan(replay_s) else replay_s, world_size=world,
                            timeout=timeout_s + 300)
        train_size = infos[0]["train_size"]
        per_epoch = train_size // (config.batch_size * config.workers)
        steps = config.steps
        if config.epochs is not None:
            steps = max(1, config.epochs * per_epoch - config.warmup_steps)
        evaluate = config.eval and config.real_data
        bar = tqdm(total=config.warmup_steps + steps, desc=config.label, unit="step",
                   disable=not progress, dynamic_ncols=True)
        done, timed_done, step_time = 0, 0, None
        while timed_done < steps:
            warm = done < config.warmup_steps
            remaining = config.warmup_steps - done if warm else steps - timed_done
            cap = remaining if warm else max(1, math.ceil(steps / MIN_TIMED_CHUNKS))
            to_boundary = per_epoch - done % per_epoch if evaluate else None
            k = _chunk_size(remaining, step_time, cap, to_boundary)
            budget = 600.0 if step_time is None else 10 * step_time + 60
            results = cluster.run(_engine_chunk, run_id, k, world_size=world,
                                  timeout=timeout_s + 60 + k * budget)
            wall = max(r["wall_s"] for r in results)  # barrier release skew: the longest
            step_time = wall / k
            done += k
            if not warm:
                index = len(chunks)
                chunk_rows = [dict(r, chunk=index) for res in results for r in res["rows"]]
                rows += chunk_rows
                images = sum(r["images"] for r in chunk_rows if r["role"] == "worker")
                chunks.append({"chunk": index, "steps": k, "wall_s": wall, "images": images,
                               "images_per_sec": images / wall})
                timed_done += k
                if progress:
                    tqdm.write(f"Iter #{index}: {images / wall / config.workers:.1f} img/sec "
                               "per worker")
            bar.update(k)
            if evaluate and (done % per_epoch == 0 or timed_done >= steps):
                ev = cluster.run_rank(0, _engine_eval, run_id, timeout=timeout_s + 600)
                evals.append({"epoch": done / per_epoch, "step": done, **ev})
                if progress:
                    bar.set_postfix(acc=f"{ev['test_accuracy']:.3f}")
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
            _write_partial(out_dir, config, rows, error, network=net)
    n_params = infos[0]["params"] if infos else 0
    steps_df = _steps_frame(rows).assign(**_compute_columns(config, replay_s))
    chunks_df = pd.DataFrame(chunks, columns=["chunk", "steps", "wall_s", "images",
                                              "images_per_sec"])
    evals_df = pd.DataFrame(evals, columns=["epoch", "step", "test_accuracy", "test_loss",
                                            "test_size"])
    summary = summarize(config, steps_df, chunks_df, evals_df, n_params, replay_s=replay_s,
                        network=net)
    result = TrainResult(config, summary, steps_df, evals_df, chunks_df, weights)
    if out_dir is not None:
        result.out_dir = write_result(result, out_dir, engines=cluster.info()[:world],
                                      network=net, **_compute_columns(config, replay_s))
    return result


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
        # the cell's links together ask more than the host's measured ceiling (ddlstudy.netem)
        "cpu_bound": _cpu_bound(network, config.world_size),
    }
    return pd.DataFrame([row])


def _cpu_bound(network: dict[str, Any] | None, nodes: int) -> bool:
    from ddlstudy.netem import cpu_bound

    return cpu_bound(network, nodes)


def write_result(result: TrainResult, out_dir: str | Path, **extra: Any) -> Path:
    """steps.csv, summary.csv, chunks.csv, eval.csv (real data) and meta.json under out_dir."""
    from ddlstudy import records

    out = Path(out_dir)
    records.write_table(result.steps, out, "steps")
    records.write_table(result.summary, out, "summary")
    records.write_table(result.chunks, out, "chunks")
    if len(result.evals):
        records.write_table(result.evals, out, "eval")
    records.write_meta(out, result.config.to_dict(), status="ok", **extra)
    return out


def _write_partial(out_dir: str | Path, config: TrainConfig, rows: list[dict[str, Any]],
                   error: BaseException, **extra: Any) -> None:
    from ddlstudy import records

    try:
        if rows:
            records.write_table(_steps_frame(rows), out_dir, "steps")
        records.write_meta(out_dir, config.to_dict(),
                           status=f"failed: {type(error).__name__}: {error}", **extra)
    except Exception:  # noqa: BLE001 - the original error matters more
        pass
