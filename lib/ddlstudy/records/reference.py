"""Reference results: what `make reference` measured under emulation, committed in the repo.

`make reference` runs the papers' grids on emulated links (params/reference.yaml) into
results/reference/<chapter>/runs/<cell>/ (summary.csv + meta.json per cell). Where this host
cannot build the emulated network (not root, no namespaces), chapters 03 and 05 show these
cells instead, always with `label()`: the host, dates and code version they were measured with,
never as if measured now.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from ddlstudy.records import store as records


def reference_dir() -> Path:
    """results/reference/ of this checkout."""
    return records.project_root() / "results" / "reference"


def code_version(meta: dict[str, Any]) -> tuple[str, bool]:
    """(git sha, committed) of the code that wrote a run. A run from a tree with uncommitted
    changes (`+dirty`) counts as committed only when `certify` found a commit whose package code
    is byte-for-byte the code it ran (its `code_commit`); that commit is then its sha."""
    sha = str(meta.get("git_sha") or "?")
    if not sha.endswith("+dirty"):
        return sha, True
    commit = meta.get("code_commit")
    return (str(commit), True) if commit else (sha, False)


def load(chapter: str, root: Path | None = None, *,
         uncommitted: bool = False) -> pd.DataFrame:
    """Every finished run of a reference chapter's cells (one row per run, `repeat` from its
    folder: 0 = the cell folder, k = r<k>), with the host, date and git sha it was measured with
    (columns ref_host, ref_created, ref_git_sha); empty if none. Runs of uncommitted code
    (`code_version`) are not reference material and are left out unless `uncommitted`; how many
    were left out is in the frame's attrs["uncommitted_left_out"] (`label` says it)."""
    base = (root or reference_dir()) / chapter / "runs"
    rows = []
    left_out = 0
    for path in sorted(base.rglob("summary.csv")):
        meta_path = path.parent / "meta.json"
        if not meta_path.exists():
            continue
        meta = records.read_meta(path.parent)
        if meta.get("status") != "ok":
            continue
        sha, committed = code_version(meta)
        if not committed and not uncommitted:
            left_out += 1
            continue
        name = path.parent.name
        df = pd.read_csv(path)
        if name[:1] == "r" and name[1:].isdigit():  # run k of its cell (grid.repeat_dir)
            repeat = int(name[1:])
        else:  # the cell folder: run 0, unless its own row says which run it is
            repeat = int(df["repeat"].iloc[0]) if "repeat" in df and df["repeat"].notna().all() \
                else 0
        df = df.drop(columns=[c for c in ("repeat",) if c in df])
        rows.append(with_identity(df, meta).assign(
            repeat=repeat, ref_host=meta.get("host", {}).get("hostname", "?"),
            ref_created=str(meta.get("created", "?")), ref_git_sha=sha))
    table = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()
    table.attrs["uncommitted_left_out"] = left_out
    return table


def load_table(chapter: str, name: str, root: Path | None = None) -> pd.DataFrame:
    """A reference chapter's own table `name`.csv (chapters 08-10 compute theirs from all their
    runs: bracketing.csv, sweep.csv, ...), with the chapter's host, date and git sha (ref_host,
    ref_created, ref_git_sha, from its meta.json); empty if none. A table whose rows carry their
    own run's provenance (run_host, run_created, run_git_sha: chapter 09's malik.csv, measured
    in a later sitting than the chapter's meta.json) keeps it, row by row."""
    folder = (root or reference_dir()) / chapter
    path = folder / f"{name}.csv"
    if not path.exists() or not (folder / "meta.json").exists():
        return pd.DataFrame()
    meta = records.read_meta(folder)
    df = pd.read_csv(path)
    own = {"ref_host": "run_host", "ref_created": "run_created", "ref_git_sha": "run_git_sha"}
    chapter_own = {"ref_host": (meta.get("host") or {}).get("hostname", "?"),
                   "ref_created": str(meta.get("created", "?")),
                   "ref_git_sha": code_version(meta)[0]}
    if set(own.values()) <= set(df):  # rows a later sitting added (add-rows) carry their own;
        # the chapter's first sitting's rows have none: they are the chapter meta's
        df = df.assign(**{ref: df[run].where(df[run].notna(), chapter_own[ref]).astype(str)
                          for ref, run in own.items()})
    else:
        df = df.assign(**chapter_own)
    df.attrs["table"] = f"{name}.csv"  # `label` counts its rows as rows, not runs
    return df


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def counted(cells: pd.DataFrame) -> str:
    """What a reference frame holds, counted as what its rows are: 'N runs of M cells' for
    `load` (one row per run; a cell is a distinct configuration: IDENTITY and the network
    identity), 'N rows of <name>.csv' for `load_table` (a chapter's own table)."""
    table = cells.attrs.get("table")
    if table:
        return f"{_plural(len(cells), 'row')} of {table}"
    keys = [k for k in (*IDENTITY, *NETWORK_IDENTITY) if k in cells]
    n_cells = len(cells.drop_duplicates(keys)) if keys else len(cells)
    return f"{_plural(len(cells), 'run')} of {_plural(n_cells, 'cell')}"


