"""Study parameters: layered YAML files, validated in one place, where every default lives.

Long because: it is the one schema, a class per section with every field's default and bound,
and StudyParams' cross-section checks need them side by side. The bounds that need no schema
are in `bounds.py`, the bounded YAML reader in `reader.py`.

Files layer like papermill's `-f`: later files override earlier ones key by key (mappings merge,
lists and scalars replace). A bad key, type or value stops with one line naming the file, the key
and the fix, never a traceback.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from ddlstudy.chapters.registry import CHAPTER_NAMES
from ddlstudy.collectives.registry import ALGORITHMS
from ddlstudy.config.bounds import (  # noqa: F401 - params.X keeps working
    BUFFERS_PER_RANK,
    MAX_DEPTH,
    MAX_FILE_BYTES,
    MAX_LINE,
    MAX_NODES,
    MAX_SEED,
    MAX_TIMEOUT_S,
    MIN_INTERVAL_S,
    RUN_ID,
    ParamsError,
    _escape,
    _project_root,
    _short,
    collective_memory_problem,
    machine_memory,
    parse_size,
    replay_source_problem,
)
from ddlstudy.config.reader import (  # noqa: F401 - params.X keeps working
    _BoundedLoader,
    _expanded_size,
    _flow_depth,
    _read_text,
    _read_yaml,
    deep_merge,
)
from ddlstudy.network.profiles import MIN_SCALE, PROFILES
from ddlstudy.registry import LiveNames
from ddlstudy.strategies.registry import STRATEGIES, get_strategy, servers_for
from ddlstudy.workload.catalog import DATASETS as DATASET_SPECS
from ddlstudy.workload.catalog import MODELS as MODEL_SPECS
from ddlstudy.workload.catalog import SHAPES, file_datasets, real_datasets

# Names come from the registries, live (ddlstudy.registry.LiveNames): never a copy of them.
MODEL_NAMES = LiveNames(lambda: MODEL_SPECS)
ALGORITHM_NAMES = LiveNames(lambda: ALGORITHMS)
STRATEGY_NAMES = LiveNames(lambda: STRATEGIES)
# Strategies ddlstudy implements itself (torch optimizer on the engines; not Horovod / TF).
LOCAL_STRATEGY_NAMES = LiveNames(lambda: (s.name for s in STRATEGIES.values() if not s.framework))
DATASETS = LiveNames(lambda: DATASET_SPECS)
REAL_DATASETS = LiveNames(real_datasets)
FILE_DATASETS = LiveNames(file_datasets)
SHAPE_NAMES = LiveNames(lambda: SHAPES)
NETWORKS = LiveNames(lambda: ("none", *PROFILES))
# The chapters, from the one chapter registry (ddlstudy.chapters.registry): a live view.
CHAPTERS = CHAPTER_NAMES

def _replay_source(v: str) -> str:
    problem = replay_source_problem(v)
    if problem:
        raise ValueError(problem)
    return v


ReplaySource = Annotated[str, AfterValidator(_replay_source)]


def _check_seeds(v: list[int]) -> list[int]:
    if not v or len(set(v)) != len(v) or any(not 0 <= s <= MAX_SEED for s in v):
        raise ValueError(f"seeds must be distinct integers 0..{MAX_SEED}, e.g. [0, 1, 2]")
    return v


def _nonempty_models(v: list[str]) -> list[str]:
    if not v:
        raise ValueError("name at least one model, e.g. [resnet18]")
    return _known(v, MODEL_NAMES, "model")


def _worker_counts(v: list[int]) -> list[int]:
    if not v or any(w < 1 or w > 64 for w in v):
        raise ValueError("each worker count must be 1..64, e.g. [1, 2, 4]")
    return v


def _one_algorithm(v: str) -> str:
    return _known([v], ALGORITHM_NAMES, "algorithm")[0]


def _model_names(v: list[str]) -> list[str]:
    return _known(v, MODEL_NAMES, "model")


def _one_model(v: str) -> str:
    return _known([v], MODEL_NAMES, "model")[0]


def _one_shape(v: str) -> str:
    return _known([v], SHAPE_NAMES, "input shape")[0]


def _one_dataset(v: str) -> str:
    return _known([v], DATASETS, "dataset")[0]


def _one_real_dataset(v: str) -> str:
    return _known([v], REAL_DATASETS, "real dataset")[0]


def _one_file_dataset(v: str) -> str:
    return _known([v], FILE_DATASETS, "data set with files")[0]


WorkerCounts = Annotated[list[int], AfterValidator(_worker_counts)]
ShapeName = Annotated[str, AfterValidator(_one_shape)]
DatasetName = Annotated[str, AfterValidator(_one_dataset)]
RealDataset = Annotated[str, AfterValidator(_one_real_dataset)]
FileDataset = Annotated[str, AfterValidator(_one_file_dataset)]
AlgorithmName = Annotated[str, AfterValidator(_one_algorithm)]
ModelNames = Annotated[list[str], AfterValidator(_model_names)]
ModelList = Annotated[list[str], AfterValidator(_nonempty_models)]  # at least one
ModelName = Annotated[str, AfterValidator(_one_model)]


def _is_numeric(annotation: Any) -> bool:
    """int/float fields, bare, optional or in a list: a YAML `true` must not pass as 1 there."""
    if annotation in (int, float):
        return True
    return any(_is_numeric(a) for a in get_args(annotation))


def _has_bool(value: Any) -> bool:
    return isinstance(value, bool) or (isinstance(value, list)
                                       and any(isinstance(v, bool) for v in value))


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_bools_for_numbers(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name, info in cls.model_fields.items():
                if (name in data and _has_bool(data[name]) and info.annotation is not bool
                        and _is_numeric(info.annotation)):
                    raise PydanticCustomError("bool_number", "{field}", {"field": name,
                                                                         "value": data[name]})
        return data


LAUNCH_KEYS = {"launcher", "hosts", "ifname", "controller_ip", "remote_python", "env",
               "ssh_args", "launcher_args", "remote_root"}  # what a LaunchSpec is built from


class ClusterParams(_Section):
    workers: int = Field(5, ge=1, le=64, description="engines to start locally")
    profile: str | None = Field(None, description="ipyparallel profile to connect to (GPU nodes)")
    start_timeout_s: float = Field(120, gt=0, le=MAX_TIMEOUT_S)
    collective_timeout_s: float = Field(120, gt=0, le=MAX_TIMEOUT_S)
    # Beyond this machine (docs/cluster.md): ipyparallel's launchers, configured from here.
    launcher: Literal["local", "ssh", "slurm", "mpi"] = Field(
        "local", description="how engines start: ipyparallel's Local/SSH/Slurm/MPI launchers")
    hosts: list[str] = Field(default_factory=list, description="name:slots per node (ssh, mpi; "
                             "slurm: --nodelist); the engines are their slots' sum")
    ifname: str | None = Field(None, description="the nodes' interface: GLOO_/NCCL_SOCKET_IFNAME "
                               "and the rendezvous address")
    controller_ip: str | None = Field(None, description="controller address (default: ifname's "
                                      "address on the driver)")
    remote_python: str | None = Field(None, description="Python on the nodes (default: the "
                                      "driver's path)")
    env: dict[str, str] = Field(default_factory=dict, description="engines' environment")
    ssh_args: list[str] = Field(default_factory=list, description="extra ssh/scp arguments")
    launcher_args: list[str] = Field(default_factory=list,
                                     description="extra sbatch options / mpiexec arguments")
    remote_root: str | None = Field(None, description="the nodes' checkout when it is not where "
                                    "remote_python's ddlstudy lives: engines work there and "
                                    "relative paths (data.root) resolve there")
    # (the launch settings as JSON, their LaunchSpec): built once per settings, since validating
    # one resolves ifname's address; a copy with other settings rebuilds (the key differs)
    _spec: tuple[str, Any] | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _launch(self) -> ClusterParams:
        if self.launcher != "local" and self.profile:
            raise ValueError(f"launcher {self.launcher} starts its own engines: set profile to "
                             "null (or launcher to local)")
        self.launch_spec()  # one-line LaunchError (a ValueError) before anything starts
        return self

    def launch_spec(self) -> Any:
        """The validated ddlstudy.cluster.launchers.LaunchSpec of these settings, built on the
        first call for them (validation) and reused by every grid and cluster start after."""
        from ddlstudy.cluster.launchers import launch_spec

        key = self.model_dump_json(include=LAUNCH_KEYS)
        if self._spec is None or self._spec[0] != key:
            self._spec = (key, launch_spec(self.launcher, self.hosts, self.ifname,
                                           self.controller_ip, self.remote_python, self.env,
                                           self.ssh_args, self.launcher_args, self.remote_root))
        return self._spec[1]

    @classmethod
    def checked(cls, **values: Any) -> ClusterParams:
        """Validated settings from plain values (CLI flags); ParamsError with one line naming
        the key (`cluster.hosts: ...`) otherwise."""
        try:
            return cls(**values)
        except ValidationError as err:
            first = err.errors()[0]
            if not first["loc"]:  # the launch check (LaunchError): its line says it all
                raise ParamsError(_clip(f"cluster: {first['msg'].removeprefix('Value error, ')}"
                                        )) from None
            raise ParamsError(_clip(f"cluster.{_one_line(err)}")) from None

    def engine_kwargs(self) -> dict[str, Any]:
        """How the chapters' engines start (ddlstudy.cluster.engines.Cluster keywords beside
        `workers` and the timeouts): a running profile, or a launcher's spec when not local."""
        kwargs: dict[str, Any] = {"profile": self.profile}
        if self.launcher != "local":
            kwargs["launch"] = self.launch_spec()
        return kwargs

    def cluster_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ddlstudy.cluster.engines.Cluster."""
        kwargs: dict[str, Any] = {"workers": self.workers, "profile": self.profile,
                                  "start_timeout_s": self.start_timeout_s,
                                  "collective_timeout_s": self.collective_timeout_s}
        if self.launcher != "local":
            kwargs["launch"] = self.launch_spec()
        return kwargs


class DataParams(_Section):
    root: str = Field("data", description="relative paths are from the project root")
    require: list[FileDataset] = Field(
        default_factory=list, description="data sets that must be present before the run starts")
    verify: bool = Field(True, description="check the known checksums at every load; false "
                         "loads your own files of the same format")

    def path(self) -> Path:
        from ddlstudy.records.store import project_root

        root = Path(self.root).expanduser()
        return root if root.is_absolute() else project_root() / root


class CollectivesParams(_Section):
    ranks: list[int] = Field(default_factory=lambda: [2, 4])
    min_bytes: int = 8
    max_bytes: int = 16 << 20
    step_factor: int = Field(4, ge=2, le=1 << 20)
    iters: int = Field(10, ge=1, le=1_000_000)
    warmup: int = Field(3, ge=0, le=1_000_000)
    algorithms: list[str] = Field(default_factory=lambda: list(ALGORITHM_NAMES))
    dtype: Literal["float32", "float64"] = "float32"

    @field_validator("min_bytes", "max_bytes", mode="before")
    @classmethod
    def _size(cls, v: Any) -> int:
        size = parse_size(v)
        if size < 1:
            raise ValueError("must be at least 1 byte")
        if size > machine_memory():
            raise ValueError(f"{size} bytes is more than this machine's memory "
                             f"({machine_memory()} bytes)")
        return size

    @field_validator("ranks")
    @classmethod
    def _ranks(cls, v: list[int]) -> list[int]:
        if not v or any(r < 1 or r > 64 for r in v):
            raise ValueError("each rank count must be 1..64, e.g. [2, 4]")
        return v

    @field_validator("algorithms")
    @classmethod
    def _algorithms(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("name at least one algorithm, e.g. [ring, tree]")
        return _known(v, ALGORITHM_NAMES, "algorithm")

    @model_validator(mode="after")
    def _order(self) -> CollectivesParams:
        if self.min_bytes > self.max_bytes:
            raise ValueError(f"min_bytes ({self.min_bytes}) is above max_bytes ({self.max_bytes})")
        problem = collective_memory_problem(self.max_bytes, max(self.ranks))
        if problem:
            raise ValueError(problem)
        return self


class TrainingParams(_Section):
    models: ModelNames = Field(default_factory=lambda: ["resnet18"])
    shape: ShapeName = "cifar"
    dataset: DatasetName = "synthetic"
    workers: WorkerCounts = Field(default_factory=lambda: [1, 2, 4])
    strategies: list[str] = Field(default_factory=lambda: ["ps_sync", "allreduce"])
    algorithm: AlgorithmName = "ring"
    servers: int | None = Field(None, ge=1, le=64,
                                description="PS server processes for ps_sharded (None: 2)")
    batch_size: int = Field(32, ge=1, le=1 << 16)
    steps: int = Field(20, ge=1, le=10_000_000)
    warmup_steps: int = Field(3, ge=0, le=1_000_000)
    lr: float = Field(1e-4, gt=0, le=100)
    bucket_mb: float = Field(25.0, gt=0, le=1 << 16)
    overlap: bool = True
    network: str = "none"
    compute: Literal["real", "replay"] = "real"
    replay_source: ReplaySource = Field("measured", description="'measured', 'gpu' or a CSV path")

    def servers_for(self, strategy: str) -> int:
        """Engines a strategy needs beyond its workers (server processes, a TF chief), from
        its registry entry; `servers` applies to strategies whose server count is a choice."""
        spec = get_strategy(strategy)
        chosen = self.servers if spec.servers_configurable else None
        return servers_for(strategy, chosen) + spec.extra_engines

    @field_validator("strategies")
    @classmethod
    def _strategies(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("name at least one strategy, e.g. [ps_sync, allreduce]")
        return _known(v, STRATEGY_NAMES, "strategy")

    @field_validator("network")
    @classmethod
    def _network(cls, v: str) -> str:
        return _known([v], NETWORKS, "network")[0]


class NetworkParams(_Section):
    """The emulated cluster network (ddlstudy.network.emulated.netem) and chapter 05's profile
    comparison."""

    scale: float | None = Field(None, ge=MIN_SCALE, le=1, description="emulated link rate = "
                                "profile rate x scale; None: the largest that fits the host "
                                "(netem.scale_for)")
    offload: bool = Field(True, description="segmentation offload on the emulated links: on moves "
                          "several times more per CPU; chapter 04 turns it off to count packets")
    gpus_per_node: int = Field(1, ge=1, le=64, description="engines per emulated node: they share "
                               "the node's shaped link and talk inside it over loopback, "
                               "unshaped (ddlstudy.network.emulated.nodes)")
    latency: bool = Field(False, description="emulate each profile's one-way latency x 1/scale "
                          "per inter-node message, a sender-side delay in the transport "
                          "(ddlstudy.collectives.latency); only the Comm harness's messages")
    profiles: list[str] = Field(default_factory=lambda: ["IB-EDR", "10GbE"])
    model: ModelName = "resnet50"
    workers: WorkerCounts = Field(default_factory=lambda: [1, 2, 4])
    # Pipelined (isend/irecv) ring, as Horovod/NCCL run it: segments in flight across steps.
    algorithm: AlgorithmName = "ring_pipelined"
    batch_size: int = Field(32, ge=1, le=1 << 16)
    steps: int = Field(2, ge=1, le=10_000_000)
    warmup_steps: int = Field(1, ge=0, le=1_000_000)
    replay_source: ReplaySource = Field("gpu", description="'measured', 'gpu' or a CSV path")
    # chapter 03's emulated section: PS vs ring per model on `chapter03_profile` links with
    # compute replayed (workers, algorithm, steps as above); [] leaves only the one-host run
    chapter03_models: ModelNames = Field(default_factory=list)
    chapter03_profile: str = "10GbE"
    # ... or on a paper's testbed (ddlstudy.testbeds): its link (rate, latency), GPUs per node
    # and device (replayed at its published row's shape and batch) replace chapter03_profile,
    # gpus_per_node, latency, replay_source, shape and batch_size for that grid
    chapter03_testbed: str | None = Field(None, description="a testbed name (ddlstudy.testbeds, "
                                          "e.g. shi2019); None: the settings above")
    # interleaved repeats of each emulated cell (chapters 03 emulated and 05): an emulated step
    # is slow and steady, so 1 repeat (its timed steps give the spread) keeps make report short
    repeats: int = Field(1, ge=1, le=100)
    # chapter 05's all-reduce alone on `bench_profile` links (the collectives bench, emulated),
    # from which the alpha-beta model is validated on shaped links
    bench_profile: str = "10GbE"
    bench_ranks: WorkerCounts = Field(default_factory=lambda: [2, 4])
    bench_sizes: list[str] = Field(default_factory=lambda: ["64K", "4M"],
                                   description="smallest, largest message; x4 steps between")
    bench_algorithms: list[AlgorithmName] = Field(default_factory=lambda: [
        "ring", "ring_pipelined", "recursive_doubling", "tree", "ps"])
    bench_iters: int = Field(3, ge=1, le=10_000)

    @field_validator("bench_sizes")
    @classmethod
    def _bench_sizes(cls, v: list[str]) -> list[str]:
        if not v or any(parse_size(s) < 1 for s in v):
            raise ValueError("give the smallest and largest message, e.g. [64K, 4M]")
        return v

    @field_validator("chapter03_profile", "bench_profile")
    @classmethod
    def _chapter03_profile(cls, v: str) -> str:
        return _known([v], NETWORKS[1:], "network profile")[0]

    @field_validator("profiles")
    @classmethod
    def _profiles(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("name at least one profile, e.g. [IB-EDR, 10GbE]")
        return _known(v, NETWORKS[1:], "network profile")

    @model_validator(mode="after")
    def _chapter03_testbed(self) -> NetworkParams:
        """A testbed must exist and have a compute row for every chapter03 model."""
        if self.chapter03_testbed is not None:
            from ddlstudy.testbeds import emulation

            for model in self.chapter03_models or ["resnet50"]:
                emulation.settings(self.chapter03_testbed, model)  # ValueError: one line
        return self


class MonitorParams(_Section):
    interval_s: float = Field(0.5, ge=MIN_INTERVAL_S, le=3600)
    workers: WorkerCounts = Field(default_factory=lambda: [2, 4])
    models: ModelList = Field(default_factory=lambda: ["resnet18"])
    steps: int = Field(10, ge=1, le=10_000_000)


class ProjectionParams(_Section):
    """Chapter 06: the step-time model (ddlstudy.analysis.costmodel), validated on measured cells,
    projected
    to the papers' scales; every list below is a what-if a reader can change."""

    records: list[str] = Field(default_factory=lambda: ["results/reference"],
                               description="measured run folders to validate on (relative to "
                               "the project root), besides this run's own")
    replay_source: ReplaySource = Field("gpu", description="compute table: 'gpu' or a device CSV")
    compute_scale: float = Field(1.0, gt=0, le=1000,
                                 description="what-if: x the table's compute time")
    models: ModelList = Field(default_factory=lambda: ["alexnet", "vgg16", "vgg19", "resnet50",
                                                        "resnet152"])
    shape: ShapeName = "cifar"
    batch_size: int = Field(32, ge=1, le=1 << 16)
    workers: list[int] = Field(default_factory=lambda: [1, 2, 3, 4, 5, 6])
    profile: str = "10GbE"
    scaling_model: ModelName = "resnet50"
    scaling_shape: ShapeName = "imagenet"
    scaling_batch_size: int = Field(128, ge=1, le=1 << 16)
    scaling_workers: list[int] = Field(default_factory=lambda: [1, 2, 4, 8, 16, 32, 64, 128,
                                                                256, 512, 1024])
    profiles: list[str] = Field(default_factory=lambda: ["IB-EDR", "10GbE"])
    latency_s: float | None = Field(None, ge=0, le=10, description="what-if: one latency for every "
                                    "profile (None: each profile's own)")
    algorithm: AlgorithmName = "ring_pipelined"
    servers: list[int] = Field(default_factory=lambda: [1, 4, 0],
                               description="PS server counts; 0 means S = N (BytePS)")
    bucket_mb: list[float] = Field(default_factory=lambda: [1.0, 5.0, 25.0, 100.0])

    @field_validator("workers", "scaling_workers")
    @classmethod
    def _workers(cls, v: list[int]) -> list[int]:
        if not v or any(w < 1 or w > 4096 for w in v):
            raise ValueError("each worker count must be 1..4096, e.g. [1, 8, 64, 512]")
        return v

    @field_validator("profile")
    @classmethod
    def _profile(cls, v: str) -> str:
        return _known([v], NETWORKS[1:], "network profile")[0]

    @field_validator("profiles")
    @classmethod
    def _profiles(cls, v: list[str]) -> list[str]:
        return _known(v, NETWORKS[1:], "network profile")

    @field_validator("servers")
    @classmethod
    def _servers(cls, v: list[int]) -> list[int]:
        if not v or any(s < 0 or s > 4096 for s in v):
            raise ValueError("server counts must be 1..4096, or 0 for S = N, e.g. [1, 4, 0]")
        return v

    @field_validator("bucket_mb")
    @classmethod
    def _buckets(cls, v: list[float]) -> list[float]:
        if not v or any(not 0 < b <= 1 << 16 for b in v):
            raise ValueError("bucket sizes must be in (0, 65536] MiB, e.g. [1, 25]")
        return v

    @field_validator("records")
    @classmethod
    def _records(cls, v: list[str]) -> list[str]:
        for folder in v:
            path = Path(folder)
            path = path if path.is_absolute() else _project_root() / path
            if path.exists() and not (path / "meta.json").is_file():
                raise ValueError(f"{folder!r} is not a run folder (no meta.json in it); name "
                                 "measured run folders, e.g. [results/reference]")
        return v


