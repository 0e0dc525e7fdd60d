"""Testbeds as data: each paper's hardware (and today's), and published measurements to check the
step model against. Torch-free and free of other ddlstudy imports (stdlib and yaml only), so any
layer, a notebook or a test can read it.

A testbed is one YAML file beside this module (`<name>.yaml`): the compute device with per-model
step times at the paper's input size and batch (published single-GPU throughputs converted to a
step time, or a table this study measured), GPUs per node, the intra-node link (bytes/s), the
inter-node link (bits/s and one-way latency in s), the framework settings. Every number sits in a
mapping with its `source`; a setting the paper does not state carries `assumed: true` and `why`.
`published.csv` holds published scaling and throughput points, one per row, each with its source.
README.md beside this file explains each testbed, its sources and what is assumed.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
PACKAGE = HERE.parent  # lib/ddlstudy: where measured tables (e.g. h100.csv) are looked up
PUBLISHED = HERE / "published.csv"
# The replay table's columns (workload/replay.py COLUMNS), then what a testbed row adds.
REPLAY_COLUMNS = ["model", "shape", "batch_size", "device", "device_name", "compute_s_p50",
                  "compute_s_min", "compute_s_max", "steps", "dtype", "torch"]
COMPUTE_COLUMNS = [*REPLAY_COLUMNS, "images_per_sec", "framework", "source", "conversion"]
METRICS = ("images_per_sec", "scaling_efficiency")


@dataclass(frozen=True)
class Setting:
    """A number (or short text) with where it comes from; `assumed` when the paper does not say."""

    value: Any
    source: str
    assumed: bool = False
    why: str = ""


@dataclass(frozen=True)
class Link:
    """A link tier. Intra-node rates are bytes/s per GPU per direction (`rate_Bps`); inter-node
    rates are bits/s per NIC (`rate_bps`) with `nics_per_node` NICs; latency is one-way, in s.
    kind 'none': no such link (one GPU per node, or one node)."""

    kind: str
    rate_Bps: float | None = None
    rate_bps: float | None = None
    latency_s: float | None = None
    nics_per_node: int = 1
    profile: str | None = None  # the study's network profile of the same rate, if any
    source: str = ""
    assumed: bool = False
    why: str = ""
    note: str = ""

    @property
    def node_rate_bps(self) -> float | None:
        """All NICs of a node together, in bits/s (None without a rate)."""
        return None if self.rate_bps is None else self.rate_bps * self.nics_per_node


@dataclass(frozen=True)
class ComputeRow:
    """One model's single-GPU training step on the testbed's device."""

    model: str
    shape: str
    batch_size: int
    step_s: float
    images_per_sec: float | None
    device_name: str
    framework: str
    dtype: str
    source: str
    conversion: str
    locator: str = ""
    note: str = ""


@dataclass(frozen=True)
class Testbed:
    name: str
    paper: str  # the claim engine's name for the paper ("Shi 2019", ...) or "today"
    summary: str
    device: Setting  # value: the device's name
    gpus_per_node: Setting  # workers per node (for Fourie 2019: MPI processes on CPU cores)
    nodes: Setting | None
    intra_node: Link
    inter_node: Link
    framework: dict[str, Any]
    compute: tuple[ComputeRow, ...]
    compute_table_file: str | None  # a measured replay table (e.g. h100.csv) instead of rows
    compute_table_source: str
    raw: dict[str, Any]  # the YAML as read (tests walk it for sources)
    base: str | None = None  # a what-if: the testbed it copies, one setting changed

    @property
    def inherits_compute(self) -> bool:
        """A what-if that keeps its base's compute rows (it replays the base's table)."""
        return self.base is not None and not {"compute", "compute_table"} & set(self.raw)

    @property
    def models(self) -> list[str]:
        return sorted({r.model for r in self.compute})


def _setting(d: dict[str, Any] | None, key: str = "value") -> Setting | None:
    if d is None:
        return None
    return Setting(d.get(key), d.get("source", ""), bool(d.get("assumed", False)), d.get("why", ""))


def _link(d: dict[str, Any] | None) -> Link:
    d = d or {"kind": "none"}
    return Link(kind=d.get("kind", "none"), rate_Bps=d.get("rate_Bps"), rate_bps=d.get("rate_bps"),
                latency_s=d.get("latency_s"), nics_per_node=int(d.get("nics_per_node", 1)),
                profile=d.get("profile"), source=d.get("source", ""),
                assumed=bool(d.get("assumed", False)), why=d.get("why", ""), note=d.get("note", ""))


def _row(d: dict[str, Any]) -> ComputeRow:
    return ComputeRow(model=d["model"], shape=d["shape"], batch_size=int(d["batch_size"]),
                      step_s=float(d["step_s"]), images_per_sec=d.get("images_per_sec"),
                      device_name=d.get("device_name", ""), framework=d.get("framework", ""),
                      dtype=d.get("dtype", ""), source=d.get("source", ""),
                      conversion=d.get("conversion", ""), locator=d.get("locator", ""),
                      note=d.get("note", ""))


def _load(path: Path) -> Testbed:
    """One testbed YAML. A what-if (`what_if: {base: NAME, changes: [...], why: ...}`) takes
    every top-level mapping it does not give from its base testbed: it is the base with the
    settings it names changed (`paper: what-if`), for claims that need one factor varied."""
    raw = yaml.safe_load(path.read_text())
    if raw.get("name") != path.stem:
        raise ValueError(f"{path.name}: name {raw.get('name')!r} differs from the file name")
    base = (raw.get("what_if") or {}).get("base")
    d = raw
    if base:
        base_path = path.parent / f"{base}.yaml"
        if not base_path.is_file():
            known = ", ".join(sorted(q.stem for q in path.parent.glob("*.yaml") if q != path))
            raise ValueError(f"{path.name}: what_if.base {base!r} is no testbed next to it; "
                             f"name one of: {known}")
        d = {**yaml.safe_load(base_path.read_text()), **raw}
    dev = d["device"]
    table = d.get("compute_table") or {}
    return Testbed(
        name=d["name"], paper=d["paper"], summary=d.get("summary", ""),
        device=Setting(dev["name"], dev.get("source", ""), bool(dev.get("assumed", False)),
                       dev.get("why", "")),
        gpus_per_node=_setting(d["gpus_per_node"]), nodes=_setting(d.get("nodes")),
        intra_node=_link(d.get("intra_node")), inter_node=_link(d.get("inter_node")),
        framework=dict(d.get("framework") or {}),
        compute=tuple(_row(r) for r in d.get("compute") or []),
        compute_table_file=table.get("file"), compute_table_source=table.get("source", ""),
        raw=raw, base=base)


@cache
def _all() -> dict[str, Testbed]:
    return {p.stem: _load(p) for p in sorted(HERE.glob("*.yaml"))}


def names() -> list[str]:
    """The testbeds' names, sorted."""
    return sorted(_all())