def label(cells: pd.DataFrame) -> str:
    """'reference run: <host(s)>, <first date>[ to <last date>], git <sha(s)> (<counted>)' for
    a `load` or `load_table` frame, and how many runs of uncommitted code `load` left out."""
    gone = int(cells.attrs.get("uncommitted_left_out", 0))
    note = (f"; {gone} run(s) of uncommitted code left out (not reference material)"
            if gone else "")
    if cells.empty:
        return f"reference run: none committed (run `make reference` as root){note}"
    dates = sorted(c[:10] for c in cells["ref_created"].astype(str))
    span = dates[0] if dates[0] == dates[-1] else f"{dates[0]} to {dates[-1]}"
    shas = sorted({str(s)[:7] + ("+dirty" if str(s).endswith("+dirty") else "")
                   for s in cells["ref_git_sha"]})
    hosts = ", ".join(sorted(set(cells["ref_host"].astype(str))))
    return f"reference run: {hosts}, {span}, git {', '.join(shas)} ({counted(cells)}){note}"


# ----------------------------------------------------------------------------- adding runs
def _cells(runs: Path) -> list[Path]:
    """Every cell folder under a chapter's runs/ (at any depth: chapter 07 groups cells by
    profile): a folder holding a summary that is not itself a repeat folder r<k>."""
    found = {p.parent for p in runs.rglob("summary.csv")}
    cells = {p.parent if p.name[:1] == "r" and p.name[1:].isdigit() else p for p in found}
    return sorted(cells)


def cell_runs(cell: Path) -> list[Path]:
    """A cell's run folders in repeat order: the cell folder itself (run 0) when it holds a
    summary, then r1, r2, ... (experiments.grid.repeat_dir's layout)."""
    runs = [cell] if (cell / "summary.csv").exists() else []
    numbered = sorted((p for p in cell.glob("r[0-9]*") if p.name[1:].isdigit()),
                      key=lambda p: int(p.name[1:]))
    return runs + [p for p in numbered if (p / "summary.csv").exists()]


# What a cell ran beyond its TrainConfig (meta.json's `network`): the testbed whose settings it
# took, the link profile, engines per node and the per-message latency emulated. Records written
# before these were recorded read as what that code ran: no testbed (the study's own settings:
# in results/reference an H100's compute replayed, one GPU per node), one engine per node, no
# latency emulated.
DEFAULT_TESTBED = "none"
NETWORK_IDENTITY = ("testbed", "network", "gpus_per_node", "latency_emulated_s")


def cell_identity(meta: dict[str, Any] | None) -> dict[str, Any]:
    """testbed, network (profile name, 'none' without an emulated network), gpus_per_node and
    latency_emulated_s (the per-message delay emulated, 0 when none) of a run, from its
    meta.json."""
    net = (meta or {}).get("network") or {}
    return {"testbed": str(net.get("testbed") or DEFAULT_TESTBED),
            "network": str(net.get("profile") or "none"),
            "gpus_per_node": int(net.get("gpus_per_node") or 1),
            "latency_emulated_s": round(float(net.get("latency_emulated_s") or 0.0), 9)}


def with_identity(df: pd.DataFrame, meta: dict[str, Any] | None) -> pd.DataFrame:
    """`df` (a run's summary rows) with the cell identity's columns it lacks (`network` is
    the trainer's own column), and the config's IDENTITY keys a summary written before they
    were columns lacks, from the run's own params (`warmup_steps` before 2026-11-26's fourth
    sitting): else a cell pooled across such sittings counts as two."""
    ident = cell_identity(meta)
    params = (meta or {}).get("params") or {}
    config = {k: params[k] for k in IDENTITY if k in params and not isinstance(
        params[k], (dict, list))}
    return df.assign(**{k: v for k, v in {**config, **ident}.items() if k not in df})