LOCAL_STRATEGIES = LOCAL_STRATEGY_NAMES  # from the registry: strategies without a framework


def _local_strategies(v: list[str]) -> list[str]:
    """Strategies with a torch optimizer on this study's engines (not Horovod / TensorFlow)."""
    return _known(v, LOCAL_STRATEGIES, "strategy")


LocalStrategies = Annotated[list[str], AfterValidator(_local_strategies)]


class ConvergenceParams(_Section):
    """Chapter 08: accuracy and loss per epoch per strategy, async PS staleness, and Fourie
    2019's all-reduce order vs accuracy (Fig 16)."""

    datasets: list[RealDataset] = Field(default_factory=lambda: ["mnist", "fashion_mnist"])
    models: ModelList = Field(default_factory=lambda: ["mlp", "shallow_cnn"])
    strategies: LocalStrategies = Field(default_factory=lambda: [
        "single", "ps_sync", "ps_async", "allreduce", "ddp"])
    model_strategies: dict[ModelName, LocalStrategies] = Field(
        default_factory=dict, description="per model, the strategies its curves run (default: "
        "strategies): a slow model can run fewer")
    workers: int = Field(2, ge=1, le=64, description="N: every strategy runs N workers of "
                         "batch_size; single runs one worker of N x batch_size")
    batch_size: int = Field(32, ge=1, le=1 << 16)
    epochs: int = Field(2, ge=1, le=1000)
    lr: float = Field(0.05, gt=0, le=100)
    seeds: list[int] = Field(default_factory=lambda: [0, 1, 2])
    async_workers: WorkerCounts = Field(default_factory=lambda: [1, 2, 4])
    async_model: ModelName = "mlp"
    mlp_activation: Literal["sigmoid", "relu", "tanh"] = Field(
        "sigmoid", description="the MLP's activation (Fourie 2019's Genann: sigmoid)")
    bracketing_algorithms: list[str] = Field(default_factory=lambda: [
        "ring", "tree", "recursive_doubling", "reference"])
    bracketing_dataset: RealDataset = "mnist"
    bracketing_workers: int = Field(4, ge=2, le=64)
    bracketing_batch_size: int = Field(32, ge=1, le=1 << 16)
    bracketing_epochs: int = Field(3, ge=1, le=1000)
    bracketing_lr: float = Field(0.5, gt=0, le=100)

    @field_validator("bracketing_algorithms")
    @classmethod
    def _algorithms(cls, v: list[str]) -> list[str]:
        return _known(v, ALGORITHM_NAMES, "algorithm")

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v: list[int]) -> list[int]:
        return _check_seeds(v)


