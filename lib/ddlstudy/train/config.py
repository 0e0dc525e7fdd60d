"""What one training run is: `TrainConfig` (validated before any engine starts) and
`TrainResult` (what `train` returns). Split from trainer.py: the driver loop lives there, the
engine side in rank.py, the summaries in results.py.

Pure Python on purpose (no torch, no pandas at import): the train CLI builds its flags from
TrainConfig's defaults and refuses a bad flag through `validate` before torch loads (about a
second saved per refusal; tests/test_hostile.py checks torch stays out)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ddlstudy.strategies import (
    STRATEGIES,
    get_strategy,
    servers_for,
    strategy_names,
)
from ddlstudy.strategies.registry import warmup_min_steps
from ddlstudy.workload.catalog import DATASETS as DATASET_SPECS
from ddlstudy.workload.catalog import MODELS as MODEL_SPECS
from ddlstudy.workload.catalog import SHAPES

if TYPE_CHECKING:
    import pandas as pd
    import torch

DTYPE_NAMES = ("float32", "float64")  # the torch dtypes they name: ddlstudy.train.rank.DTYPES
STEP_COLUMNS = ["step", "rank", "role", "chunk", "compute_s", "comm_s", "comm_wait_s", "update_s",
                "idle_s", "step_s", "bytes_sent", "bytes_recv", "loss", "images", "staleness",
                "source", "bytes_sent_intra", "bytes_sent_inter", "bytes_recv_intra",
                "bytes_recv_inter"]
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
    warmup_steps is at least the strategy's `warmup_min_steps` (its registry entry: PowerSGD's
    first 2 steps all-reduce plain gradients): a config asking fewer is raised to it when
    built (and by `validate`), so `warmup_steps` is always what runs, and the records say so.
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
    # stragglers (ddlstudy.experiments.stragglers): worker `straggler_rank` computes
    # `straggler_factor` x slower (replay: waits factor x the reference time) and waits
    # `straggler_delay_s` more at the start of each step (defaults: no straggler)
    straggler_rank: int | None = None
    straggler_factor: float = 1.0
    straggler_delay_s: float = 0.0

    def __post_init__(self) -> None:
        self._untimed_strategy_warmup()

    def _untimed_strategy_warmup(self) -> None:
        """Raise warmup_steps to the strategy's `warmup_min_steps`, so that the steps it
        declares unrepresentative are never timed, whichever caller built the config (a bad
        warmup_steps or strategy is left for `validate` to name)."""
        need = warmup_min_steps(self.strategy)
        w = self.warmup_steps
        if need and isinstance(w, int) and not isinstance(w, bool) and 0 <= w < need:
            self.warmup_steps = need

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
        slow = ""
        if self.straggler_rank is not None:
            slow = f" slow{self.straggler_rank}" + (
                f"x{self.straggler_factor:g}" if self.straggler_factor != 1 else "") + (
                f"d{self.straggler_delay_s * 1e3:g}ms" if self.straggler_delay_s else "")
        return f"{self.strategy}{extra} {self.model} x{self.workers}{replay}{slow}"

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
        choice("dtype", self.dtype, DTYPE_NAMES)
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
        self._untimed_strategy_warmup()  # a field set after construction
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
        from ddlstudy.config.bounds import MAX_SEED, replay_source_problem

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
        _check_straggler(self)
        if self.time_dilation != 1.0 and self.compute != "replay":
            raise ValueError(f"time_dilation={self.time_dilation:g} only applies to "
                             "compute='replay'")
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


MAX_STRAGGLER_FACTOR = 100.0  # beyond this a "straggler" is a dead worker (chapter 10)
MAX_STRAGGLER_DELAY_S = 60.0


def _check_straggler(config: TrainConfig) -> None:
    """straggler_rank / _factor / _delay_s: a worker rank, a factor in [1, 100], a delay in
    [0, 60] s, and a rank only with a factor > 1 or a delay > 0 (and no factor or delay without
    a rank): one line naming the bad value and the fix."""
    rank, factor, delay = config.straggler_rank, config.straggler_factor, config.straggler_delay_s
    for name, value, hi in (("straggler_factor", factor, MAX_STRAGGLER_FACTOR),
                            ("straggler_delay_s", delay, MAX_STRAGGLER_DELAY_S)):
        if isinstance(value, bool) or not isinstance(value, int | float) or not (
                (1.0 if name == "straggler_factor" else 0.0) <= value <= hi):
            low = 1 if name == "straggler_factor" else 0
            raise ValueError(f"{name} must be a number in [{low}, {hi:g}], got {value!r}")
    slowed = factor != 1.0 or delay != 0.0
    if rank is None:
        if slowed:
            raise ValueError("straggler_factor / straggler_delay_s need straggler_rank (the "
                             "worker to slow): pass e.g. --straggler 1:3")
        return
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < config.workers:
        raise ValueError(f"straggler_rank must be a worker rank 0..{config.workers - 1}, got "
                         f"{rank!r}")
    if not slowed:
        raise ValueError(f"straggler_rank={rank} slows nothing: give straggler_factor > 1 or "
                         "straggler_delay_s > 0 (e.g. --straggler 1:3)")
    if get_strategy(config.strategy).framework:
        raise ValueError(f"straggler: {config.strategy} has its own runtime; stragglers cover "
                         f"{', '.join(strategy_names(framework=None))}")


# Strategies whose workers each keep the optimizer state of their own shard only
# (`Strategy.shards_optimizer`; the registry's sharded step model): a checkpoint cannot restore
# their momentum.
SHARDS_OPTIMIZER = tuple(strategy_names(step_model="sharded_step"))


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
    if worker is not None and config.momentum and config.strategy in SHARDS_OPTIMIZER:
        # a checkpoint holds worker 0's optimizer state, not every rank's shard of it; the
        # restore refuses it (ddlstudy.train.rank._engine_restore), so an injected failure
        # would end the run: refuse up front (checkpoints alone are written, a rerun refuses)
        raise ValueError(f"fail_worker: checkpoints do not carry {config.strategy}'s sharded "
                         "optimizer state (momentum), so the restart could not restore it: "
                         "pass momentum 0 (plain SGD keeps no state)")
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


def fault_tolerant(config: TrainConfig) -> bool:
    """Runs with checkpoints or an injected failure recover; others fail fast (issue 12)."""
    return config.checkpoint_every is not None or config.fail_worker is not None


def continues_without_dead(config: TrainConfig) -> bool:
    """Async PS goes on with the live workers (no step waits for all); every other strategy
    needs every rank in each step, so it restarts from a checkpoint instead."""
    spec = get_strategy(config.strategy)
    return spec.family == "ps" and not spec.sync and config.workers > 1


def _empty_frame() -> pd.DataFrame:
    """An empty table, pandas imported only when a result is made."""
    import pandas as pd

    return pd.DataFrame()


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
    failures: pd.DataFrame = field(default_factory=_empty_frame)  # one row per dead rank event

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


