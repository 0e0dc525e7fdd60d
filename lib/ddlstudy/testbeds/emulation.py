"""A testbed as emulator settings: the link profile, engines per node, latency, replay table,
input shape and batch a chapter's emulated grid takes from a testbed's YAML (chapter 03's
`network.chapter03_testbed`), so a paper's claims are tested on the paper's own hardware.

A testbed link that names no study profile (Shi 2019's 2 Gb/s Compute Engine VMs) becomes a
profile of its own, named after the testbed, with the testbed's node rate and one-way latency
and their sources (`register_profiles`): the emulator shapes to it and the step model charges it
like any other. Compute comes from the testbed's rows as a replay table stored beside the
measured ones (`workload/tables/testbed-<name>.csv`, written by `write_tables` from the YAML and
checked against it by tests/test_testbeds.py): a row is replayed at its own shape and batch;
a model without a row is an error, never an estimate.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ddlstudy.network.profiles import PROFILES, Profile
from ddlstudy.testbeds import catalog


def table_name(name: str) -> str:
    """The replay source of a testbed: its measured table's name, else `testbed-<name>` (a
    what-if that keeps its base's compute replays the base's table)."""
    tb = catalog.testbed(name)
    if tb.inherits_compute and tb.base:
        return table_name(tb.base)
    if tb.compute_table_file:
        return Path(tb.compute_table_file).stem
    return f"testbed-{name}"


def tables_dir() -> Path:
    from ddlstudy.workload.replay import TABLES

    return TABLES


def write_tables(folder: Path | None = None) -> list[Path]:
    """Write `testbed-<name>.csv` for every testbed with published compute rows (and no measured
    table of its own); returns the files written."""
    folder = folder or tables_dir()
    out = []
    for tb in catalog.testbeds():
        if tb.compute and not tb.compute_table_file and not tb.inherits_compute:
            out.append(catalog.write_compute_table(tb.name, folder / f"{table_name(tb.name)}.csv"))
    return out


def profile_for(name: str) -> str:
    """The link profile a testbed's inter-node link is emulated as: the study profile it names,
    else one registered under the testbed's name from its rate (all NICs of a node) and
    latency. ValueError when the testbed has no inter-node rate (one node)."""
    tb = catalog.testbed(name)
    link = tb.inter_node
    if link.profile:
        return link.profile
    if link.node_rate_bps is None:
        raise ValueError(f"testbed {name!r} has no inter-node link rate ({link.kind}): nothing "
                         "to emulate; pick a testbed with several nodes")
    if name not in PROFILES:
        PROFILES[name] = Profile(
            name, float(link.node_rate_bps), float(link.latency_s or 0.0),
            f"testbed {name} ({tb.paper}): {link.kind}; " + " ".join(link.source.split()),
            f"testbed {name}" + ("; assumed: " + " ".join(link.why.split()) if link.assumed
                                 else ""))
    return name


def register_profiles() -> list[str]:
    """Register every testbed link that names no study profile (see `profile_for`); returns
    the profile names registered or already there. Readers of cells measured on a testbed (the
    step model) call this before looking a cell's `network` up in PROFILES."""
    names = []
    for tb in catalog.testbeds():
        if not tb.inter_node.profile and tb.inter_node.node_rate_bps is not None:
            names.append(profile_for(tb.name))
    return names


@dataclass(frozen=True)
class EmulatedTestbed:
    """What a chapter's emulated grid takes from a testbed for one model."""

    name: str
    paper: str
    profile: str
    gpus_per_node: int
    latency: bool
    replay_source: str
    shape: str
    batch_size: int
    compute_s: float
    device: str
    note: str

    @property
    def label(self) -> str:
        """One line for titles and records: testbed, device, shape and batch replayed."""
        return (f"testbed {self.name} ({self.paper}): {self.device} replayed at {self.shape} "
                f"batch {self.batch_size} ({self.compute_s * 1e3:.0f} ms a step), "
                f"{self.gpus_per_node} GPU(s) per node, links {self.profile}")


def settings(name: str, model: str, batch_size: int | None = None) -> EmulatedTestbed:
    """The emulator settings for `model` on testbed `name`. The compute row is the one at
    `batch_size`, else at the paper's batch per worker, else the first published; ValueError
    (one line) for an unknown testbed or a model the testbed has no row for."""
    tb = catalog.testbed(name)
    source = table_name(name)
    if tb.compute_table_file:
        import csv

        with catalog.measured_table_path(tb.compute_table_file).open(newline="") as f:
            rows = [(r["shape"], int(r["batch_size"]), float(r["compute_s_p50"]), "")
                    for r in csv.DictReader(f) if r["model"] == model]
    else:
        rows = [(r.shape, r.batch_size, r.step_s, r.note) for r in tb.compute if r.model == model]
    if not rows:
        have = sorted({r.model for r in tb.compute}) or ["none"]
        raise ValueError(f"testbed {name!r} has no compute row for model {model!r} (it has: "
                         f"{', '.join(have)}); pick one of those or another testbed")
    paper_batch = tb.framework.get("batch_per_worker")
    for want in (batch_size, paper_batch):
        pick = [r for r in rows if want is not None and r[1] == int(want)]
        if pick:
            break
    row = (pick or rows)[0]
    if not tb.compute_table_file and not (tables_dir() / f"{source}.csv").is_file():
        raise ValueError(f"replay table {source}.csv is missing: write it with python -c "
                         "'from ddlstudy.testbeds import emulation; emulation.write_tables()'")
    return EmulatedTestbed(
        name=name, paper=tb.paper, profile=profile_for(name),
        gpus_per_node=int(tb.gpus_per_node.value or 1),
        latency=bool(tb.inter_node.latency_s), replay_source=source, shape=row[0],
        batch_size=row[1], compute_s=row[2], device=str(tb.device.value), note=row[3])