class BatchSizeParams(_Section):
    """Chapter 09: Pani's batch-size sweep (1 vs N workers) and Malik 2018's emulated one."""

    models: ModelList = Field(default_factory=lambda: ["shallow_cnn", "resnet18"])
    accuracy_models: ModelNames = Field(default_factory=lambda: ["shallow_cnn"],
                                        description="trained `epochs` full passes and tested; "
                                        "the others run `steps` timed steps (throughput only)")
    dataset: RealDataset = "mnist"
    batch_sizes: list[int] = Field(default_factory=lambda: [32, 128, 512, 2048, 8192])
    max_batch: dict[str, int] = Field(default_factory=lambda: {"resnet18": 512},
                                      description="per model: largest batch this host can hold")
    workers: WorkerCounts = Field(default_factory=lambda: [1, 2])
    strategies: LocalStrategies = Field(default_factory=lambda: ["allreduce"])
    epochs: int = Field(1, ge=1, le=1000)
    steps: int = Field(5, ge=1, le=1_000_000)
    lr: float = Field(0.01, gt=0, le=100)
    lr_scaling: Literal["none", "linear"] = "linear"
    lr_base_batch: int = Field(32, ge=1, le=1 << 20)
    warmup_epochs: float = Field(0.25, ge=0, le=1000, description="learning-rate warm-up")
    seeds: list[int] = Field(default_factory=lambda: [0, 1])
    malik_models: ModelNames = Field(default_factory=lambda: ["alexnet", "resnet50"])
    malik_batch_sizes: list[int] = Field(default_factory=lambda: [64, 128, 256, 512])
    malik_workers: int = Field(2, ge=1, le=64)
    malik_profile: str = "10GbE"
    malik_steps: int = Field(3, ge=1, le=1_000_000)
    malik_repeats: int = Field(1, ge=1, le=100, description="independent runs per (model, "
                               "batch) cell, interleaved; a claim decides only from 5")

    @field_validator("batch_sizes", "malik_batch_sizes")
    @classmethod
    def _batches(cls, v: list[int]) -> list[int]:
        if not v or any(b < 1 or b > 1 << 16 for b in v):
            raise ValueError("each batch size must be 1..65536, e.g. [32, 128, 512]")
        return v

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v: list[int]) -> list[int]:
        return _check_seeds(v)

    @field_validator("max_batch")
    @classmethod
    def _max_batch(cls, v: dict[str, int]) -> dict[str, int]:
        _known(list(v), MODEL_NAMES, "model")
        if any(b < 1 for b in v.values()):
            raise ValueError("max_batch values must be >= 1, e.g. {resnet18: 512}")
        return v

    @field_validator("malik_profile")
    @classmethod
    def _malik_profile(cls, v: str) -> str:
        return _known([v], NETWORKS[1:], "network profile")[0]