IDENTITY = ("model", "strategy", "algorithm", "workers", "servers", "batch_size", "shape",
            "dataset", "dtype", "steps", "warmup_steps", "compute", "replay_source", "network",
            "scale", "time_dilation", "overlap", "bucket_mb", "lr", "momentum", "seed")


def same_cell(a: Path, b: Path) -> str:
    """'' when runs `a` and `b` ran the same cell configuration (IDENTITY keys both record, and
    the cell identity beyond the config: testbed, network, gpus_per_node, latency, with the
    defaults for records that predate them), else the first key that differs, as
    'key: a -> b'."""
    ma, mb = records.read_meta(a), records.read_meta(b)
    pa, pb = ma.get("params") or {}, mb.get("params") or {}
    for key in IDENTITY:
        if key in pa and key in pb and pa[key] != pb[key]:
            return f"{key}: {pa[key]!r} -> {pb[key]!r}"
    ia, ib = cell_identity(ma), cell_identity(mb)
    for key in NETWORK_IDENTITY:
        if ia[key] != ib[key]:
            return f"{key}: {ia[key]!r} -> {ib[key]!r}"
    return ""


def _stamp(run: Path) -> tuple[str, str, str]:
    """What identifies one run: when and by which code and host it was written."""
    meta = records.read_meta(run)
    return (str(meta.get("created")), str(meta.get("git_sha")),
            str((meta.get("host") or {}).get("hostname")))


def add_runs(src: Path, dest: Path, tables: bool = False) -> dict[str, int]:
    """Add every finished run of `src` (one chapter folder of another sitting, same params per
    cell) to `dest` as further independent runs: a cell's runs in `dest` keep their numbers, the
    new ones follow (r<m>, r<m+1>, ...), each with its own meta.json (host, date, git sha, load).
    Then `dest`/summary.csv is rebuilt from every run (`rebuild_summary`). Returns cell -> runs
    added. A run whose meta is missing or not ok is skipped; a cell `dest` lacks is created.
    A chapter `dest` does not hold yet (no meta.json: chapters 08-10, whose tables are computed
    from all their runs) also gets `src`'s own tables and meta.json (`folder` columns made
    relative to the chapter); only CSV and JSON files are copied (no checkpoints). With
    `tables`, a chapter `dest` holds already (another part of it measured in an earlier
    sitting: chapter 11's accuracy runs) gets the tables of `src` it lacks, each row stamped
    with `src`'s host, date and code (run_host, run_created, run_git_sha: `load_table` keeps
    them row by row); its own tables are never overwritten. Off by default: a chapter 03
    folder's derived tables (breakdown.csv) from one sitting would misstate the pooled runs."""
    import shutil

    def copy_tables(stamp: dict[str, str] | None) -> None:
        for f in sorted(src.glob("*.csv")):
            if stamp is not None and (dest / f.name).exists():
                continue
            table = pd.read_csv(f) if f.stat().st_size else pd.DataFrame()
            if table.empty and stamp is not None:
                continue
            if "folder" in table:
                table["folder"] = [str(Path(x).relative_to(src)) if str(x).startswith(str(src))
                                   else x for x in table["folder"]]
            if stamp is not None:
                table = table.assign(**{k: v for k, v in stamp.items() if k not in table})
            table.to_csv(dest / f.name, index=False)

    if (src / "meta.json").exists() and not (dest / "meta.json").exists():
        dest.mkdir(parents=True, exist_ok=True)
        copy_tables(None)
        shutil.copy2(src / "meta.json", dest / "meta.json")
    elif tables and (src / "meta.json").exists():
        meta = records.read_meta(src)
        copy_tables({"run_host": (meta.get("host") or {}).get("hostname", "?"),
                     "run_created": str(meta.get("created", "?")),
                     "run_git_sha": code_version(meta)[0]})
    added: dict[str, int] = {}
    new_runs: list[tuple[Path, int]] = []
    cells = _cells(src / "runs")
    for cell in cells:
        todo = [r for r in cell_runs(cell)
                if (r / "meta.json").exists() and records.read_meta(r).get("status") == "ok"]
        if not todo:
            continue
        target = dest / "runs" / cell.relative_to(src / "runs")
        known = {_stamp(r) for r in cell_runs(target)} if target.exists() else set()
        todo = [r for r in todo if _stamp(r) not in known]  # a run already there is not new
        if not todo:
            continue
        have = len(cell_runs(target)) if target.exists() else 0
        if have and (why := same_cell(cell_runs(target)[0], todo[0])):
            raise ValueError(f"{cell.name}: the new runs are another configuration ({why}); "
                             "only runs of the same cell can be pooled")
        for i, run in enumerate(todo):
            to = target if have + i == 0 else target / f"r{have + i}"
            new_runs.append((target, have + i))
            to.mkdir(parents=True, exist_ok=True)
            for f in run.iterdir():
                if f.is_file() and f.suffix in (".csv", ".json"):
                    shutil.copy2(f, to / f.name)
        added[str(cell.relative_to(src / "runs"))] = len(todo)
    flat = all(c.parent == src / "runs" for c in cells)
    if flat:
        rebuild_summary(dest)
    elif (dest / "summary.csv").exists():
        append_summary(dest, new_runs)
    return added


