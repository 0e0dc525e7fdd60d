"""Study parameters: layered YAML files, validated in one place, where every default lives.

Files layer like papermill's `-f`: later files override earlier ones key by key (mappings merge,
lists and scalars replace). A bad key, type or value stops with one line naming the file, the key
and the fix, never a traceback.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

MODEL_NAMES = ("alexnet", "vgg16", "vgg19", "resnet18", "resnet50", "resnet152", "googlenet",
               "shallow_cnn", "mlp")
ALGORITHM_NAMES = ("ring", "ring_pipelined", "recursive_doubling", "rabenseifner", "tree", "ps",
                   "ps_sharded", "reference")
STRATEGY_NAMES = ("single", "ps_sync", "ps_async", "ps_sharded", "allreduce", "ddp")
DATASETS = ("synthetic", "digits", "mnist", "fashion_mnist", "cifar10")
NETWORKS = ("none", "1GbE", "10GbE", "25GbE", "IB-EDR")
CHAPTERS = ("00_background", "01_cluster_setup", "02_collectives", "03_ps_vs_ring",
            "04_utilization_traffic", "05_network_profiles", "99_conclusions")

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMG]i?B?|B)?\s*$", re.IGNORECASE)


class ParamsError(ValueError):
    """One line: which file, which key, what is wrong, how to fix it."""


def parse_size(value: int | str) -> int:
    """'64M' -> 67108864 (K/M/G are powers of 1024, as nccl-tests' -b/-e)."""
    if isinstance(value, int):
        return value
    m = _SIZE.match(str(value))
    if not m:
        raise ValueError(f"{value!r} is not a size; write e.g. 8, 8K, 64M or 1G")
    number, unit = float(m.group(1)), (m.group(2) or "B").upper()[:1]
    return int(number * {"B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[unit])


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


WorkerCounts = Annotated[list[int], AfterValidator(_worker_counts)]
AlgorithmName = Annotated[str, AfterValidator(_one_algorithm)]
ModelNames = Annotated[list[str], AfterValidator(_model_names)]
ModelName = Annotated[str, AfterValidator(_one_model)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ClusterParams(_Section):
    workers: int = Field(4, ge=1, le=64, description="engines to start locally")
    profile: str | None = Field(None, description="ipyparallel profile to connect to (GPU nodes)")
    start_timeout_s: float = Field(120, gt=0)
    collective_timeout_s: float = Field(120, gt=0)


class DataParams(_Section):
    root: str = Field("data", description="relative paths are from the project root")
    require: list[Literal["mnist", "fashion_mnist", "cifar10"]] = Field(
        default_factory=list, description="data sets that must be present before the run starts")

    def path(self) -> Path:
        from ddlstudy.records import project_root

        root = Path(self.root).expanduser()
        return root if root.is_absolute() else project_root() / root


class CollectivesParams(_Section):
    ranks: list[int] = Field(default_factory=lambda: [2, 4])
    min_bytes: int = 8
    max_bytes: int = 16 << 20
    step_factor: int = Field(4, ge=2)
    iters: int = Field(10, ge=1)
    warmup: int = Field(3, ge=0)
    algorithms: list[str] = Field(default_factory=lambda: list(ALGORITHM_NAMES))
    dtype: Literal["float32", "float64"] = "float32"

    @field_validator("min_bytes", "max_bytes", mode="before")
    @classmethod
    def _size(cls, v: Any) -> int:
        size = parse_size(v)
        if size < 1:
            raise ValueError("must be at least 1 byte")
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
        return _known(v, ALGORITHM_NAMES, "algorithm")

    @model_validator(mode="after")
    def _order(self) -> CollectivesParams:
        if self.min_bytes > self.max_bytes:
            raise ValueError(f"min_bytes ({self.min_bytes}) is above max_bytes ({self.max_bytes})")
        return self


class TrainingParams(_Section):
    models: ModelNames = Field(default_factory=lambda: ["resnet18"])
    shape: Literal["cifar", "mnist", "imagenet"] = "cifar"
    dataset: Literal["synthetic", "digits", "mnist", "fashion_mnist", "cifar10"] = "synthetic"
    workers: WorkerCounts = Field(default_factory=lambda: [1, 2, 4])
    strategies: list[str] = Field(default_factory=lambda: ["ps_sync", "allreduce"])
    algorithm: AlgorithmName = "ring"
    servers: int | None = Field(None, ge=1,
                                description="PS server processes for ps_sharded (None: 2)")
    batch_size: int = Field(32, ge=1)
    steps: int = Field(20, ge=1)
    warmup_steps: int = Field(3, ge=0)
    lr: float = Field(1e-4, gt=0)
    bucket_mb: float = Field(25.0, gt=0)
    overlap: bool = True
    network: str = "none"
    compute: Literal["real", "replay"] = "real"
    replay_source: str = Field("measured", description="'measured', 'gpu' or a CSV path")

    def servers_for(self, strategy: str) -> int:
        """Engines a strategy needs beyond its workers (PS server processes)."""
        if strategy == "ps_sharded":
            return self.servers or 2
        return 1 if strategy in ("ps_sync", "ps_async") else 0

    @field_validator("strategies")
    @classmethod
    def _strategies(cls, v: list[str]) -> list[str]:
        return _known(v, STRATEGY_NAMES, "strategy")

    @field_validator("network")
    @classmethod
    def _network(cls, v: str) -> str:
        return _known([v], NETWORKS, "network")[0]


class NetworkParams(_Section):
    """The emulated cluster network (ddlstudy.netem) and chapter 05's profile comparison."""

    scale: float = Field(0.01, gt=0, le=1, description="emulated link rate = profile rate x scale")
    profiles: list[str] = Field(default_factory=lambda: ["IB-EDR", "10GbE"])
    model: ModelName = "resnet50"
    workers: WorkerCounts = Field(default_factory=lambda: [1, 2, 4])
    # Pipelined (isend/irecv) ring, as Horovod/NCCL run it: segments in flight across steps.
    algorithm: AlgorithmName = "ring_pipelined"
    batch_size: int = Field(32, ge=1)
    steps: int = Field(2, ge=1)
    warmup_steps: int = Field(1, ge=0)
    replay_source: str = Field("gpu", description="'measured', 'gpu' or a CSV path")

    @field_validator("profiles")
    @classmethod
    def _profiles(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("name at least one profile, e.g. [IB-EDR, 10GbE]")
        return _known(v, NETWORKS[1:], "network profile")


class MonitorParams(_Section):
    interval_s: float = Field(0.5, gt=0)
    workers: WorkerCounts = Field(default_factory=lambda: [2, 4])
    models: ModelNames = Field(default_factory=lambda: ["resnet18"])
    steps: int = Field(10, ge=1)


class ReportParams(_Section):
    chapters: list[str] = Field(default_factory=lambda: list(CHAPTERS))
    kernel: str = "python3"
    cell_timeout_s: int = Field(1800, ge=10)

    @field_validator("chapters")
    @classmethod
    def _chapters(cls, v: list[str]) -> list[str]:
        return _known(v, CHAPTERS, "chapter")


class StudyParams(_Section):
    """The whole study's parameter set."""

    run_id: str = Field("default", pattern=r"^[A-Za-z0-9_.\-]+$")
    seed: int = 0
    repeats: int = Field(3, ge=1, le=100, description="interleaved repeats of every measured "
                         "cell that feeds a verdict (grid cells, chapter 02's collectives)")
    cluster: ClusterParams = Field(default_factory=ClusterParams)
    data: DataParams = Field(default_factory=DataParams)
    collectives: CollectivesParams = Field(default_factory=CollectivesParams)
    training: TrainingParams = Field(default_factory=TrainingParams)
    network: NetworkParams = Field(default_factory=NetworkParams)
    monitor: MonitorParams = Field(default_factory=MonitorParams)
    report: ReportParams = Field(default_factory=ReportParams)

    @model_validator(mode="after")
    def _fits_cluster(self) -> StudyParams:
        if self.cluster.profile:
            return self
        need = max([*self.collectives.ranks, *(w + 1 for w in self.monitor.workers),
                    *self.network.workers,
                    *(w + self.training.servers_for(s) for w in self.training.workers
                      for s in self.training.strategies)])
        if need > self.cluster.workers:
            raise ValueError(f"the grid needs {need} engines but cluster.workers is "
                             f"{self.cluster.workers}")
        return self

    def digest(self) -> str:
        """Stable hash of the validated values: a resumed run reruns only what changed."""
        blob = json.dumps(self.model_dump(mode="json"), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _known(values: list[str], valid: tuple[str, ...], what: str) -> list[str]:
    bad = [v for v in values if v not in valid]
    if bad:
        raise ValueError(f"unknown {what} {bad[0]!r}; choose from {', '.join(valid)}")
    return values


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _read_yaml(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise ParamsError(f"{path}: params file not found; pass an existing file, e.g. "
                          "params/default.yaml")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ParamsError(f"{path}:{where} is not valid YAML "
                          f"({getattr(err, 'problem', err)}); fix the syntax") from None
    if not isinstance(data, dict):
        raise ParamsError(f"{path}: top level must be a mapping of keys (run_id:, cluster:, ...), "
                          f"not a {type(data).__name__}")
    return data


def load_params(*paths: str | Path, check_data: bool = True) -> StudyParams:
    """Layer the files (later wins) and validate; ParamsError carries the one-line message."""
    merged: dict[str, Any] = {}
    for path in paths:
        merged = deep_merge(merged, _read_yaml(Path(path)))
    names = ", ".join(str(p) for p in paths) or "<defaults>"
    try:
        params = StudyParams.model_validate(merged)
    except ValidationError as err:
        raise ParamsError(f"{names}: {_one_line(err)}") from None
    if check_data:
        _check_data(params, names)
    return params


def _check_data(params: StudyParams, names: str) -> None:
    root = params.data.path()
    needed = set(params.data.require)
    if params.training.dataset in ("mnist", "fashion_mnist", "cifar10"):
        needed.add(params.training.dataset)
    folders = {"mnist": "mnist", "fashion_mnist": "fashion_mnist",
               "cifar10": "cifar-10-batches-py"}
    for name in sorted(needed):
        folder = root / folders[name]
        if not folder.is_dir():
            fix = ("run `make data`" if name != "cifar10" else
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
    msg = msg.removeprefix("Value error, ")
    return f"{key}: {msg} (got {first.get('input')!r}); fix this value"


def main(argv: list[str] | None = None) -> int:
    """`python -m ddlstudy.params FILE...`: validate and print the merged parameters."""
    args = sys.argv[1:] if argv is None else argv
    try:
        params = load_params(*args)
    except ParamsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(yaml.safe_dump(params.model_dump(mode="json"), sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
