"""Horovod's timeline (HOROVOD_TIMELINE) of one run: recorded, parsed and drawn (chapter 07).

Horovod's rank 0 writes Chrome-trace JSON: per tensor (one trace "process" per tensor name),
nested begin/end events for each phase of its all-reduce (NEGOTIATE_ALLREDUCE while ranks agree
the tensor is ready, then ALLREDUCE with its inner activities: the fusion-buffer copies and the
gloo ring itself). The file is written as the run goes and is often not closed with "]", so
`load` reads it leniently. Times are microseconds on rank 0's clock.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

import pandas as pd

COLUMNS = ["tensor", "phase", "depth", "start_s", "end_s", "duration_s"]


def _set_timeline(name: str) -> str:
    """Engine side: HOROVOD_TIMELINE for the next hvd.init() of this engine (rank 0 writes),
    in the engine's own temporary folder: an engine on another host never gets a driver path.
    Returns the path it set."""
    import tempfile

    path = os.path.join(tempfile.gettempdir(), name)
    with contextlib.suppress(FileNotFoundError):  # engines of one host share the folder
        os.unlink(path)
    os.environ["HOROVOD_TIMELINE"] = path
    os.environ["HOROVOD_TIMELINE_MARK_CYCLES"] = "0"
    return path


def _take_timeline() -> str:
    """Engine side: the timeline's text ('' where this engine wrote none), its file removed and
    HOROVOD_TIMELINE unset, so the driver gets the events whatever host the engine is on.
    Engines of one host share the temporary folder and run this at once: another may have read
    and removed rank 0's file between our check and our open (a fresh-clone CI hit that race),
    so a file gone is '' here, not an error."""
    path = os.environ.pop("HOROVOD_TIMELINE", None)
    if not path:
        return ""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except FileNotFoundError:
        return ""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    return text


def record(config: Any, profile: str, out: Path, *, scale: float | None = None,
           offload_off: bool = False, **cluster_kwargs: Any) -> pd.DataFrame:
    """Train `config` (a horovod config) once on `profile` links with the timeline on; its
    events (see `load`), the run's records under out/run."""
    from ddlstudy.experiments import grid
    from ddlstudy.experiments.frameworks import profile_scale
    from ddlstudy.train.trainer import train

    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    path = out / "horovod_timeline.json"
    path.unlink(missing_ok=True)
    scale = profile_scale(profile, [config], scale, offload_off)
    with grid.emulated_cluster(profile, config.world_size, scale, offload_off=offload_off,
                               **cluster_kwargs) as cluster:
        cell = grid.dilate([config], cluster)[0]
        name = f"ddlstudy-hvd-timeline-{os.getpid()}-{time.time_ns()}.json"
        cluster.run(_set_timeline, name, world_size=cell.world_size, timeout=60)
        try:
            train(cluster, cell, out_dir=out / "run", progress=False)
        finally:
            texts = cluster.run(_take_timeline, world_size=cell.world_size, timeout=60)
            path.write_text(next((t for t in texts if t), ""), encoding="utf-8")
    return load(path)


def _events(text: str) -> list[dict[str, Any]]:
    """The JSON events of a possibly unterminated Chrome-trace array."""
    body = text.strip().rstrip(",")
    if not body.endswith("]"):
        body += "]"
    try:
        return list(json.loads(body))
    except ValueError:  # a torn last line: keep every complete one
        events = []
        for line in text.splitlines():
            line = line.strip().rstrip(",")
            if line.startswith("{") and line.endswith("}"):
                try:
                    events.append(json.loads(line))
                except ValueError:
                    continue
        return events


