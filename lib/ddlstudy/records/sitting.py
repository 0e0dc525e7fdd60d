"""One reference sitting: `python -m ddlstudy.report` on committed code only, alone, to a deadline.

Reference cells count only when the code that measured them is a commit (`reference.code_version`
leaves runs of uncommitted code out). A sitting therefore runs from a throwaway git worktree of
HEAD (data linked, the committed host calibration copied beside it), so edits in the checkout
neither enter the records nor change under a run that lasts hours. It runs in a session of its
own and gets SIGTERM at the deadline (the report keeps every finished run; SIGKILL after
`grace_s`); a SIGINT / SIGTERM to the sitting is passed on the same way. Every process it starts
carries TAG in its environment, and any still alive at the end is killed, whichever session it
moved to. The worktree is removed at the end, whatever ends it. Afterwards it prints, for each
chapter folder with runs it wrote, the `add-runs` line that pools them into results/reference.

`python -m ddlstudy.records.sitting --out DIR [--until HH:MM | --max-s S] PARAMS.yaml...`
`python -m ddlstudy.records.sitting --plan PLAN.yaml`: several sittings one after another, each
from a fresh worktree of HEAD at its start (PLAN: `stages:` of `out`, `params`, `until` /
`max_s`); a signal stops the plan, a stage's deadline only that stage.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from ddlstudy.host.process import stop_group
from ddlstudy.records import store

GRACE_S = 120.0


class SittingError(ValueError):
    """Bad input to a sitting: one line naming the problem and the fix."""


def deadline(until: str | None, max_s: float | None, now: dt.datetime | None = None) -> float:
    """Seconds the sitting may run: to `until` (HH:MM, local time, today) or `max_s`, whichever
    is sooner; inf with neither. Raises SittingError on a malformed or past `until` or a
    non-positive `max_s`."""
    now = now or dt.datetime.now()
    left = float("inf")
    if until is not None:
        try:
            hh, mm = (int(x) for x in until.split(":"))
            end = now.replace(hour=hh, minute=mm, second=0, microsecond=0)
        except ValueError:
            raise SittingError(f"--until {until!r} is not a time of day: give HH:MM, "
                               "e.g. --until 13:25") from None
        left = (end - now).total_seconds()
        if left <= 0:
            raise SittingError(f"--until {until} has passed (now {now:%H:%M}): give a later "
                               "time today, or --max-s")
    if max_s is not None:
        if max_s <= 0:
            raise SittingError(f"--max-s {max_s:g} must be > 0 seconds")
        left = min(left, max_s)
    return left


LOCAL = "params/sitting-local"  # in the worktree: layers HEAD does not hold, untracked


def check_params(params: Sequence[str], root: Path) -> list[tuple[str, Path | None]]:
    """Each params file as (its path inside the worktree, the file to copy there or None). A
    file HEAD holds as it is in the checkout runs as HEAD's copy (None); one that is not
    committed, differs from HEAD or lies outside the repository is copied to LOCAL as an
    untracked file, which leaves the worktree's code clean (`store.git_sha` ignores untracked
    files); every run's meta.json records the params it ran either way. Raises SittingError
    for a missing file or none at all."""
    if not params:
        raise SittingError("no params file: give the layers, e.g. params/default.yaml "
                           "params/reference.yaml params/reference-shi.yaml")
    out: list[tuple[str, Path | None]] = []
    for i, p in enumerate(params):
        path = (root / p) if not Path(p).is_absolute() else Path(p)
        if not path.is_file():
            raise SittingError(f"{p}: no such params file; give existing files, e.g. "
                               "params/default.yaml")
        try:
            rel = path.resolve().relative_to(root.resolve()).as_posix()
        except ValueError:
            rel = ""
        if rel:
            git = ["git", "-C", str(root)]
            tracked = subprocess.run([*git, "ls-files", "--", rel], capture_output=True,
                                     text=True).stdout.strip()
            changed = subprocess.run([*git, "status", "--porcelain", "--", rel],
                                     capture_output=True, text=True).stdout.strip()
            if tracked and not changed:
                out.append((rel, None))
                continue
        out.append((f"{LOCAL}/{i:02d}-{path.name}", path.resolve()))
    return out


def _worktree(root: Path) -> tuple[Path, str]:
    """A detached worktree of HEAD in a fresh temporary folder, with the checkout's data/.
    Raises SittingError outside a git checkout (an installed copy has no HEAD to run)."""
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                          text=True)
    if head.returncode != 0:
        raise SittingError(f"{root} is not a git checkout with a commit: a sitting runs HEAD's "
                           "code, so run it from a clone of the study")
    sha = head.stdout.strip()
    wt = Path(tempfile.mkdtemp(prefix=f"ddlstudy-sitting-{sha[:7]}-")) / "tree"
    subprocess.run(["git", "-C", str(root), "worktree", "add", "--detach", str(wt), sha],
                   capture_output=True, text=True, check=True)
    if (root / "data").exists() and not (wt / "data").exists():
        (wt / "data").symlink_to((root / "data").resolve())
    return wt, sha


def _remove(root: Path, wt: Path) -> None:
    subprocess.run(["git", "-C", str(root), "worktree", "remove", "--force", str(wt)],
                   capture_output=True, text=True)
    shutil.rmtree(wt.parent, ignore_errors=True)
    subprocess.run(["git", "-C", str(root), "worktree", "prune"], capture_output=True)


TAG = "DDLSTUDY_SITTING"  # in the environment of every process a sitting starts


def stragglers(tag: str) -> list[int]:
    """Pids of processes whose environment carries TAG=`tag`: what a sitting started, at any
    depth (a notebook kernel or an engine in a session of its own included)."""
    mark = f"{TAG}={tag}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:
            continue
        if mark in env.split(b"\0"):
            found.append(int(entry.name))
    return found


def _sweep(tag: str) -> int:
    """SIGKILL every process still carrying the sitting's tag (one that left the sitting's
    process group, e.g. a kernel started in a session of its own, when SIGKILL came before its
    parent could stop it); returns how many."""
    pids = stragglers(tag)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return len(pids)


def add_runs_lines(out: Path, reference: str = "results/reference") -> list[str]:
    """For each chapter folder under `out` holding runs, the command that pools them into
    `reference`: a chapter-03 emulated folder whose runs name a testbed goes to that testbed's
    folder (03_ps_vs_ring-testbed-<testbed>-<model>), any other to the folder of its own name."""
    if not out.is_dir():
        return []
    lines = []
    for chapter in sorted(p for p in out.iterdir() if (p / "runs").is_dir()):
        dest = chapter.name
        if chapter.name.startswith("03_ps_vs_ring-emulated-"):
            model = chapter.name.removeprefix("03_ps_vs_ring-emulated-")
            testbeds = {(json.loads(m.read_text()).get("network") or {}).get("testbed")
                        for m in chapter.glob("runs/*/meta.json")} - {None, ""}
            if len(testbeds) == 1:
                dest = f"03_ps_vs_ring-testbed-{testbeds.pop()}-{model}"
        lines.append(f"python -m ddlstudy.records.reference add-runs {chapter} "
                     f"{reference}/{dest}")
    return lines


def run(params: Sequence[str], out: Path, seconds: float, *, root: Path | None = None,
        grace_s: float = GRACE_S, module: str = "ddlstudy.report") -> int:
    """Run `python -m module --params P... --out OUT` from a worktree of HEAD for at most
    `seconds`; return its exit status (124 when the deadline stopped it). The committed
    calibration (results/reference/netem_calibration.json, or $DDLSTUDY_NETEM_CALIBRATION) is
    copied beside the worktree so the run cannot rewrite the repository's copy."""
    root = root or store.project_root()
    layers = check_params(params, root)
    proc: subprocess.Popen | None = None
    wt: Path | None = None
    stopped = {"by": ""}

    def note(signum: int, _frame: object) -> None:  # the loop below stops the report
        stopped["by"] = signal.Signals(signum).name

    old = {s: signal.signal(s, note) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        wt, sha = _worktree(root)
        for rel, source in layers:
            if source is not None:
                (wt / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(source, wt / rel)
                print(f"sitting: {source} is not HEAD's: it runs as {rel} (untracked; each "
                      "run's meta.json records its contents)", flush=True)
        env = dict(os.environ, PYTHONPATH=str(wt / "lib"), IPYTHONDIR=str(wt / ".ipython"),
                   JUPYTER_CONFIG_DIR=str(wt / ".jupyter"), MPLBACKEND="Agg",
                   **{TAG: wt.parent.name})
        cal = Path(os.environ.get("DDLSTUDY_NETEM_CALIBRATION")
                   or root / "results" / "reference" / "netem_calibration.json")
        if cal.is_file():
            shutil.copy(cal, wt.parent / "netem_calibration.json")
            env["DDLSTUDY_NETEM_CALIBRATION"] = str(wt.parent / "netem_calibration.json")
        cmd = [sys.executable, "-m", module, *(a for p, _ in layers for a in ("--params", p)),
               "--out", str(Path(out).resolve())]
        print(f"sitting: {sha[:7]} (a worktree of HEAD), until "
              f"{'no deadline' if seconds == float('inf') else f'{seconds:.0f} s from now'}: "
              f"{' '.join(cmd[1:])}", flush=True)
        t0 = time.monotonic()
        if not stopped["by"]:  # a signal while the worktree was made: nothing is started
            proc = subprocess.Popen(cmd, cwd=wt, env=env, start_new_session=True)
        while proc is not None and proc.poll() is None:
            if not stopped["by"] and time.monotonic() - t0 >= seconds:
                stopped["by"] = "deadline"
            if stopped["by"]:
                stop_group(proc, grace_s)
                break
            time.sleep(0.2)
        rc = proc.returncode if proc is not None and proc.returncode is not None else -9
        if stopped["by"]:
            print(f"sitting: stopped by {stopped['by']} after {time.monotonic() - t0:.0f} s; "
                  "finished runs are kept", flush=True)
            rc = 124 if stopped["by"] == "deadline" else 128 + int(getattr(signal,
                                                                           stopped["by"]))
    finally:
        if proc is not None and proc.poll() is None:
            stop_group(proc, grace_s)
        if wt is not None:
            if proc is not None and (n := _sweep(wt.parent.name)):
                print(f"sitting: {n} process(es) it started outlived the report: killed",
                      flush=True)
            _remove(root, wt)
        for s, h in old.items():
            signal.signal(s, h)
    for line in add_runs_lines(Path(out)):
        print(line)
    return rc


@dataclass
class Stage:
    """One sitting of a plan: its params layers, scratch folder and deadline."""

    params: list[str]
    out: Path
    until: str | None = None
    max_s: float | None = None


def read_plan(path: Path, root: Path) -> list[Stage]:
    """The plan's stages, each checked as a sitting's command line is (params present, `out`
    outside results/, a well-formed deadline not yet passed). Raises SittingError naming the
    stage and the fix."""
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except OSError as err:
        raise SittingError(f"--plan {path}: {err.strerror or err}; give an existing YAML "
                           "file") from None
    except yaml.YAMLError as err:
        raise SittingError(f"--plan {path} is not YAML ({str(err).splitlines()[0]}); "
                           "fix it") from None
    entries = doc.get("stages") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries:
        raise SittingError(f"--plan {path} has no `stages:` list; give stages of out, params "
                           "and until or max_s")
    stages = []
    for i, entry in enumerate(entries, 1):
        where = f"--plan {path}, stage {i}"
        if not isinstance(entry, dict) or not entry.get("out") or not entry.get("params"):
            raise SittingError(f"{where}: give `out` (a scratch folder) and `params` (a list)")
        unknown = set(entry) - {"out", "params", "until", "max_s"}
        if unknown:
            raise SittingError(f"{where}: unknown key(s) {sorted(unknown)}; keys are out, "
                               "params, until, max_s")
        until = None if entry.get("until") is None else str(entry["until"])
        stage = Stage([str(p) for p in entry["params"]], Path(entry["out"]), until,
                      None if entry.get("max_s") is None else float(entry["max_s"]))
        try:
            check_params(stage.params, root)
            deadline(stage.until, stage.max_s)
            _check_out(stage.out, root)
        except SittingError as err:
            raise SittingError(f"{where}: {err}") from None
        stages.append(stage)
    return stages


def _check_out(out: Path, root: Path) -> None:
    if out.resolve().is_relative_to((root / "results").resolve()):
        raise SittingError(f"--out {out} is under results/: write to a scratch folder and "
                           "pool with add-runs")


def run_plan(stages: Sequence[Stage], *, root: Path | None = None,
             grace_s: float = GRACE_S) -> int:
    """Run the stages in order (`run` each, its deadline computed when it starts; one whose
    `until` has passed by then is skipped). A stage stopped by SIGINT / SIGTERM ends the plan
    with its status; otherwise the last non-zero status (124: a deadline), else 0."""
    root = root or store.project_root()
    between = {"by": 0}  # a signal while no stage runs (each stage installs its own handler)

    def note(signum: int, _frame: object) -> None:
        between["by"] = signum

    old = {s: signal.signal(s, note) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return _stages(stages, root, grace_s, between)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _stages(stages: Sequence[Stage], root: Path, grace_s: float, between: dict[str, int]) -> int:
    """`run_plan`'s loop; `between` holds a signal that arrived while no stage ran."""
    rc = 0
    for i, stage in enumerate(stages, 1):
        if between["by"]:
            print(f"sitting: plan stopped by {signal.Signals(between['by']).name} before stage "
                  f"{i} of {len(stages)}", flush=True)
            return 128 + between["by"]
        try:
            seconds = deadline(stage.until, stage.max_s)
        except SittingError as err:
            print(f"sitting: stage {i} skipped: {err}", flush=True)
            rc = 124
            continue
        print(f"sitting: stage {i} of {len(stages)} -> {stage.out}", flush=True)
        status = run(stage.params, stage.out, seconds, root=root, grace_s=grace_s)
        if status in (128 + signal.SIGINT, 128 + signal.SIGTERM):
            print(f"sitting: plan stopped at stage {i} of {len(stages)}", flush=True)
            return status
        rc = status or rc
    return rc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ddlstudy.records.sitting",
        description="Run the report on HEAD's code from a throwaway worktree, to a deadline, "
        "for reference cells; then print the add-runs lines that pool them.")
    parser.add_argument("params", nargs="*", help="params files in layer order (HEAD's copy "
                        "where it holds them unchanged, else copied beside the worktree)")
    parser.add_argument("--out", help="a scratch run folder, not results/")
    parser.add_argument("--plan", help="a YAML file of `stages:` (out, params, until / max_s) "
                        "run one after another instead of one sitting")
    parser.add_argument("--until", default=None, help="stop at HH:MM (local time, today)")
    parser.add_argument("--max-s", type=float, default=None, help="stop after S seconds")
    parser.add_argument("--grace-s", type=float, default=GRACE_S,
                        help="seconds between SIGTERM and SIGKILL at the deadline")
    args = parser.parse_args(argv)
    try:
        root = store.project_root()
        if args.plan:
            if args.params or args.out or args.until or args.max_s:
                raise SittingError("--plan takes no params, --out, --until or --max-s: each "
                                   "stage names its own")
            return run_plan(read_plan(Path(args.plan), root), root=root, grace_s=args.grace_s)
        if not args.out:
            raise SittingError("give --out DIR (a scratch folder) and the params layers, or "
                               "--plan PLAN.yaml")
        seconds = deadline(args.until, args.max_s)
        _check_out(Path(args.out), root)
        return run(args.params, Path(args.out), seconds, root=root, grace_s=args.grace_s)
    except SittingError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    from ddlstudy.host import entry
    raise SystemExit(entry.run(main))
