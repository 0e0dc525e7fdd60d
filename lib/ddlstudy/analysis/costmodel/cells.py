"""Measured cells against the step model: read summary.csv records, fit the per-host constants
(`Constants`) on some cells, predict the rest, and `project` the validated model to other worker
counts, networks and what-ifs (chapter 06). Predictions are analytic; projections are labelled
"projected" with the validation's error.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import ddlstudy.analysis.costmodel.step as _step
from ddlstudy.analysis.costmodel.alphabeta import _nnls
from ddlstudy.analysis.costmodel.step import (
    FLAT,
    PS_STEP,
    STEP_STRATEGIES,
    Constants,
    Link,
    StepTime,
    Tiers,
    predict_step,
    profile_link,
)
from ddlstudy.analysis.validity import replay_lagged
from ddlstudy.network.profiles import PROFILES
from ddlstudy.workload.catalog import SHAPES

CELL_COLUMNS = ("strategy", "model", "workers", "wall_s", "steps", "network", "network_scale",
                "compute_mode", "replay_s", "time_dilation")
CELL_KEY = ["strategy", "algorithm", "overlap", "servers", "bucket_mb", "model", "shape",
            "workers", "batch_size", "network", "network_scale", "replay_source",
            "gpus_per_node", "latency_emulated_s"]


class RecordsError(ValueError):
    """Measured records missing or unusable; the message names the folder and the fix."""


def read_cells(dirs: Sequence[str | Path]) -> pd.DataFrame:
    """Every summary.csv under `dirs` (recursively), one row per distinct measured cell.

    A chapter's summary repeats its cells' own summaries: rows equal on the cell key and wall
    time are one measurement. Failed runs (an error) and runs whose replayed clock lagged
    (`analysis.validity`) are dropped."""
    frames = []
    for d in dirs:
        root = Path(d)
        if not root.exists():
            raise RecordsError(f"{root}: no such folder; pass run folders holding summary.csv")
        files = [root] if root.is_file() else sorted(root.rglob("summary.csv"))
        frames += [pd.read_csv(f).assign(source=str(f.parent)) for f in files]
    if not frames:
        raise RecordsError(f"no summary.csv under {', '.join(map(str, dirs))}; pass a run folder "
                           "(results/reference, outputs/<run>, a train --out folder)")
    cells = pd.concat(frames, ignore_index=True)
    missing = [c for c in CELL_COLUMNS if c not in cells.columns]
    if missing:
        raise RecordsError(f"summary.csv records lack column(s) {missing}: they predate compute "
                           "replay / emulated networks; rerun them with this version")
    if "error" in cells.columns:
        cells = cells[cells["error"].isna() | (cells["error"].astype(str) == "")]
    cells = cells[~replay_lagged(cells)]  # the host set these lone workers' steps
    for col in CELL_KEY:
        if col not in cells.columns:
            cells[col] = math.nan
    # a run's own summary written before these columns existed is the same measurement as the
    # chapter summary's row that carries them (their values then: one GPU per node, no latency)
    for col, before in (("gpus_per_node", 1), ("latency_emulated_s", 0.0)):
        cells[col] = cells[col].fillna(before)
    cells = cells.drop_duplicates(subset=[*CELL_KEY, "wall_s"]).reset_index(drop=True)
    return _merge_repeats(cells)


def _merge_repeats(cells: pd.DataFrame) -> pd.DataFrame:
    """Repeats of one cell (same key, different wall times) as one row: the median seconds per
    step (wall_s / steps with steps 1), and how many repeats it came from."""
    per_step = (cells["wall_s"] / cells["steps"]).to_numpy(dtype=float)
    key = ["|".join(map(str, row)) for row in cells[CELL_KEY].itertuples(index=False)]
    groups: dict[str, list[int]] = {}
    for i, k in enumerate(key):
        groups.setdefault(k, []).append(i)
    first = cells.iloc[[rows[0] for rows in groups.values()]].copy()
    first["wall_s"] = [float(np.median(per_step[rows])) for rows in groups.values()]
    first["steps"] = 1
    first["repeats"] = [len(rows) for rows in groups.values()]
    return first.reset_index(drop=True)


def _usable(cells: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(cells the model can predict, the rest with a reason): replayed compute on shaped links
    (a testbed's own link, e.g. Shi 2019's 2 Gb/s, is a profile once registered)."""
    from ddlstudy.testbeds import emulation

    emulation.register_profiles()
    why = pd.Series("", index=cells.index)
    why[cells["compute_mode"] != "replay"] = "real compute (contended on one host)"
    why[~cells["network"].isin(list(PROFILES))] = "no shaped link profile"
    why[~(cells["network_scale"].astype(float) > 0)] = "no link scale"
    why[~cells["strategy"].isin(STEP_STRATEGIES)] = "strategy not modelled"
    for col in ("cpu_bound", "cpu_bound_risk"):
        if col in cells.columns:
            why[cells[col].fillna(False).astype(bool)] = "CPU-bound emulation (flagged)"
    return cells[why == ""].copy(), cells[why != ""].assign(skipped=why[why != ""])


