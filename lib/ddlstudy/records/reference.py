"""Reference results: what `make reference` measured under emulation, committed in the repo.

`make reference` runs the papers' grids on emulated links (params/reference.yaml) into
results/reference/<chapter>/runs/<cell>/ (summary.csv + meta.json per cell). Where this host
cannot build the emulated network (not root, no namespaces), chapters 03 and 05 show these
cells instead, always with `label()`: the host, dates and code version they were measured with,
never as if measured now.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ddlstudy.records import store as records


def reference_dir() -> Path:
    """results/reference/ of this checkout."""
    return records.project_root() / "results" / "reference"


def load(chapter: str, root: Path | None = None) -> pd.DataFrame:
    """Every finished cell of a reference chapter (one row per cell), with the host, date and
    git sha it was measured with (columns ref_host, ref_created, ref_git_sha); empty if none."""
    base = (root or reference_dir()) / chapter / "runs"
    rows = []
    for path in sorted(base.rglob("summary.csv")):
        meta_path = path.parent / "meta.json"
        if not meta_path.exists():
            continue
        meta = records.read_meta(path.parent)
        if meta.get("status") != "ok":
            continue
        rows.append(pd.read_csv(path).assign(
            ref_host=meta.get("host", {}).get("hostname", "?"),
            ref_created=str(meta.get("created", "?")), ref_git_sha=meta.get("git_sha", "?")))
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


def label(cells: pd.DataFrame) -> str:
    """'reference run: <host>, <first date> to <last date>, git <sha(s)>' for these cells."""
    if cells.empty:
        return "reference run: none committed (run `make reference` as root)"
    dates = sorted(c[:10] for c in cells["ref_created"].astype(str))
    span = dates[0] if dates[0] == dates[-1] else f"{dates[0]} to {dates[-1]}"
    shas = sorted({str(s)[:7] + ("+dirty" if str(s).endswith("+dirty") else "")
                   for s in cells["ref_git_sha"]})
    hosts = ", ".join(sorted(set(cells["ref_host"].astype(str))))
    return f"reference run: {hosts}, {span}, git {', '.join(shas)} ({len(cells)} cells)"