def add_rows(src: Path, dest: Path, table: str, keys: list[str],
             runs: str | None = None) -> int:
    """Append to `dest`/<table>.csv the rows of `src`/<table>.csv whose `keys` values `dest`
    lacks (another sitting measured more arms of the same table: chapter 11's accuracy runs
    for more strategies on the same seeds), each stamped with `src`'s host, date and code
    (run_host, run_created, run_git_sha); `dest`'s own rows are kept as they are. With `runs`
    (a folder of per-run folders inside both chapters, e.g. accuracy_runs), the run folders
    `dest` lacks are copied too, whole (CSV and JSON files only); nothing is added to a run
    folder `dest` has. Returns the rows added; ValueError
    when a table or a key column is missing."""
    import shutil

    a, b = src / f"{table}.csv", dest / f"{table}.csv"
    for f in (a, b):
        if not f.is_file():
            raise ValueError(f"{f} does not exist: both chapters must hold {table}.csv")
    new, old = pd.read_csv(a), pd.read_csv(b)
    missing = [k for k in keys if k not in new or k not in old]
    if missing:
        raise ValueError(f"key column(s) {', '.join(missing)} not in both {table}.csv")
    have = set(old[keys].astype(str).itertuples(index=False, name=None))
    fresh = new[[t not in have for t in new[keys].astype(str).itertuples(index=False,
                                                                          name=None)]]
    if not fresh.empty:
        meta = records.read_meta(src)
        stamp = {"run_host": (meta.get("host") or {}).get("hostname", "?"),
                 "run_created": str(meta.get("created", "?")),
                 "run_git_sha": code_version(meta)[0]}
        fresh = fresh.assign(**{k: v for k, v in stamp.items() if k not in fresh})
        pd.concat([old, fresh], ignore_index=True).to_csv(b, index=False)
    if runs:  # a run folder (one holding summary.csv) dest lacks, whole; never into dest's
        for run in sorted(p.parent for p in (src / runs).rglob("summary.csv")):
            to = dest / runs / run.relative_to(src / runs)
            if to.exists():
                continue
            to.mkdir(parents=True)
            for f in run.iterdir():
                if f.is_file() and f.suffix in (".csv", ".json"):
                    shutil.copy2(f, to / f.name)
    return len(fresh)


# Columns a chapter derives from several runs: a new run's row leaves them empty rather than copy
# another run's value; the chapter recomputes them.
PER_RUN_DERIVED = frozenset(records.SPEEDUP_COLUMNS)


def append_summary(chapter: Path, new_runs: list[tuple[Path, int]]) -> pd.DataFrame:
    """Append one row per new run (cell folder, repeat) to `chapter`/summary.csv, for chapters
    whose summary carries columns their cells do not (chapter 07: `profile` from the folder it
    groups cells by, `engines`): those come from the cell's existing row, except the
    PER_RUN_DERIVED ones, left empty."""
    table = pd.read_csv(chapter / "summary.csv")
    rows = []
    for cell, k in new_runs:
        run = cell if k == 0 else cell / f"r{k}"
        df = pd.read_csv(run / "summary.csv")
        df = df.drop(columns=[c for c in ("repeat", "reused", "error") if c in df])
        df = df.assign(repeat=k, reused=True, error="")
        group = cell.parent.name if cell.parent.name != "runs" else None
        if group is not None and "profile" in table and "profile" not in df:
            df = df.assign(profile=group)
        same = table
        for key in ("strategy", "workers", "profile"):
            if key in same and key in df:
                same = same[same[key] == df[key].iloc[0]]
        for col in table.columns:
            if col not in df and col not in PER_RUN_DERIVED and len(same):
                df[col] = same[col].iloc[0]
        rows.append(df)
    if rows:
        table = pd.concat([table, *rows], ignore_index=True)
        table.to_csv(chapter / "summary.csv", index=False)
    return table


