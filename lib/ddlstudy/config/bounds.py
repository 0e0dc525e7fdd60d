"""The study's bounds and the checks that need no schema (pydantic-free, so the torchrun entry
and engines can use them where pydantic is absent): input limits, the one-line ParamsError,
sizes, memory and replay-table checks. `ddlstudy.config.params` builds the schema on these.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

# Input limits: a params file is a few KB (the largest here, default.yaml, is under 8 KiB);
# these stop a small file allocating gigabytes. The size is checked before anything is parsed:
# PyYAML composes every node before it can count them, ~3.7 KB of memory per key (60,000 keys in
# a 1 MiB file took 226 MB), so 64 KiB bounds a refused file to a few MB.
MAX_FILE_BYTES = 64 << 10
MAX_NODES = 20_000  # YAML nodes after alias expansion (an alias bomb multiplies them)
MAX_DEPTH = 32  # mapping/list nesting
MAX_LINE = 300  # characters of an error line
MAX_TIMEOUT_S = 86_400.0  # a day
MAX_SEED = 2**32 - 1  # numpy's seed range
MIN_INTERVAL_S = 0.01  # the monitor's sampling interval: psutil and /proc cannot do better
BUFFERS_PER_RANK = 2  # a collective holds its input and its result on every rank
RUN_ID = r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,63}$"  # a plain name: no separators, no . or ..

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMG]i?B?|B)?\s*$", re.IGNORECASE)


class ParamsError(ValueError):
    """One line: which file, which key, what is wrong, how to fix it. Control bytes a user
    typed (a key with terminal escapes) are shown escaped, never sent to the terminal raw."""

    def __init__(self, message: object = "") -> None:
        super().__init__(_escape(str(message)))


def _escape(text: str) -> str:
    """`text` with line breaks as spaces and other control bytes escaped ('\\x1b')."""
    return "".join(c if c.isprintable() else " " if c in "\n\r\t" else repr(c)[1:-1]
                   for c in text)


def parse_size(value: int | str) -> int:
    """'64M' -> 67108864 (K/M/G are powers of 1024, as nccl-tests' -b/-e)."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a size; write e.g. 8, 8K, 64M or 1G")
    if isinstance(value, int):
        return value
    m = _SIZE.match(str(value))
    if not m:
        raise ValueError(f"{value!r} is not a size; write e.g. 8, 8K, 64M or 1G")
    number, unit = float(m.group(1)), (m.group(2) or "B").upper()[:1]
    return int(number * {"B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[unit])


def collective_memory_problem(max_bytes: int, ranks: int, what: str = "max_bytes") -> str | None:
    """None when `ranks` local ranks, each holding BUFFERS_PER_RANK buffers of `max_bytes`, fit
    this machine's memory; else the one-line problem (flags and params share it)."""
    need = max_bytes * ranks * BUFFERS_PER_RANK
    have = machine_memory()
    if need > have:
        return (f"{what} {max_bytes} bytes x {ranks} ranks x {BUFFERS_PER_RANK} buffers = {need} "
                f"bytes is more than this machine's memory ({have} bytes); ask for less")
    return None


def replay_source_problem(source: str) -> str | None:
    """None when a replay source can be read: 'measured', 'gpu', a stored table's name or an
    existing CSV file; else the one-line problem (checked before anything starts)."""
    from ddlstudy.workload.replay import TABLES

    if source in ("measured", "gpu") or (TABLES / f"{source}.csv").is_file():
        return None
    path = Path(source)
    if not path.is_absolute() and not path.exists():
        path = _project_root() / path
    if path.is_file():
        return None
    stored = ", ".join(sorted(p.stem for p in TABLES.glob("*.csv")))
    return (f"replay table {source!r} not found: use 'measured', 'gpu', one of [{stored}], or "
            "an existing CSV path")


def _project_root() -> Path:
    """The checkout (records paths in params are relative to it)."""
    from ddlstudy.records.store import project_root

    return project_root()


def machine_memory() -> int:
    """Bytes of memory here: the bound on any size a params file may ask for."""
    import psutil

    return int(psutil.virtual_memory().total)


def _short(value: Any, limit: int = 60) -> str:
    """repr of a value cut to `limit` characters: error lines stay readable."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