# The host's netem calibration, looked for beside the records (results/reference keeps the one
# its cells ran under) before the emulator's own default location.
CALIBRATION_NAME = "netem_calibration.json"


@functools.lru_cache(maxsize=16)
def _calibration_trials(path: str) -> tuple[tuple[float, float], ...]:
    """(tbf rate, median payload / rate) of every loaded-ring trial that held its rate, offload
    on (every reference cell ran with segmentation offload on); () when unreadable."""
    try:
        trials = json.loads(Path(path).read_text())["offload_on"]["tbf_trials"]
        return tuple((float(t["rate_bps"]), float(t["median_link_ratio"]))
                     for t in trials if t.get("held"))
    except (OSError, ValueError, KeyError, TypeError):
        return ()


def calibration_for(source: str | Path | None) -> Path | None:
    """The netem calibration of the host a cell ran on: the nearest CALIBRATION_NAME in the
    record's folder or above it, else the emulator's CALIBRATION_FILE; None if neither."""
    from ddlstudy.network.emulated.netem import CALIBRATION_FILE
    from ddlstudy.records.store import project_root

    if source is not None and not (isinstance(source, float) and math.isnan(source)):
        found = _calibration_above(str(source))
        if found is not None:
            return found
    default = CALIBRATION_FILE if CALIBRATION_FILE.is_absolute() else (
        project_root() / CALIBRATION_FILE)
    return default if default.is_file() else None


@functools.lru_cache(maxsize=256)
def _calibration_above(folder: str) -> Path | None:
    """The nearest CALIBRATION_NAME in `folder` or above it (cached: the fit asks per cell)."""
    for d in [Path(folder), *Path(folder).parents]:
        if (d / CALIBRATION_NAME).is_file():
            return d / CALIBRATION_NAME
    return None


def duplex_share(rate_bps: float, calibration: Path | None) -> float | None:
    """Payload per wire byte of a shaped link loaded in both directions at `rate_bps`: the
    calibration's loaded ring (`netem --calibrate`: every node sending to the next at once, so
    each link carries a flow each way), its trial nearest in rate. On this 2-core host 0.868
    at 100 Mbit/s against GOODPUT 0.956 one way: the reverse flow's ACKs wait in the same tbf
    queue as the data. None without a calibration (the model then charges goodput)."""
    trials = _calibration_trials(str(calibration)) if calibration is not None else ()
    if not trials or not rate_bps > 0:
        return None
    rate, ratio = min(trials, key=lambda t: abs(math.log(t[0] / rate_bps)))
    return min(ratio, _step.GOODPUT)


def _cell_step(row: Any, c: Constants) -> StepTime:
    """The model's step for one measured cell, in emulated seconds: latency as the cell emulated
    it (its records' latency_emulated_s per message; 0 in cells that emulated none), a link
    loaded both ways at its host's calibrated duplex share (`duplex_share`)."""
    lat = getattr(row, "latency_emulated_s", 0.0)
    lat = 0.0 if lat is None or pd.isna(lat) else float(lat)
    link = profile_link(row.network, float(row.network_scale), latency_s=lat)
    link = replace(link, duplex=duplex_share(link.rate_bps,
                                             calibration_for(getattr(row, "source", None))))
    servers = None if pd.isna(row.servers) or not row.servers else int(row.servers)
    overlap = str(row.overlap).strip().lower() not in ("false", "0", "0.0")
    bucket = 25.0 if pd.isna(row.bucket_mb) else float(row.bucket_mb)
    algorithm = row.algorithm if isinstance(row.algorithm, str) and row.algorithm else "ring"
    shape = row.shape if isinstance(row.shape, str) and row.shape in SHAPES else "cifar"
    k = cell_gpus_per_node(row)
    tiers = Tiers(k, LOOPBACK) if k > 1 else FLAT
    return predict_step(row.strategy, row.model, int(row.workers), link,
                        float(row.replay_s) * float(row.time_dilation), c, servers=servers,
                        algorithm=algorithm, bucket_mb=bucket, overlap=overlap, shape=shape,
                        tiers=tiers)


