"""Which process a recorded pid was: its pid and its start, compared so that a stepped wall
clock cannot make a live process look dead.

Clean-up code (orphaned clusters, emulated networks of crashed runs) decides from a record
written by another process whether that record's owner still runs. psutil's `create_time()` is
boot time + start ticks, and Linux derives the boot time (/proc/stat `btime`) from the wall
clock: when NTP or a resumed VM steps that clock, the same live process reads a different
create_time than the one its record holds, and a live run is taken for a dead one. The start
in clock ticks since boot (/proc/<pid>/stat, field 22) never changes, so a stamp carries it and
it decides where the platform has it; elsewhere (macOS stores the start time itself) the
create_time does.
"""

from __future__ import annotations

import os
from typing import Any

import psutil

CREATE_TIME_TOLERANCE_S = 0.01  # create_time's resolution on Linux (one clock tick)


def start_ticks(pid: int) -> int | None:
    """Process `pid`'s start in clock ticks since boot (Linux), or None where /proc has none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # comm (field 2) may hold spaces and parentheses: the fields after it follow the last ')'
    fields = stat[stat.rfind(b")") + 2:].split()
    try:
        return int(fields[19])  # field 22 counted from 1 = index 19 after state (field 3)
    except (IndexError, ValueError):
        return None


def stamp(pid: int) -> dict[str, Any] | None:
    """{"pid", "create_time"[, "start_ticks"]} of a running process; None if it has ended."""
    try:
        created = psutil.Process(pid).create_time()
    except psutil.Error:
        return None
    out: dict[str, Any] = {"pid": pid, "create_time": created}
    if (ticks := start_ticks(pid)) is not None:
        out["start_ticks"] = ticks
    return out


def matches(record: dict[str, Any]) -> psutil.Process | None:
    """The process `record` (a `stamp`) names if it still runs, else None: same pid and same
    start (ticks since boot where both sides have them, else create_time), and not a zombie."""
    try:
        proc = psutil.Process(int(record["pid"]))
        recorded = record.get("start_ticks")
        live = start_ticks(proc.pid) if recorded is not None else None
        if live is not None:
            same = live == int(recorded)
        else:
            same = abs(proc.create_time() - float(record.get("create_time") or 0)) \
                < CREATE_TIME_TOLERANCE_S
        return proc if same and proc.status() != psutil.STATUS_ZOMBIE else None
    except (psutil.Error, KeyError, TypeError, ValueError):
        return None


def encode(record: dict[str, Any]) -> str:
    """One stamp as "pid:create_time[:start_ticks]", for a list in an environment variable."""
    tail = f":{record['start_ticks']}" if record.get("start_ticks") is not None else ""
    return f"{record['pid']}:{record.get('create_time') or 0}{tail}"


def decode(item: str) -> dict[str, Any] | None:
    """The stamp `encode` wrote (an older "pid:create_time" too); None for anything else."""
    parts = item.strip().split(":")
    if not parts[0].isdigit() or len(parts) > 3:
        return None
    try:
        out: dict[str, Any] = {"pid": int(parts[0]),
                               "create_time": float(parts[1]) if len(parts) > 1 and parts[1]
                               else 0.0}
        if len(parts) == 3:
            out["start_ticks"] = int(parts[2])
    except ValueError:
        return None
    return out


def mine() -> dict[str, Any]:
    """This process's stamp."""
    return stamp(os.getpid()) or {"pid": os.getpid(), "create_time": 0.0}