def rebuild_summary(chapter: Path) -> pd.DataFrame:
    """`chapter`/summary.csv as every finished run of committed code (`code_version`) of every
    cell, one row each, with its
    `repeat` (0 = the cell folder, k = r<k>), `reused` True and an empty `error`: what the
    chapter's grid writes when it reads its cells back."""
    rows = []
    for cell in _cells(chapter / "runs"):
        for k, run in enumerate(cell_runs(cell)):
            meta = records.read_meta(run)
            if meta.get("status") != "ok" or not code_version(meta)[1]:
                continue
            df = pd.read_csv(run / "summary.csv")
            df = df.drop(columns=[c for c in ("repeat", "reused", "error") if c in df])
            rows.append(with_identity(df, meta).assign(
                repeat=k, reused=True, error=""))
    table = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()
    if not table.empty:
        keys = [c for c in ("model", "strategy", "workers", "repeat") if c in table]
        table = table.sort_values(keys, kind="stable", ignore_index=True)
        table.to_csv(chapter / "summary.csv", index=False)
    return table


# ----------------------------------------------------------------------------- certifying code
def _package_digest(repo: Path, commit: str, cache: dict[str, str]) -> str | None:
    """code_digest of lib/ddlstudy as committed in `commit` (None where it has none), cached by
    the package's git tree id (most commits leave it unchanged)."""
    import subprocess
    import tarfile
    import tempfile

    from ddlstudy.records.resume import code_digest

    tree = subprocess.run(["git", "-C", str(repo), "rev-parse", "-q", "--verify",
                           f"{commit}:lib/ddlstudy"], capture_output=True, text=True)
    if tree.returncode != 0:
        return None
    key = tree.stdout.strip()
    if key not in cache:
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(["git", "-C", str(repo), "archive", "-o",
                                      f"{tmp}/p.tar", commit, "lib/ddlstudy"], check=True)
            with tarfile.open(f"{tmp}/p.tar") as tar:
                tar.extractall(tmp, filter="data")
            cache[key] = code_digest(Path(tmp) / "lib" / "ddlstudy")
    return cache[key]


def certify(root: Path, repo: Path | None = None, window: int = 120) -> dict[str, str | None]:
    """For every run under `root` written from a tree with uncommitted changes (`+dirty`) and
    not yet certified: look for a commit, from the run's own sha up to `window` commits later,
    whose lib/ddlstudy has the run's `code_digest` (the code it ran, byte for byte); write it
    into the run's meta.json as `code_commit`. Returns run folder -> commit (None: no commit
    holds that code, so the run stays out of the reference, see `load`)."""
    import subprocess

    from ddlstudy.records.resume import write_json_atomic

    repo = repo or records.project_root()
    history = subprocess.run(["git", "-C", str(repo), "rev-list", "--reverse", "HEAD"],
                             capture_output=True, text=True, check=True).stdout.split()
    cache: dict[str, str] = {}
    found: dict[str, str | None] = {}
    by_digest: dict[str, str | None] = {}
    for meta_path in sorted(root.rglob("meta.json")):
        meta = records.read_meta(meta_path.parent)
        sha = str(meta.get("git_sha") or "")
        if not sha.endswith("+dirty") or meta.get("code_commit"):
            continue
        digest, base = str(meta.get("code_digest") or ""), sha.removesuffix("+dirty")
        if digest not in by_digest:
            start = history.index(base) if base in history else len(history)
            by_digest[digest] = next(
                (c for c in history[start:start + window]
                 if digest and _package_digest(repo, c, cache) == digest), None)
        commit = by_digest[digest]
        found[str(meta_path.parent)] = commit
        if commit:
            write_json_atomic(meta_path, {**meta, "code_commit": commit})
    return found