def testbeds(paper: str | None = None) -> list[Testbed]:
    """Every testbed (sorted by name), or one paper's ("Shi 2019", "Wang (NCHC)", "today")."""
    return [t for t in _all().values() if paper is None or t.paper == paper]


def testbed(name: str) -> Testbed:
    """The testbed of that name; ValueError naming the known ones otherwise."""
    try:
        return _all()[name]
    except KeyError:
        raise ValueError(f"unknown testbed {name!r}; known: {', '.join(names())}") from None


def measured_table_path(file: str) -> Path:
    """Where a measured replay table (e.g. 'h100.csv') sits under the package, wherever the
    package keeps its tables (tables/ or workload/tables/)."""
    found = sorted(p for p in PACKAGE.rglob(file) if HERE not in p.parents)
    if not found:
        raise FileNotFoundError(f"no measured table {file!r} under {PACKAGE}")
    return found[0]


def compute_table(name: str) -> list[dict[str, Any]]:
    """A testbed's compute rows in the replay table's columns (model, shape, batch_size, device,
    device_name, compute_s_p50, ...), plus images_per_sec, framework, source and conversion.
    Published rows: compute_s_p50 = step_s = batch_size / images_per_sec (a published mean, not a
    median; min/max unknown). Testbeds on a measured table return that table's rows."""
    tb = testbed(name)
    rows: list[dict[str, Any]] = []
    for r in tb.compute:
        rows.append({"model": r.model, "shape": r.shape, "batch_size": r.batch_size,
                     "device": "published", "device_name": r.device_name,
                     "compute_s_p50": r.step_s, "compute_s_min": None, "compute_s_max": None,
                     "steps": None, "dtype": r.dtype, "torch": None,
                     "images_per_sec": r.images_per_sec, "framework": r.framework,
                     "source": f"{r.source}; {r.locator}".strip("; "),
                     "conversion": r.conversion})
    if tb.compute_table_file:
        path = measured_table_path(tb.compute_table_file)
        with path.open(newline="") as f:
            for m in csv.DictReader(f):
                step = float(m["compute_s_p50"])
                batch = int(m["batch_size"])
                rows.append({**{c: m.get(c) or None for c in REPLAY_COLUMNS},
                             "batch_size": batch, "compute_s_p50": step,
                             "compute_s_min": _opt_float(m.get("compute_s_min") or ""),
                             "compute_s_max": _opt_float(m.get("compute_s_max") or ""),
                             "steps": int(m["steps"]) if m.get("steps") else None,
                             "images_per_sec": batch / step,
                             "framework": f"PyTorch {m.get('torch')}",
                             "source": tb.compute_table_source,
                             "conversion": "measured step time; images_per_sec = batch_size / "
                                           "compute_s_p50"})
    return rows