# The intra-node link of an emulated node of several engines: the namespace's loopback,
# unshaped (ddlstudy.network.emulated.nodes), so the configuration sets no rate and no wire
# time is charged on it; the copies it costs this host fall to the fitted host_s_per_byte.
LOOPBACK = Link(1e15, 0.0, goodput=1.0)


def cell_gpus_per_node(row: Any) -> int:
    """Engines per emulated node of a cell (1 for records that predate the column)."""
    k = getattr(row, "gpus_per_node", 1)
    return 1 if k is None or pd.isna(k) else max(1, int(k))


def fit_constants(cells: pd.DataFrame, rounds: int = 8) -> Constants:
    """Fit the Constants to cells by relative least squares, every constant >= 0 and the link
    factor >= 1 (a shaped link never carries more than its rate x GOODPUT). The critical path
    depends on the constants (overlap), so fit, re-derive the paths, fit again.

    At least two fit cells per constant: with k fit cells only the first max(1, k // 2) of
    (link_factor, overhead_s, host_s_per_byte, host_s_per_message) are fitted, the rest keep
    their defaults, as does a constant no fit cell depends on (no wire time among them, say)."""
    c = Constants()
    if cells.empty:
        return c
    y = (cells["wall_s"] / cells["steps"]).to_numpy(dtype=float)
    w = 1.0 / y
    for _ in range(rounds):
        parts = [_cell_step(r, c) for r in cells.itertuples()]
        cols = np.array([[p.wire_s, 1.0, p.host_bytes, p.messages] for p in parts])
        # the link factor is fitted as 1 + excess, excess >= 0
        vals = np.array([c.link_factor - 1, c.overhead_s, c.host_s_per_byte,
                         c.host_s_per_message])
        free = [j for j in range(4) if np.any(cols[:, j] > 0)][:max(1, len(cells) // 2)]
        fixed_cols = [j for j in range(4) if j not in free]
        rest = np.array([p.compute_s + p.latency_s + p.wire_s for p in parts])
        rest += cols[:, fixed_cols] @ vals[fixed_cols]
        vals[free] = _nnls(cols[:, free] * w[:, None], (y - rest) * w)
        new = Constants(link_factor=1 + float(vals[0]), overhead_s=float(vals[1]),
                        host_s_per_byte=float(vals[2]), host_s_per_message=float(vals[3]))
        if new == c:
            break
        c = new
    return c


def split_cells(cells: pd.DataFrame) -> pd.Series:
    """Deterministic fit/validate split: in order of measured step time, the 2nd, 5th, 8th, ...
    shortest cells fit the constants (at most a third of the cells), the rest only validate.
    Spreading the fit over the range of step times lets it see both the short cells, where the
    host's overheads show, and the long, link-bound ones."""
    order = (cells["wall_s"] / cells["steps"]).sort_values(kind="stable").index
    fit = pd.Series(False, index=cells.index)
    fit[order[1::3][:len(cells) // 3]] = True
    return fit


def validate(cells: pd.DataFrame) -> tuple[pd.DataFrame, Constants]:
    """Measured vs predicted seconds per step for every usable cell, constants fitted on the
    split's fit cells; rel_error = (predicted - measured) / measured."""
    usable, _ = _usable(cells)
    if usable.empty:
        raise RecordsError("no cell has replayed compute on a shaped link profile: nothing the "
                           "model can predict (run an emulated grid, e.g. params/emulated.yaml)")
    usable["role"] = np.where(split_cells(usable), "fit", "validate")
    c = fit_constants(usable[usable["role"] == "fit"])
    usable["measured_s"] = usable["wall_s"] / usable["steps"]
    usable["predicted_s"] = [_cell_step(r, c).total(c) for r in usable.itertuples()]
    usable["rel_error"] = (usable["predicted_s"] - usable["measured_s"]) / usable["measured_s"]
    usable["images_per_sec_cluster"] = (usable["workers"] * usable["batch_size"]
                                        / (usable["measured_s"] * usable["network_scale"]))
    cols = ["strategy", "algorithm", "overlap", "model", "workers", "servers", "network",
            "network_scale", "role", "measured_s", "predicted_s", "rel_error", "shape",
            "batch_size", "replay_source", "images_per_sec_cluster", "source"]
    return usable[cols].reset_index(drop=True), c


def validation_summary(table: pd.DataFrame) -> tuple[float, int]:
    """(median |relative error| over the validation cells, their count); NaN if none."""
    held = table[table["role"] == "validate"]["rel_error"].abs()
    return (float(held.median()) if len(held) else math.nan), int(len(held))


@dataclass(frozen=True)
class Validation:
    """What a projection states beside its curves: the validated constants (or none) and how
    well the model matched the held-out cells."""

    table: pd.DataFrame
    constants: Constants
    median_error: float
    n_cells: int
    scale: float
    note: str
    # the published multi-node check (`checks.with_published`); NaN / 0 until filled
    published_error: float = math.nan
    published_points: int = 0
    published_sources: int = 0
    published_max_gpus: int = 0

    def cluster_constants(self) -> Constants:
        """The constants for a real cluster, in its seconds: the link factor as fitted, the host
        overheads x scale (cluster-equivalent), and no per-message host cost: on the emulator it
        stands in for the latency the links lack, on a cluster the profile's latency is that
        cost. Analytic constants when not validated."""
        if self.n_cells == 0:
            return Constants(host_s_per_byte=0.0)
        return replace(self.constants.to_cluster(self.scale), host_s_per_message=0.0)

    @property
    def label(self) -> str:
        """'projected (model validated to X % on N cells[; Y % against K published multi-node
        measurements])', or why it is not."""
        published = (f"; {self.published_error:.0%} against {self.published_points} published "
                     f"multi-node measurements" if self.published_points else "")
        if self.n_cells == 0:
            return f"projected (model not validated: {self.note}{published})"
        return (f"projected (model validated to {self.median_error:.1%} median relative error on "
                f"{self.n_cells} held-out cells{published})")


def validation_for(dirs: Sequence[str | Path]) -> Validation:
    """validate() over the existing folders among `dirs`; an empty Validation (analytic
    constants) with the reason when they hold no predictable cell."""
    found = [d for d in dirs if Path(d).exists()]
    where = ", ".join(str(d) for d in dirs) or "no folder"
    try:
        if not found:
            raise RecordsError(f"none of {where} exists")
        table, c = validate(read_cells(found))
    except RecordsError as err:
        why = str(err) if str(err).startswith("none of") else (
            f"no measured cell with replayed compute on shaped links in {where}")
        return Validation(pd.DataFrame(), Constants(host_s_per_byte=0.0), math.nan, 0, 1.0, why)
    med, n = validation_summary(table)
    scale = float(table["network_scale"].astype(float).median())
    if n == 0:
        return Validation(table, c, math.nan, 0, scale, "every measured cell went to the fit")
    return Validation(table, c, med, n, scale, "")


def project(models: Sequence[str], strategies: Sequence[str], workers: Sequence[int],
            profiles: Sequence[str], c: Constants, *, replay_source: str = "gpu",
            shape: str = "cifar", batch_size: int = 32, servers: Sequence[int | None] = (None,),
            bucket_mb: Sequence[float] = (25.0,), algorithm: str = "ring_pipelined",
            latency_s: float | None = None, compute_scale: float = 1.0) -> pd.DataFrame:
    """Projected cluster seconds per step, images/sec and scaling efficiency for a grid.

    Compute per worker step is the replay table's forward + backward (x compute_scale, a
    what-if); efficiency is images/sec over N x one worker alone (forward, backward and
    update, no communication: the single-GPU baseline of Wang (NCHC) and Malik 2018).
    servers: PS server counts to try (None: the strategy's default; 0: S = N, the BytePS
    arrangement)."""
    from ddlstudy.workload import replay

    table = replay.load_table(replay_source)
    rows = []
    for model, strategy, profile, b in itertools.product(models, strategies, profiles, bucket_mb):
        compute = replay.compute_time(table, model, shape, batch_size) * compute_scale
        sizes = _step.gradient_bytes(model, shape)
        link = profile_link(profile, 1.0, latency_s)
        alone = predict_step("allreduce", model, 1, link, compute, c, sizes=sizes).total(c)
        for s in servers if strategy in PS_STEP else ("",):
            for n in sorted({1, *workers}):
                nserv = (n if s == 0 else s) if strategy in PS_STEP else None
                step = predict_step(strategy, model, n, link, compute, c, servers=nserv,
                                    algorithm=algorithm, bucket_mb=b, sizes=sizes).total(c)
                rows.append({"model": model, "strategy": strategy, "profile": profile,
                             "servers": nserv or 0,
                             "servers_rule": "N" if s == 0 else str(s or ""),
                             "bucket_mb": b, "workers": n, "compute_s": compute, "step_s": step,
                             "images_per_sec": n * batch_size / step,
                             "efficiency": alone / step})
    out = pd.DataFrame(rows)
    out["speedup"] = out["efficiency"] * out["workers"]
    out = out[out["workers"].isin(list(workers))]
    return out.assign(source="projected").reset_index(drop=True)
