"""The results store: tidy tables plus the metadata that says what produced them.

Every table a run writes sits beside a `meta.json` (params, git sha, versions, host, cores), so a
figure can always be traced back to the run that measured it.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import socket
import subprocess
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd

from ddlstudy.records.lock import atomic_path, atomic_write_text
from ddlstudy.records.resume import code_digest

_PACKAGES = ("ddlstudy", "torch", "numpy", "pandas", "ipyparallel", "papermill", "tensorflow-cpu",
             "horovod")


def project_root() -> Path:
    """The checkout this code runs from (or the working directory when installed elsewhere)."""
    here = Path(__file__).resolve()
    for parent in [Path.cwd(), *Path.cwd().parents, *here.parents]:
        if (parent / "pyproject.toml").exists() and (parent / "lib" / "ddlstudy").is_dir():
            return parent
    return Path.cwd()


def git_sha(repo: Path | None = None) -> str:
    """The commit that produced a record; '+dirty' when the tree had uncommitted changes."""
    cwd = repo or Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return sha + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0]}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


# Columns derived from several runs (speed-up over the cell's 1-worker runs): written by
# analysis.plots.add_speedup, which recomputes them from images/sec; never copied from one run's
# row to another's (records.reference.append_summary leaves them empty).
SPEEDUP_COLUMNS = ("base_images_per_sec", "speedup", "efficiency")

PSI_CPU = Path("/proc/pressure/cpu")


def cpu_stall_s(path: Path = PSI_CPU) -> float | None:
    """Seconds since boot in which at least one runnable task on this host waited for a CPU
    (the kernel's pressure stall information, `some` total); None where the kernel keeps none.
    Its growth over a window, divided by the window's length, is the share of that window in
    which the host's CPUs were oversubscribed, the run's own processes included: unlike a load
    average sampled at one instant, it covers exactly the window measured."""
    try:
        line = next(ln for ln in path.read_text().splitlines() if ln.startswith("some "))
        return int(line.rsplit("total=", 1)[1]) / 1e6
    except (OSError, StopIteration, IndexError, ValueError):
        return None


def host_info() -> dict[str, Any]:
    """The machine, and its 1/5/15-min load average when the record is written (a run's meta is
    written at its end): on a shared host, what else was running is part of the measurement."""
    info: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "load_avg": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
    }
    try:
        import psutil

        info["memory_gb"] = round(psutil.virtual_memory().total / 1e9, 1)
    except ImportError:
        pass
    try:
        import torch

        info["cuda_devices"] = [torch.cuda.get_device_name(i)
                                for i in range(torch.cuda.device_count())]
    except ImportError:
        info["cuda_devices"] = []
    return info


def run_meta(params: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "git_sha": git_sha(),
        "code_digest": code_digest(),
        "versions": versions(),
        "host": host_info(),
        "argv": sys.argv,
        "params": params or {},
        **extra,
    }


def write_meta(out_dir: str | Path, params: dict[str, Any] | None = None,
               name: str = "meta.json", **extra: Any) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    # a temp unique per process and thread + rename: never half a meta.json, never another's
    atomic_write_text(path, json.dumps(run_meta(params, **extra), indent=2, default=str) + "\n")
    return path


def read_meta(out_dir: str | Path, name: str = "meta.json") -> dict[str, Any]:
    return json.loads((Path(out_dir) / name).read_text())


def write_table(df: pd.DataFrame, out_dir: str | Path, name: str) -> Path:
    """Write `name`.csv atomically, so an interrupted run never leaves half a table: through a
    temp name unique per process and thread (two writers never share one), removed on any error
    (a full disk included)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.csv"
    with atomic_path(path) as tmp:
        df.to_csv(tmp, index=False)
    return path


def failed_runs(df: pd.DataFrame) -> pd.Series:
    """Rows whose run raised: `error` holds text. A CSV round trip turns a clean run's '' into
    NaN (or the string 'nan' once the column was cast to str); neither counts. All False
    without an `error` column."""
    if "error" not in df:
        return pd.Series(False, index=df.index)
    text = df["error"].astype(str)
    return df["error"].notna() & (text != "") & (text != "nan")


def write_grid_summary(summary: pd.DataFrame, out_dir: str | Path,
                       keys: Sequence[str]) -> pd.DataFrame:
    """A grid chapter's summary with `cpu_bound` a bool column (False where a run lacks it),
    written as summary.csv before anything is checked, so a failed run's row is kept. Raises
    AssertionError naming the failed runs by `keys` and their error."""
    # eq(True), not fillna(False): a column of missing values is float, which pandas will not
    # fill with a bool
    summary = summary.assign(cpu_bound=summary["cpu_bound"].eq(True)
                             if "cpu_bound" in summary else False)
    write_table(summary, out_dir, "summary")
    failed = summary[failed_runs(summary)]
    assert failed.empty, f"runs failed: {failed[[*keys, 'error']].to_dict('records')}"
    return summary


def read_table(out_dir: str | Path, name: str) -> pd.DataFrame:
    return pd.read_csv(Path(out_dir) / f"{name}.csv")


def chapter_dir(run_dir: str | Path | None, name: str, params: dict[str, Any] | None = None,
                **extra: Any) -> Path:
    """The folder one notebook writes its tables and figures to, with its meta.json."""
    base = Path(run_dir) if run_dir else project_root() / "outputs" / "interactive"
    out = base / name
    write_meta(out, params, chapter=name, **extra)
    return out
