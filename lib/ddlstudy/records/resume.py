"""When a finished result may be reused: digests of the code and notebook, atomic markers.

A chapter or grid cell is reused only if the code that produced it is byte-for-byte the code
that would run now. Content is hashed (not the git sha), so an uncommitted edit counts as a
change and a dirty tree is never mistaken for the commit it started from. Markers are written
to a temp file and renamed into place, so a crash leaves the old marker or none, never half of
one; a marker that does not parse means "not done".
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

PACKAGE = Path(__file__).resolve().parents[1]  # lib/ddlstudy


def files_digest(paths: list[Path], root: Path) -> str:
    """sha256 over (relative path, content) of each file, in sorted order."""
    h = hashlib.sha256()
    for path in sorted(paths):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def code_digest(package: Path | None = None) -> str:
    """Digest of every lib/ddlstudy/**/*.py and bundled table: changes when any code changes."""
    package = package or PACKAGE
    files = [p for p in package.rglob("*") if p.is_file() and p.suffix in (".py", ".csv")
             and "__pycache__" not in p.parts]
    return files_digest(files, package)


def file_digest(path: str | Path) -> str:
    """Digest of one file's content (a notebook), or 'missing'."""
    path = Path(path)
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.exists() else "missing"


def write_json_atomic(path: str | Path, data: dict[str, Any]) -> Path:
    """Write JSON to a temp file in the same folder, fsync, then os.replace it into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(data, default=str, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def read_marker(path: str | Path) -> dict[str, Any] | None:
    """The marker's content, or None when it is missing, unreadable or not a JSON object."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def clear_marker(path: str | Path) -> None:
    """Remove a marker before its result is rebuilt: an interrupted rerun is then not done."""
    Path(path).unlink(missing_ok=True)


def tree_digest(folders: list[Path], suffixes: tuple[str, ...] = (".csv", ".json")) -> str:
    """Digest of the record files (csv, json) under `folders`, recursively, paths included; a
    missing folder counts as 'missing' (so creating it later changes the digest)."""
    h = hashlib.sha256()
    for folder in folders:
        folder = Path(folder)
        h.update(str(folder).encode() + b"\0")
        if not folder.is_dir():
            h.update(b"missing\0")
            continue
        files = [p for p in folder.rglob("*") if p.is_file() and p.suffix in suffixes]
        h.update(files_digest(files, folder).encode() if files else b"empty")
    return h.hexdigest()[:16]


def notebook_ok(path: str | Path) -> bool:
    """True when an executed notebook exists, parses and holds at least one cell (a 0-byte or
    truncated copy is not a finished chapter)."""
    try:
        nb = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(nb, dict) and isinstance(nb.get("cells"), list) and bool(nb["cells"])


def tables_ok(folder: str | Path, tables: dict[str, tuple[str, ...]]) -> str | None:
    """None when every declared table `<folder>/<name>.csv` exists, parses and carries its
    declared columns; else what is wrong (one line)."""
    import pandas as pd

    for name, columns in tables.items():
        path = Path(folder) / f"{name}.csv"
        try:
            found = pd.read_csv(path, nrows=5).columns
        except (OSError, ValueError) as err:  # missing, empty, unparsable
            return f"{path}: {type(err).__name__}"
        missing = set(columns) - set(found)
        if missing:
            return f"{path}: lacks columns {sorted(missing)}"
    return None