def write_compute_table(name: str, path: str | Path) -> Path:
    """Write a testbed's compute table as a CSV that compute replay reads
    (`training.replay_source: <path>`)."""
    path = Path(path)
    rows = compute_table(name)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COMPUTE_COLUMNS, lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r.get(k) is None else r[k]) for k in COMPUTE_COLUMNS})
    return path


@dataclass(frozen=True)
class PublishedPoint:
    """A published scaling or throughput point. metric 'images_per_sec' is the total over `gpus`;
    'scaling_efficiency' a fraction. `study_model` is the study's model name ('' when the study has
    no such model); network_bps None when the source does not state the rate."""

    point_id: str
    source_key: str
    citation: str
    url: str
    locator: str
    model: str
    study_model: str
    shape: str
    device: str
    gpus: int
    gpus_per_node: int
    network: str
    network_bps: float | None
    framework: str
    strategy: str  # "ps" or "allreduce"
    batch_per_gpu: int
    data: str
    metric: str
    value: float
    single_gpu_images_per_sec: float | None
    assumed: str
    notes: str

    @property
    def nodes(self) -> int:
        return max(1, -(-self.gpus // self.gpus_per_node))

    @property
    def scaling_efficiency(self) -> float | None:
        """value / (gpus x single-GPU throughput) for throughput points; the value itself for
        efficiency points; None when the source gives no single-GPU baseline."""
        if self.metric == "scaling_efficiency":
            return self.value
        if self.single_gpu_images_per_sec:
            return self.value / (self.gpus * self.single_gpu_images_per_sec)
        return None


def _opt_float(s: str) -> float | None:
    return float(s) if s.strip() else None


@cache
def _points() -> tuple[PublishedPoint, ...]:
    with PUBLISHED.open(newline="") as f:
        out = []
        for r in csv.DictReader(f):
            out.append(PublishedPoint(
                point_id=r["point_id"], source_key=r["source_key"], citation=r["citation"],
                url=r["url"], locator=r["locator"], model=r["model"], study_model=r["study_model"],
                shape=r["shape"], device=r["device"], gpus=int(r["gpus"]),
                gpus_per_node=int(r["gpus_per_node"]), network=r["network"],
                network_bps=_opt_float(r["network_bps"]), framework=r["framework"],
                strategy=r["strategy"], batch_per_gpu=int(r["batch_per_gpu"]), data=r["data"],
                metric=r["metric"], value=float(r["value"]),
                single_gpu_images_per_sec=_opt_float(r["single_gpu_images_per_sec"]),
                assumed=r["assumed"], notes=r["notes"]))
    return tuple(out)


def published_points(source_key: str | None = None, study_models_only: bool = False
                     ) -> list[PublishedPoint]:
    """Published points, optionally of one source ('wang_nchc', 'horovod', 'tf_benchmarks',
    'nvidia_dle') or only those whose model the study has."""
    return [p for p in _points()
            if (source_key is None or p.source_key == source_key)
            and (not study_models_only or p.study_model)]