def load(path: str | Path) -> pd.DataFrame:
    """One row per completed phase: tensor name, phase, nesting depth, start/end in seconds
    from the first event. Missing or empty file: an empty frame with COLUMNS."""
    path = Path(path)
    if not path.exists():
        return pd.DataFrame(columns=COLUMNS)
    events = _events(path.read_text())
    names = {e.get("pid"): e.get("args", {}).get("name") for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    stacks: dict[Any, list[dict[str, Any]]] = {}
    rows = []
    for e in events:
        key = (e.get("pid"), e.get("tid"))
        if e.get("ph") == "B":
            stacks.setdefault(key, []).append(e)
        elif e.get("ph") == "E" and stacks.get(key):
            begin = stacks[key].pop()
            rows.append({"tensor": names.get(e.get("pid")) or str(e.get("pid")),
                         "phase": begin.get("name", "?"), "depth": len(stacks[key]),
                         "start_us": float(begin["ts"]), "end_us": float(e["ts"])})
        elif e.get("ph") == "X" and "dur" in e and not str(e.get("name", "")).isdigit():
            rows.append({"tensor": names.get(e.get("pid")) or str(e.get("pid")),
                         "phase": e.get("name", "?"), "depth": 0, "start_us": float(e["ts"]),
                         "end_us": float(e["ts"]) + float(e["dur"])})
    if not rows:
        return pd.DataFrame(columns=COLUMNS)
    df = pd.DataFrame(rows)
    t0 = df["start_us"].min()
    df["start_s"] = (df["start_us"] - t0) / 1e6
    df["end_s"] = (df["end_us"] - t0) / 1e6
    df["duration_s"] = df["end_s"] - df["start_s"]
    return df[COLUMNS].sort_values(["start_s", "depth"]).reset_index(drop=True)


def gradients(events: pd.DataFrame) -> pd.DataFrame:
    """The training steps' top-level phases: without the start-up broadcast of the weights
    (its negotiation waits for every rank's init) and without rank-ready marks."""
    if events.empty:
        return events
    keep = (events["depth"] == 0) & ~events["tensor"].astype(str).str.startswith("broadcast")
    return events[keep]


def plot(events: pd.DataFrame, title: str) -> Any:
    """Top-level phases per gradient tensor as horizontal bars (rows: tensors in order of
    first start)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 4.2))
    top = gradients(events)
    if top.empty:
        ax.text(0.5, 0.5, "no timeline events recorded", ha="center", transform=ax.transAxes)
        ax.set_title(title, fontsize=9)
        return fig
    order = top.groupby("tensor")["start_s"].min().sort_values().index.tolist()
    row = {t: i for i, t in enumerate(order)}
    colors = dict(zip(sorted(top["phase"].unique()), plt.cm.tab10.colors, strict=False))
    for phase, part in top.groupby("phase"):
        for r in part.itertuples():
            ax.broken_barh([(r.start_s, max(r.duration_s, 1e-5))], (row[r.tensor] - 0.4, 0.8),
                           color=colors[phase], label=phase)
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    ax.legend(unique.values(), unique.keys(), fontsize=8, loc="lower right")
    ax.set_xlabel("seconds from the first event (rank 0's clock)")
    ax.set_ylabel(f"tensor (of {len(order)}, first start at the bottom)")
    ax.set_yticks([])
    ax.set_title(title, fontsize=9)
    return fig


def describe(events: pd.DataFrame) -> str:
    """Two sentences computed from the events: how many tensors, time per top-level phase."""
    top = gradients(events)
    if top.empty:
        return "Horovod wrote no gradient events in this run's timeline."
    per = top.groupby("phase")["duration_s"].agg(["count", "sum", "median"])
    span = float(top["end_s"].max() - top["start_s"].min())
    return (f"Rank 0's timeline of the training steps (the start-up broadcast left out) spans "
            f"{span:.2f} s and {top['tensor'].nunique()} gradient tensors: "
            + "; ".join(f"{p} {int(r['count'])} times, {r['sum']:.2f} s in all (median "
                        f"{r['median'] * 1e3:.1f} ms)" for p, r in per.iterrows())
            + ". Phases of different tensors overlap (Horovod fuses and pipelines them), so "
            "their sums exceed the span.")