def add_chapter(src: Path, root: Path) -> list[str]:
    """Copy a chapter another sitting measured whole (SRC: `<run>/<chapter>`, its tables and
    meta.json; not notebooks, figures or markers) into the reference folder `root` as
    `root/<chapter>`, and name the chapter in root/meta.json's report.chapters so chapter 99
    reads it. Returns the files copied. ValueError (one line) when SRC has no meta.json or
    tables, when root has no meta.json, or when the chapter is already there (pool runs with
    add-runs / add-rows instead)."""
    import json
    import shutil

    chapter = src.name
    if not (src / "meta.json").is_file():
        raise ValueError(f"{src} has no meta.json: give a chapter folder of a finished run")
    files = sorted(p for p in src.iterdir() if p.suffix in (".csv", ".json") and p.is_file())
    if not any(p.suffix == ".csv" for p in files):
        raise ValueError(f"{src} has no tables (*.csv): nothing to add")
    if not (root / "meta.json").is_file():
        raise ValueError(f"{root} has no meta.json: give the reference folder")
    dest = root / chapter
    if dest.exists():
        raise ValueError(f"{dest} exists: pool another sitting's runs with add-runs or add-rows")
    dest.mkdir(parents=True)
    for p in files:
        shutil.copy2(p, dest / p.name)
    meta = json.loads((root / "meta.json").read_text())
    report = meta.setdefault("params", {}).setdefault("report", {})
    chapters = list(report.get("chapters", []))
    if chapter not in chapters:
        report["chapters"] = [*chapters, chapter]
    (root / "meta.json").write_text(json.dumps(meta, sort_keys=True) + "\n")
    return [p.name for p in files]


def main(argv: list[str] | None = None) -> int:
    """`python -m ddlstudy.records.reference add-runs SRC DEST` | `add-rows SRC DEST --table T
    --keys K` | `add-chapter SRC [ROOT]` | `certify [DIR]`."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m ddlstudy.records.reference",
                                     description="Add another sitting's runs to a reference "
                                     "chapter folder as further independent runs.")
    sub = parser.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("add-runs", help="copy SRC's finished runs into DEST, rebuild summary")
    a.add_argument("src")
    a.add_argument("dest")
    a.add_argument("--tables", action="store_true",
                   help="also copy SRC's chapter tables DEST lacks (rows stamped with SRC's "
                   "host, date, code): a part of the chapter measured in another sitting")
    r = sub.add_parser("add-rows", help="append SRC's rows of one table DEST lacks (by key)")
    r.add_argument("src")
    r.add_argument("dest")
    r.add_argument("--table", required=True, help="the table's name, e.g. accuracy")
    r.add_argument("--keys", required=True, help="comma-separated key columns, e.g. "
                   "strategy,seed")
    r.add_argument("--runs", default=None, help="a run-folder tree to copy too, e.g. "
                   "accuracy_runs")
    h = sub.add_parser("add-chapter", help="copy a chapter measured whole in another sitting "
                       "(its tables and meta.json) into the reference and name it in its meta")
    h.add_argument("src", help="<run>/<chapter>")
    h.add_argument("root", nargs="?", default=None, help="default: results/reference")
    c = sub.add_parser("certify", help="name the commit whose package code a +dirty run ran")
    c.add_argument("dir", nargs="?", default=None, help="default: results/reference")
    args = parser.parse_args(argv)
    if args.cmd == "add-rows":
        try:
            n = add_rows(Path(args.src), Path(args.dest), args.table,
                         [k for k in args.keys.split(",") if k], args.runs)
        except ValueError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        print(f"{args.table}.csv: +{n} rows")
        return 0
    if args.cmd == "add-chapter":
        try:
            copied = add_chapter(Path(args.src), Path(args.root) if args.root
                                 else reference_dir())
        except ValueError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        print(f"{Path(args.src).name}: {len(copied)} files added")
        return 0
    if args.cmd == "certify":
        root = Path(args.dir) if args.dir else reference_dir()
        if not root.is_dir():
            print(f"error: {root} is not a folder: give a reference folder", file=sys.stderr)
            return 2
        found = certify(root)
        for run, commit in found.items():
            print(f"{Path(run).relative_to(root)}: "
                  f"{commit[:7] if commit else 'no commit holds its code: left out'}")
        print(f"{sum(bool(c) for c in found.values())} of {len(found)} uncommitted runs "
              "certified")
        return 0
    src, dest = Path(args.src), Path(args.dest)
    for p in (src / "runs", dest if dest.exists() else dest.parent):  # a new chapter: created
        if not p.is_dir():
            print(f"error: {p} is not a folder: give two chapter folders (…/<chapter>)",
                  file=sys.stderr)
            return 2
    try:
        added = add_runs(src, dest, tables=args.tables)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for cell, n in added.items():
        print(f"{cell}: +{n} runs")
    return 0


if __name__ == "__main__":
    from ddlstudy.host import entry
    raise SystemExit(entry.run(main))
