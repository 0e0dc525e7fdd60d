"""The claim record, what a claim's measurement returns, and the reader a claim reads through.

A `Claim` is data: the paper's words (quote, location, conditions), the quantity that tests
exactly that, its kind and margins (fixed here, before any run, with the reasoning beside
them), the chapter tables it reads, and `measure`: a function from a `Records` reader to one
`Measurement` per row (a model, a profile). The engine (`ddlstudy.claims.engine`) turns each
measurement into a claims.csv row with `ddlstudy.analysis.inference.verdict`.

The unit of every interval is the independent run: a measurement's values are one per run
(`runs` below: one value per `repeat` or `seed` of a cell), never timed chunks or steps.
A quantity built from several cells (a speed-up: the N-worker cell over the 1-worker cell) is
formed run by run (`per_run`): run r of each cell is an independent run, so the composites of
different r are independent too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ddlstudy.analysis.validity import host_paced
from ddlstudy.records.store import failed_runs

Folders = dict[str, list[str]]
EMULATED_03 = "03_ps_vs_ring-emulated"
# Until the testbeds exist (see the testbeds issue), every emulated number is H100 compute
# replayed onto shaped links, each worker a process standing in for one GPU node.
TESTBED_EMULATED = "emulated H100 replay / one GPU per node"
TESTBED_HOST = "one host (CPU; workers share its cores)"
TESTBED_NONE = "none: not measured"
# Chapter 99's two columns (issue 21): a claim decided on the paper's own testbed (the
# reproduction) and on today's hardware (the update: the H100 replayed, or a 'today' testbed).
REPRODUCTION, UPDATE = "reproduction", "update"


def emulated_testbed_label(name: str, models: Iterable[str] | None = None) -> str:
    """The `testbed` a claim row names for cells emulated on catalog testbed `name`: device,
    the rate per node the emulator shaped (the study profile the testbed names, else its own
    node rate) and GPUs per node. Where the testbed's node has more than the profile's one port
    (Wang (NCHC)'s 4 x 100 Gb/s HCAs), the label says one was emulated. Models whose compute
    row is converted (not measured on the device) are named: those among `models` (the row's
    own), or every such model of the testbed when `models` is None."""
    from ddlstudy.network.profiles import PROFILES
    from ddlstudy.testbeds import catalog, emulation

    tb = catalog.testbed(name)
    link = tb.inter_node
    rate = PROFILES[emulation.profile_for(name)].rate_bps
    links = f"{rate / 1e9:g} Gb/s links"
    if link.profile and link.node_rate_bps and abs(link.node_rate_bps - rate) > 1:
        links += (f" ({link.profile}: one of its {link.nics_per_node} x "
                  f"{float(link.rate_bps or 0) / 1e9:g} Gb/s ports per node)")
    wanted = None if models is None else set(models)
    converted = sorted({r.model for r in tb.compute if r.source.lower().startswith("converted")
                        and (wanted is None or r.model in wanted)})
    note = (f" ({', '.join(converted)}: step converted from another model's row, not measured)"
            if converted else "")
    return (f"emulated testbed {name}: {tb.device.value} replayed{note}, {links}, "
            f"{tb.gpus_per_node.value} GPU(s) per node")
NOT_MEASURED, SET_BY_CONFIG = "not measured", "set by configuration"
KINDS = ("direction", "equivalence", "magnitude")


@dataclass(frozen=True)
class Measurement:
    """One row's data: `a` (and `b` for a ratio a / b of two independent groups), one value per
    independent run. `missing` (not measured: why, and which command measures it) or `fixed`
    (set by configuration: why) instead of values draws no verdict. `column`: REPRODUCTION or
    UPDATE when the row stands for the paper's testbed or today's ('' otherwise); `ratio`:
    (what, value) of the quantity that sets the regime on this testbed (compute / communication
    per step), named when the two columns disagree. `exact`: how a value that is the same in
    every run arose ("exact": the runs' inputs varied, e.g. their seeds; "counted, exact": a
    count of what the code did), so it is decided as an exact result
    (`ddlstudy.analysis.inference`, "Exact results"); '' leaves zero spread inconclusive."""

    label: str
    a: tuple[float, ...] = ()
    b: tuple[float, ...] | None = None
    source: str = ""
    testbed: str = TESTBED_EMULATED
    chapter: str = ""
    note: str = ""
    missing: str = ""
    fixed: str = ""
    column: str = ""
    ratio: tuple[str, float] | None = None
    exact: str = ""


@dataclass(frozen=True)
class Claim:
    """One claim of one paper, as the paper states it, and how the study tests it.

    `kind`: 'direction' (the quantity is above / below `no_effect`: `direction` 'greater' or
    'less'), 'equivalence' (within [margin_low, margin_high], TOST) or 'magnitude' (a stated
    number, within [margin_low, margin_high] around it). For a direction claim the margins are
    the claimed side of `no_effect` (reported, not used). `reasoning`: why these margins, from
    the paper's words. `reads`: (chapter, table) pairs, checked against the chapter registry.
    `measure` None: the study has no chapter for it; `needs` says what is missing.
    """

    paper: str
    id: str
    claim: str
    quote: str
    location: str
    conditions: str
    quantity: str
    kind: str
    no_effect: float
    margin_low: float
    margin_high: float
    reasoning: str
    reads: tuple[tuple[str, str], ...] = ()
    measure: Callable[[Records], list[Measurement]] | None = None
    direction: str = "greater"
    needs: str = ""

    @property
    def name(self) -> str:
        """The registry key (the claim's id)."""
        return self.id

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"{self.id}: kind {self.kind!r} not in {KINDS}")
        if self.measure is None and not self.needs:
            raise ValueError(f"{self.id}: a claim without `measure` must say what it `needs`")


def side(no_effect: float, direction: str = "greater") -> tuple[float, float]:
    """A direction claim's margins: the claimed side of `no_effect`."""
    return (no_effect, math.inf) if direction == "greater" else (0.0, no_effect)


def usable(df: pd.DataFrame) -> pd.DataFrame:
    """The rows a claim reads: no error, not CPU-bound, no replay lag (`analysis.validity`),
    integer `repeat` and `seed`."""
    if df.empty:
        return df
    df = df[~failed_runs(df)]
    df = df[~host_paced(df)]  # cpu_bound or replay-lagged: the host set these runs' pace
    for key in ("repeat", "seed"):
        df = df.assign(**{key: df[key].fillna(0).astype(int) if key in df else 0})
    return df


@dataclass
class Records:
    """A run folder's tables for one claim: only the (chapter, table) pairs it declares.

    `fallback`: chapters read from the committed reference run (results/reference) when this
    run did not run them (`label` then names the reference run)."""

    run_dir: Path
    folders: Folders
    reads: tuple[tuple[str, str], ...]
    fallback: tuple[str, ...] = ("07_frameworks", "08_convergence", "09_batch_size",
                                 "10_faults", "11_beyond")
    labels: dict[str, str] = field(default_factory=dict)

    def table(self, chapter: str, name: str) -> pd.DataFrame:
        """The chapter's `name` table over its folders, cleaned (`usable`); empty if none.
        KeyError for a table the claim does not declare."""
        if (chapter, name) not in self.reads:
            raise KeyError(f"({chapter!r}, {name!r}) is not among the claim's declared reads")
        if chapter not in self.folders and chapter in self.fallback:
            from ddlstudy.records import reference

            # 07: every cell's runs; 08-11: the chapter's own table, computed from all its runs
            # (a table the reference lacks: 'not measured', saying which chapter to run)
            cells = (reference.load(chapter) if name == "summary"
                     else reference.load_table(chapter, name))
            if name == "summary" or not cells.empty:
                self.labels[chapter] = reference.label(cells)
                if "profile" not in cells and "network" in cells:  # a cell's own summary
                    cells = cells.assign(profile=cells["network"])
                return usable(cells)
        frames = [pd.read_csv(p) for f in self.folders.get(chapter, [])
                  if (p := self.run_dir / f / f"{name}.csv").exists()]
        frames = [f for f in frames if not f.empty]
        return usable(pd.concat(frames, ignore_index=True)) if frames else pd.DataFrame()

    def source(self, chapter: str, what: str) -> str:
        """`what`, prefixed by the reference run's label when the chapter came from it."""
        return f"{self.labels[chapter]}; {what}" if chapter in self.labels else what

    def missing(self, chapter: str, needs: str) -> str:
        """'not measured: ...' naming the chapter, what it lacks and how to measure it."""
        if chapter not in self.folders and chapter not in self.labels:
            base = chapter.split("-")[0]
            return (f"not measured: chapter {chapter} is not in this run's report.chapters; "
                    f"needs {needs} (name {base} in the params' report.chapters and run `ddlstudy "
                    "report --params ... --out DIR`)")
        return f"not measured: {chapter} has no usable records: needs {needs}"


def runs(df: pd.DataFrame, column: str, key: str = "repeat", **where: object) -> pd.Series:
    """`column` of the rows matching `where`, one value per independent run (`key`)."""
    sel = df
    for k, v in where.items():
        if k not in sel:
            return pd.Series(dtype=float)
        sel = sel[sel[k] == v]
    if sel.empty or column not in sel:
        return pd.Series(dtype=float)
    return sel.groupby(key)[column].median().astype(float)


def per_run(fn: Callable[..., pd.Series], *series: pd.Series) -> tuple[float, ...]:
    """fn(*series) on the runs every series has, finite and positive values only."""
    if any(s.empty for s in series):
        return ()
    common = series[0].index
    for s in series[1:]:
        common = common.intersection(s.index)
    out = fn(*(s.loc[common] for s in series))
    vals = np.asarray(out, dtype=float)
    return tuple(float(v) for v in vals[np.isfinite(vals) & (vals > 0)])


def ratio_of_runs(top: pd.Series, bottom: pd.Series, scale: float = 1.0) -> dict[str, Any]:
    """`top / (scale x bottom)` as a Measurement's `a` (and `b`): per run where both cells ran
    the same runs (`key` values: one ratio a pair), else two independent groups, so a cell
    whose runs were pooled from other sittings, or lost one to a validity check, keeps every
    run instead of the few whose numbers happen to match. In: per-run series (`runs`)."""
    if set(top.index) == set(bottom.index):
        return {"a": per_run(lambda x, y: x / (scale * y), top, bottom)}
    return {"a": values(top), "b": values(bottom * scale)}


def values(s: pd.Series) -> tuple[float, ...]:
    """A per-run series as a tuple of its finite positive values."""
    vals = s.to_numpy(float)
    return tuple(float(v) for v in vals[np.isfinite(vals) & (vals > 0)])


def host_or_emulated(df: pd.DataFrame) -> str:
    """TESTBED_HOST when `df`'s cells ran on this host's loopback (network none / loopback),
    else TESTBED_EMULATED: a chapter 11 table's testbed, read from its first row."""
    net = str(df["network"].iloc[0]) if "network" in df and len(df) else "none"
    return TESTBED_HOST if net in ("none", "loopback", "nan") else TESTBED_EMULATED


def by_testbed(df: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(testbed name, its rows) of an emulated chapter 03 summary, today's H100 replay
    ('none': cells without a `testbed` column, or with none in it) first, then by name: a claim
    compares cells of one testbed, never one testbed's grid against another's."""
    if "testbed" not in df:
        return [("none", df)]
    names = df["testbed"].fillna("none").astype(str)
    return [(n, df[names == n]) for n in sorted(names.unique(), key=lambda n: (n != "none", n))]