class FrameworksParams(_Section):
    """Chapter 07: Horovod and TensorFlow beside ddlstudy's own strategies and torch DDP on the
    same links (Wang (NCHC): TF parameter servers vs Horovod; Shi 2019: TF PS vs Horovod ring).
    Profile "none": loopback, unshaped (then compute should be real)."""

    strategies: list[str] = Field(default_factory=lambda: [
        "horovod", "tf_ps_sync", "tf_allreduce", "ps_sync", "allreduce", "ddp"])
    model: ModelName = "resnet50"
    workers: WorkerCounts = Field(default_factory=lambda: [1, 2, 4])
    profiles: list[str] = Field(default_factory=lambda: ["10GbE", "IB-EDR"])
    algorithm: AlgorithmName = "ring_pipelined"
    batch_size: int = Field(32, ge=1, le=1 << 16)
    steps: int = Field(3, ge=1, le=10_000_000)
    warmup_steps: int = Field(1, ge=0, le=1_000_000)
    compute: str = Field("replay", pattern="^(real|replay)$")
    replay_source: ReplaySource = Field("gpu", description="'measured', 'gpu' or a CSV path")
    repeats: int = Field(1, ge=1, le=100, description="interleaved repeats per cell (1: the "
                         "timed chunks of each run give the spread, labelled so)")
    timeline: bool = Field(True, description="record and draw one Horovod run's timeline")

    @field_validator("strategies")
    @classmethod
    def _strategies(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("name at least one strategy, e.g. [horovod, tf_ps_sync]")
        return _known(v, STRATEGY_NAMES, "strategy")

    @field_validator("profiles")
    @classmethod
    def _profiles(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("name at least one profile, e.g. [10GbE, IB-EDR] (none: loopback)")
        return _known(v, NETWORKS, "network profile")


class FaultsParams(_Section):
    """Chapter 10: a worker's engine SIGKILLed at `fail_at_step`; per strategy, a clean and a
    failing run per repeat (interleaved), both checkpointing every `checkpoint_every` steps."""

    strategies: LocalStrategies = Field(default_factory=lambda: [
        "allreduce", "ddp", "ps_sync", "ps_async"])
    model: ModelName = "mlp"
    dataset: DatasetName = "digits"
    workers: int = Field(3, ge=2, le=64, description="N >= 2: a survivor must be left")
    batch_size: int = Field(32, ge=1, le=1 << 16)
    steps: int = Field(40, ge=1, le=1_000_000)
    warmup_steps: int = Field(2, ge=0, le=1_000_000)
    lr: float = Field(0.05, gt=0, le=100)
    checkpoint_every: int = Field(5, ge=1, le=1_000_000)
    fail_worker: int = Field(1, ge=0)
    fail_at_step: int = Field(12, ge=1)
    repeats: int = Field(3, ge=1, le=100)
    timeout_s: float = Field(20.0, gt=0, le=MAX_TIMEOUT_S,
                             description="collective timeout: bounds detection and recovery")

    @model_validator(mode="after")
    def _fits(self) -> FaultsParams:
        if not self.strategies:
            raise ValueError("name at least one strategy, e.g. [allreduce, ps_sync]")
        if self.fail_worker >= self.workers:
            raise ValueError(f"fail_worker {self.fail_worker} must be a worker rank "
                             f"0..{self.workers - 1}")
        if self.fail_at_step >= self.warmup_steps + self.steps:
            raise ValueError(f"fail_at_step {self.fail_at_step} must be below warmup_steps + "
                             f"steps = {self.warmup_steps + self.steps}")
        if single := [s for s in self.strategies if STRATEGIES[s].family == "single"]:
            raise ValueError(f"{single[0]} runs one worker, nothing survives it: drop it")
        return self


class BeyondParams(_Section):
    """Chapter 11: ZeRO-1/2/3, FSDP and compressed all-reduce beside chapter 03's PS and ring at
    `workers`, on the same emulated links with compute replayed (`network`, `compute`), bytes per
    step per rank and images/sec; then `straggler_arms` without / with worker `straggler_rank`
    slowed by each of `straggler_factors` (and `straggler_delay_s` per step)."""

    strategies: LocalStrategies = Field(default_factory=lambda: [
        "ps_sync", "allreduce", "zero1", "zero2", "zero3", "fsdp", "ddp", "ddp_fp16",
        "ddp_powersgd1"])
    model: ModelName = "resnet18"
    shape: ShapeName = "cifar"
    dataset: DatasetName = "synthetic"
    workers: int = Field(4, ge=2, le=64, description="N: every strategy at the same N")
    network: str = Field("10GbE", description="a link profile (emulated, as chapter 03's "
                         "emulated cells; needs root, else loopback, said in the records) or "
                         "none (local engines)")
    scale: float | None = Field(None, ge=MIN_SCALE, le=1, description="emulated link rate = "
                                "profile rate x scale; None: calibrated (netem.scale_for)")
    compute: Literal["real", "replay"] = "replay"
    real_compute: LocalStrategies = Field(default_factory=lambda: [
        "zero3", "fsdp", "ddp_fp16", "ddp_bf16", "ddp_powersgd1", "ddp_powersgd2",
        "ddp_powersgd4", "ddp_topk1"], description="strategies that have no compute replay "
        "(they gather or hook inside forward/backward): under compute replay they compute for "
        "real, and their images/sec is not compared with replayed cells (bytes still are)")
    replay_source: ReplaySource = Field("gpu", description="'measured', 'gpu' or a CSV path")
    algorithm: AlgorithmName = "ring_pipelined"
    batch_size: int = Field(32, ge=1, le=1 << 16)
    steps: int = Field(3, ge=1, le=1_000_000)
    warmup_steps: int = Field(1, ge=0, le=1_000_000)
    lr: float = Field(0.01, gt=0, le=100)
    repeats: int = Field(5, ge=1, le=100, description="independent runs per cell (a claim "
                         "decides from >= 5)")
    timeout_s: float = Field(900.0, gt=0, le=MAX_TIMEOUT_S)
    straggler_arms: list[str] = Field(default_factory=lambda: [
        "ps_sync", "ps_async", "ring", "hierarchical", "zero1"], description="arms of "
        "ddlstudy.experiments.stragglers.ARMS; [] runs no straggler cells")
    straggler_rank: int = Field(1, ge=0)
    straggler_factors: list[float] = Field(default_factory=lambda: [2.0])
    straggler_delay_s: float = Field(0.0, ge=0, le=60)
    # the accuracy cost of compression in chapter 08's terms: final test accuracy of each
    # strategy minus the first's (uncompressed), same seeds, local engines, real compute
    accuracy_strategies: LocalStrategies = Field(default_factory=lambda: [
        "ddp", "ddp_fp16", "ddp_powersgd1"], description="the first is the baseline; [] skips")
    accuracy_model: ModelName = "mlp"
    accuracy_dataset: RealDataset = "digits"
    accuracy_workers: int = Field(2, ge=2, le=64)
    accuracy_batch_size: int = Field(32, ge=1, le=1 << 16)
    accuracy_epochs: int = Field(3, ge=1, le=1000)
    accuracy_steps: int | None = Field(None, ge=1, le=1_000_000, description="when set, train "
                                       "this many steps (after 2 warm-up steps) instead of "
                                       "accuracy_epochs: a first part of one shuffled epoch")
    accuracy_lr: float = Field(0.5, gt=0, le=100)
    accuracy_seeds: list[int] = Field(default_factory=lambda: [0, 1, 2, 3, 4])
    # time to accuracy with one straggler: real training on a real data set, local engines,
    # evaluated after every epoch; the target is fixed here, before the runs
    tta_arms: list[str] = Field(default_factory=lambda: ["ps_sync", "ps_async", "ring"],
                                description="arms of ddlstudy.experiments.stragglers.ARMS "
                                "without a gpus_per_node > 1 (local engines); [] skips")
    tta_model: ModelName = "mlp"
    tta_dataset: RealDataset = "digits"
    tta_workers: int = Field(3, ge=2, le=64)
    tta_batch_size: int = Field(16, ge=1, le=1 << 16)
    tta_epochs: int = Field(12, ge=1, le=1000)
    tta_lr: float = Field(0.1, gt=0, le=100)
    tta_delay_s: float = Field(0.02, gt=0, le=60, description="worker straggler_rank's fixed "
                               "wait before each of its steps")
    tta_target: float = Field(0.95, gt=0, le=1, description="test accuracy whose first "
                              "crossing is timed; fixed before the runs")
    tta_seeds: list[int] = Field(default_factory=lambda: [0, 1, 2, 3, 4])
    # where each wins (analytic): the step model's fastest strategy over compute x bandwidth
    regime_model: ModelName = "resnet50"
    regime_shape: ShapeName = "imagenet"

    @field_validator("accuracy_seeds", "tta_seeds")
    @classmethod
    def _seeds(cls, v: list[int]) -> list[int]:
        return _check_seeds(v)

    @field_validator("strategies")
    @classmethod
    def _has_ring(cls, v: list[str]) -> list[str]:
        if "allreduce" not in v:
            raise ValueError("name allreduce among the strategies: every bytes ratio divides "
                             "by the ring's")
        return v

    @field_validator("network")
    @classmethod
    def _network(cls, v: str) -> str:
        return _known([v], NETWORKS, "network")[0]

    @model_validator(mode="after")
    def _straggler(self) -> BeyondParams:
        if self.straggler_rank >= self.workers:
            raise ValueError(f"straggler_rank {self.straggler_rank} must be a worker rank "
                             f"0..{self.workers - 1}")
        if any(not 1 <= f <= 100 for f in self.straggler_factors):
            raise ValueError("each straggler factor must be in [1, 100], e.g. [2.0]")
        if self.straggler_arms and not self.straggler_delay_s and not any(
                f > 1 for f in self.straggler_factors):
            raise ValueError("the straggler slows nothing: give a factor > 1 or "
                             "straggler_delay_s > 0 (or straggler_arms: [])")
        return self


class ReportParams(_Section):
    chapters: list[str] = Field(default_factory=lambda: list(CHAPTERS))
    kernel: str = "python3"
    cell_timeout_s: int = Field(1800, ge=10, le=int(MAX_TIMEOUT_S))

    @field_validator("chapters")
    @classmethod
    def _chapters(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("name at least one chapter, e.g. [00_background]")
        return _known(v, CHAPTERS, "chapter")


class StudyParams(_Section):
    """The whole study's parameter set."""

    run_id: str = Field("default", pattern=RUN_ID,
                        description="a plain folder name under the output root")
    seed: int = Field(0, ge=0, le=MAX_SEED)
    repeats: int = Field(3, ge=1, le=100, description="interleaved repeats of every measured "
                         "cell that feeds a verdict (grid cells, chapter 02's collectives)")
    cluster: ClusterParams = Field(default_factory=ClusterParams)
    data: DataParams = Field(default_factory=DataParams)
    collectives: CollectivesParams = Field(default_factory=CollectivesParams)
    training: TrainingParams = Field(default_factory=TrainingParams)
    network: NetworkParams = Field(default_factory=NetworkParams)
    monitor: MonitorParams = Field(default_factory=MonitorParams)
    projection: ProjectionParams = Field(default_factory=ProjectionParams)
    convergence: ConvergenceParams = Field(default_factory=ConvergenceParams)
    batch_sweep: BatchSizeParams = Field(default_factory=BatchSizeParams)
    frameworks: FrameworksParams = Field(default_factory=FrameworksParams)
    faults: FaultsParams = Field(default_factory=FaultsParams)
    beyond: BeyondParams = Field(default_factory=BeyondParams)
    report: ReportParams = Field(default_factory=ReportParams)

    @model_validator(mode="after")
    def _chapter03_has_models(self) -> StudyParams:
        if ("03_ps_vs_ring" in self.report.chapters and not self.training.models
                and not self.network.chapter03_models):
            raise ValueError("chapter 03 is in report.chapters but training.models and "
                             "network.chapter03_models are both empty; name a model or drop "
                             "the chapter")
        return self

    @model_validator(mode="after")
    def _fits_cluster(self) -> StudyParams:
        if self.cluster.profile:
            return self
        need = max([*self.collectives.ranks, *(w + 1 for w in self.monitor.workers),
                    *self.network.workers,
                    *(w + self.training.servers_for(s) for w in self.training.workers
                      for s in self.training.strategies)])
        have = self.cluster.launch_spec().slots or self.cluster.workers  # hosts' slots, if any
        if need > have:
            raise ValueError(f"the grid needs {need} engines but cluster.workers is "
                             f"{self.cluster.workers}" if have == self.cluster.workers else
                             f"the grid needs {need} engines but cluster.hosts hold {have}")
        return self

    def digest(self) -> str:
        """Stable hash of the validated values: a resumed run reruns only what changed."""
        blob = json.dumps(self.model_dump(mode="json"), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _known(values: list[str], valid: Sequence[str], what: str) -> list[str]:
    bad = [v for v in values if v not in valid]
    if bad:
        raise ValueError(f"unknown {what} {bad[0]!r}; choose from {', '.join(valid)}")
    return values


def load_params(*paths: str | Path, check_data: bool = True) -> StudyParams:
    """Layer the files (later wins) and validate; ParamsError carries the one-line message."""
    merged: dict[str, Any] = {}
    for path in paths:
        merged = deep_merge(merged, _read_yaml(Path(path)))
    names = ", ".join(str(p) for p in paths) or "<defaults>"
    try:
        params = StudyParams.model_validate(merged)
    except ValidationError as err:
        raise ParamsError(_clip(f"{names}: {_one_line(err)}")) from None
    if check_data:
        _check_data(params, names)
    return params


def _check_data(params: StudyParams, names: str) -> None:
    root = params.data.path()
    needed = set(params.data.require)
    if DATASET_SPECS[params.training.dataset].folder:
        needed.add(params.training.dataset)
    for name in sorted(needed):
        folder = root / str(DATASET_SPECS[name].folder)
        if not folder.is_dir():
            fix = ("run `make data`" if DATASET_SPECS[name].fetchable else
                   "put the python-version CIFAR-10 batches there (see README)")
            raise ParamsError(f"{names}: data.root: {folder} is missing (needed for {name}); {fix}")


def _one_line(err: ValidationError) -> str:
    first = err.errors()[0]
    key = ".".join(str(p) for p in first["loc"]) or "(top level)"
    kind, msg = first["type"], first["msg"]
    if kind == "extra_forbidden":
        return f"{key}: unknown key; remove it or check its spelling against params/default.yaml"
    if kind == "missing":
        return f"{key}: required key is missing; add it"
    if kind == "bool_number":
        ctx = first.get("ctx", {})
        return (f"{key}.{ctx.get('field')}: a boolean where a number belongs (got "
                f"{_short(ctx.get('value'))}); write a number")
    msg = _clip(msg.removeprefix("Value error, "), 160)
    return f"{key}: {msg} (got {_short(first.get('input'))}); fix this value"


def _clip(line: str, limit: int = MAX_LINE) -> str:
    line = " ".join(_escape(line).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def main(argv: list[str] | None = None) -> int:
    """`python -m ddlstudy.params FILE...`: validate and print the merged parameters (no FILE:
    the defaults); 0 done, 2 bad input with one line."""
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("-h", "--help"):
        print("usage: python -m ddlstudy.params FILE [FILE ...]   (ddlstudy params ...)\n"
              "Validate the parameter files, later ones layered over earlier ones, and print the "
              "merged parameters as YAML (no FILE: the defaults).")
        return 0
    try:
        params = load_params(*args)
    except ParamsError as err:
        print(f"error: {_clip(str(err))}", file=sys.stderr)
        return 2
    print(yaml.safe_dump(params.model_dump(mode="json"), sort_keys=False))
    return 0


if __name__ == "__main__":
    from ddlstudy.host import entry
    raise SystemExit(entry.run(main))
