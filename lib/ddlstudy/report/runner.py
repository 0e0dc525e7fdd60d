"""Run the study's notebooks with papermill, then render them and an index page to HTML.

    python -m ddlstudy.report --params params/default.yaml [--params more.yaml] [--out DIR]

Each chapter runs into `outputs/<run-id>/`; a chapter whose executed copy and `.done.json` exist
for the same parameters, notebook content and code content (ddlstudy.records.resume) is skipped, so
an
interrupted run resumes where it stopped; chapter 99 also reruns when any chapter before it did.
A failing chapter keeps its executed copy (with the error in it) and the index says which failed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from ddlstudy.config.params import ParamsError, StudyParams, load_params
from ddlstudy.records import resume
from ddlstudy.records import store as records
from ddlstudy.records.lock import OutputFolderError, OutputLock

NOTEBOOKS = Path(__file__).resolve().parents[3] / "notebooks"


@dataclass
class Job:
    """One executed notebook: a chapter, or a chapter for one model (03 runs once per model)."""

    chapter: str
    name: str
    parameters: dict[str, Any] = field(default_factory=dict)

    def digest(self, params: StudyParams, inputs: dict[str, Any] | None = None,
               env: dict[str, Any] | None = None) -> str:
        """What the chapter's result depends on: params, notebook parameters, the notebook's
        content, the code's content (ddlstudy.records.resume), for 99 the markers it reads, and
        the environment it ran in (`environment`: reference records, netem calibration, root /
        namespaces, package versions)."""
        return records_digest(params.digest(), {
            "nb": self.parameters,
            "notebook": resume.file_digest(NOTEBOOKS / f"{self.chapter}.ipynb"),
            "code": resume.code_digest(), "inputs": inputs or {},
            "env": env if env is not None else environment(params, run_dir_of(self))})


def environment(params: StudyParams, run_dir: Path | None = None) -> dict[str, Any]:
    """Inputs outside lib/ddlstudy a chapter's result depends on: the reference records it may
    show or validate on (results/reference and projection.records; not the run's own folder: a
    `reference` run writes there itself), the netem calibration (outputs/netem_calibration.json),
    whether this host is root and can build namespaces, and the package versions. A change in
    any of them reruns the chapters."""
    from ddlstudy.network.emulated import netem
    from ddlstudy.records.reference import reference_dir

    root = records.project_root()
    folders = [reference_dir(), *(Path(d) if Path(d).is_absolute() else root / d
                                  for d in params.projection.records)]
    if run_dir is not None:
        own = run_dir.resolve()
        folders = [f for f in folders if not _overlaps(f.resolve(), own)]
    cal = netem.CALIBRATION_FILE
    cal = cal if cal.is_absolute() else root / cal
    return {"reference": resume.tree_digest(sorted(set(folders))),
            "calibration": resume.file_digest(cal),
            "root": os.geteuid() == 0, "namespaces": netem.available()[0],
            "versions": records.versions()}


def run_dir_of(job: Job) -> Path | None:
    """The run folder a job was planned for (plan() puts it in its parameters)."""
    run_dir = job.parameters.get("run_dir")
    return Path(run_dir) if run_dir else None


def records_digest(study_digest: str, parameters: dict[str, Any]) -> str:
    import hashlib

    blob = json.dumps({"study": study_digest, "nb": parameters}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# The kernel app logs "Kernel is running over TCP without encryption" at WARNING once per
# chapter (ipykernel kernelapp.init_sockets; local kernels talk over loopback), and, when a
# signal stops the report while a cell runs, an ERROR with a zmq traceback ("Socket operation
# on non-socket": papermill closed the kernel's sockets while it replied; about 1 in 3 SIGTERMs
# here). Its own logger goes to CRITICAL only; the chapters' warnings and errors (cell outputs,
# papermill's exception, a dead kernel) are untouched.
KERNEL_ARGS = ["--IPKernelApp.log_level=CRITICAL"]
READS_OTHERS = "99_conclusions"  # the chapter that reads every other chapter's records


def marker_path(run_dir: Path, job: Job) -> Path:
    return run_dir / f"{job.name}.done.json"


def upstream(job: Job, jobs: list[Job], run_dir: Path) -> dict[str, Any]:
    """For chapter 99: each chapter's marker stamp (or None), so 99 reruns when any reran."""
    if job.chapter != READS_OTHERS:
        return {}
    return {j.name: (resume.read_marker(marker_path(run_dir, j)) or {}).get("finished")
            for j in jobs if j.chapter != READS_OTHERS}


def plan(params: StudyParams, run_dir: Path, params_files: list[str]) -> list[Job]:
    """The grid: one job per chapter, and chapter 03 once per model."""
    base = {"run_dir": str(run_dir.resolve()),
            "params_files": [str(Path(p).resolve()) for p in params_files]}
    jobs = []
    for chapter in params.report.chapters:
        if chapter == "03_ps_vs_ring":
            for model in params.training.models:
                jobs.append(Job(chapter, f"{chapter}-{model}", {**base, "model": model}))
            for model in params.network.chapter03_models:  # the emulated-cluster section
                jobs.append(Job(chapter, f"{chapter}-emulated-{model}",
                                {**base, "model": model, "emulated": True}))
        else:
            jobs.append(Job(chapter, chapter, dict(base)))
    return jobs


def _overlaps(a: Path, b: Path) -> bool:
    """True when one folder is the other or inside it."""
    return a == b or a in b.parents or b in a.parents


def is_done(job: Job, run_dir: Path, params: StudyParams, jobs: list[Job] | None = None,
            env: dict[str, Any] | None = None) -> bool:
    """True only when a readable marker exists, its digest is the one this params / notebook /
    code / environment (and, for 99, these upstream runs) give now, the executed copy is a
    non-empty notebook and every table the chapter declares (ddlstudy.chapters.registry)
    exists, parses and has its columns."""
    return why_not_done(job, run_dir, params, jobs, env) is None


def why_not_done(job: Job, run_dir: Path, params: StudyParams, jobs: list[Job] | None = None,
                 env: dict[str, Any] | None = None) -> str | None:
    """None when `job` is done (see is_done), else why not, in a few words."""
    from ddlstudy.chapters.registry import get_chapter

    marker = resume.read_marker(marker_path(run_dir, job))
    if marker is None:
        return "no marker"
    if marker.get("digest") != job.digest(params, upstream(job, jobs or [], run_dir), env):
        return "inputs changed"
    if not resume.notebook_ok(run_dir / f"{job.name}.ipynb"):
        return "executed notebook missing or empty"
    return resume.tables_ok(run_dir / job.name, get_chapter(job.chapter).tables)


def execute(job: Job, run_dir: Path, params: StudyParams, jobs: list[Job] | None = None,
            env: dict[str, Any] | None = None) -> str | None:
    """Run one notebook; None when it passed, else the error's first line. The old marker goes
    first (an interrupted rerun is not done); the new one is written atomically after."""
    import papermill as pm

    marker = marker_path(run_dir, job)
    resume.clear_marker(marker)
    inputs = upstream(job, jobs or [], run_dir)
    out = run_dir / f"{job.name}.ipynb"
    try:
        pm.execute_notebook(str(NOTEBOOKS / f"{job.chapter}.ipynb"), str(out),
                            parameters=job.parameters, kernel_name=params.report.kernel,
                            cwd=str(NOTEBOOKS), progress_bar=False,
                            execution_timeout=params.report.cell_timeout_s,
                            extra_arguments=KERNEL_ARGS)
    except Exception as err:  # noqa: BLE001 - any failure is reported, the grid goes on
        return _first_line(err)
    resume.write_json_atomic(marker, {"digest": job.digest(params, inputs, env),
                                      "finished": time.time()})
    return None


def _first_line(err: Exception) -> str:
    """The error in one line: the failing cell's exception, not papermill's banner."""
    if getattr(err, "ename", None):
        return f"{err.ename}: {str(getattr(err, 'evalue', '')).strip()}"
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip().strip("-")]
    return f"{type(err).__name__}: {lines[0] if lines else ''}"


def render(run_dir: Path, jobs: list[Job], failures: dict[str, str], skipped: set[str],
           params: StudyParams) -> Path:
    """The run as a book (ddlstudy.report.book): landing page with the findings, one page per
    chapter."""
    import yaml

    from ddlstudy.report.book import Page, build_book

    pages = [Page(job.name, job.chapter,
                  "failed: " + failures[job.name] if job.name in failures
                  else "not run" if not (run_dir / f"{job.name}.ipynb").exists()
                  else "reused from an earlier run" if job.name in skipped else "ran")
             for job in jobs]
    meta = records.read_meta(run_dir) if (run_dir / "meta.json").exists() else {}
    params_yaml = yaml.safe_dump(params.model_dump(mode="json"), sort_keys=False)
    index, seconds = build_book(run_dir, pages, meta, params.run_id, params_yaml)
    tqdm.write(f"book: {len(pages)} chapter pages rendered in {seconds:.0f} s (as a PDF: make "
               f"pdf RUN={run_dir})")
    return index


@dataclass
class ReportResult:
    index: Path
    ran: list[str]
    reused: list[str]
    failed: dict[str, str]


def check_kernel(kernel: str, params_files: list[str]) -> None:
    """ParamsError (one line) when report.kernel names no installed Jupyter kernel: found now,
    not after the first chapter starts."""
    from jupyter_client.kernelspec import KernelSpecManager

    known = sorted(KernelSpecManager().find_kernel_specs())
    if kernel not in known:
        raise ParamsError(f"{', '.join(params_files)}: report.kernel: no Jupyter kernel named "
                          f"{kernel!r}; installed: {', '.join(known) or 'none'} (make kernel)")


def run_report(params_files: list[str], out: str | None = None) -> ReportResult:
    params = load_params(*params_files)
    check_kernel(params.report.kernel, params_files)  # before any folder or chapter
    run_dir = Path(out) if out else Path("outputs") / params.run_id
    # one owner per run folder: a second report (or reference) on it stops here, in one line
    with OutputLock(run_dir, "report " + " ".join(f"--params {p}" for p in params_files)
                    + f" --out {run_dir}") as lock:
        if lock.takeover_note:
            tqdm.write(f"{lock.takeover_note}; its finished chapters are kept")
        return _run_owned(params, params_files, run_dir)


def _run_owned(params: StudyParams, params_files: list[str], run_dir: Path) -> ReportResult:
    """run_report's work once the run folder is owned."""
    records.write_meta(run_dir, params.model_dump(mode="json"), params_files=params_files,
                       digest=params.digest())
    jobs = plan(params, run_dir, params_files)
    env = environment(params, run_dir)  # once per run: the same for every chapter
    failures: dict[str, str] = {}
    skipped: set[str] = set()
    bar = tqdm(jobs, desc="report", unit="notebook")
    for job in bar:
        bar.set_postfix_str(job.name)
        why = why_not_done(job, run_dir, params, jobs, env)
        if why is None:
            skipped.add(job.name)
            tqdm.write(f"{job.name}: reused")
            continue
        if resume.read_marker(marker_path(run_dir, job)) is not None:  # was done: say why not
            tqdm.write(f"{job.name}: running again ({why})")
        started = time.perf_counter()
        error = execute(job, run_dir, params, jobs, env)
        took = f"{time.perf_counter() - started:.0f} s"
        if error:
            failures[job.name] = error
            tqdm.write(f"{job.name}: FAILED after {took}: {error} (executed copy: "
                       f"{run_dir / job.name}.ipynb)")
            left = _stop_what_a_dead_kernel_left()
            if left:
                tqdm.write(f"{job.name}: {left}")
        else:
            tqdm.write(f"{job.name}: ran in {took}")
    index = render(run_dir, jobs, failures, skipped, params)
    ran = [j.name for j in jobs if j.name not in skipped and j.name not in failures]
    print(f"report: {index}  ({len(ran)} ran, {len(skipped)} reused, {len(failures)} failed"
          + (f": {', '.join(failures)}" if failures else "") + ")")
    return ReportResult(index, ran, sorted(skipped), failures)


def _stop_what_a_dead_kernel_left() -> str:
    """After a failed chapter: stop the clusters and remove the emulated networks whose owner
    died (a kernel killed by a signal or the OOM killer leaves its engines, controller and
    namespaces running; a later cluster start would clean them, but the run may start none).
    Live runs' are never touched. '' when nothing was left, else one line saying what."""
    from ddlstudy.cluster import engines as cluster
    from ddlstudy.network.emulated import netem

    stopped = cluster.cleanup()
    links = netem.cleanup_all()
    if not stopped and not links:
        return ""
    return (f"its dead kernel had left {stopped} processes"
            + (f" and {len(links)} emulated-network objects" if links else "")
            + ": stopped")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ddlstudy.report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--params", action="append", required=True,
                        help="YAML parameter file; repeat to layer overrides (later wins)")
    parser.add_argument("--out", help="run folder (default outputs/<run_id>)")
    args = parser.parse_args(argv)
    from ddlstudy.cluster import engines as cluster

    cluster.handle_signals(quiet=True)  # papermill/nbclient/asyncio: no dying-kernel chatter
    os.environ.update(cluster.owner_env())  # kernels' clusters die with this runner
    watch = Descendants()
    try:
        result = run_report(args.params, args.out)
    except (ParamsError, OutputFolderError) as err:  # bad params, busy or unwritable --out
        print(f"error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader of stdout left: host.entry ends quietly
        raise
    except OSError as err:  # run-time I/O (a full disk): one line; finished chapters are kept
        where = f" {err.filename}" if getattr(err, "filename", None) else ""
        print(f"error: cannot write the run's records{where}: {err.strerror or err}; free space "
              "and re-run the same command to resume", file=sys.stderr)
        return 1
    except cluster.Interrupted as err:
        return _stop_on_signal(err, watch)
    finally:
        watch.close()
    return 1 if result.failed else 0


STOP_WINDOW_S = 15.0  # papermill's kernel shutdown on an interrupt takes a few seconds


class Descendants:
    """The processes under this runner (kernels, their controllers and engines), sampled every
    `every_s` by a daemon thread: a signal to the process group ends many of them before the
    handler runs, so what the stop ended is counted from the recent samples, not only from the
    processes still alive when it looks."""

    def __init__(self, every_s: float = 0.5) -> None:
        import threading

        self.every_s = every_s
        self.seen: dict[str, tuple[dict, float]] = {}  # identity.encode -> (stamp, last seen)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="descendants", daemon=True)
        self._thread.start()

    def sample(self) -> None:
        import psutil

        from ddlstudy.host import identity

        now = time.monotonic()
        try:
            kids = psutil.Process().children(recursive=True)
        except psutil.Error:
            return
        for kid in kids:
            if (st := identity.stamp(kid.pid)) is not None:
                self.seen[identity.encode(st)] = (st, now)

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self.sample()

    def close(self) -> None:
        self._stop.set()

    def ended(self, within_s: float) -> int:
        """How many processes seen in the last `within_s` seconds have ended since."""
        from ddlstudy.host import identity

        cutoff = time.monotonic() - within_s
        return sum(identity.matches(st) is None
                   for st, last in list(self.seen.values()) if last >= cutoff)


def _stop_on_signal(err: BaseException, watch: Descendants | None = None) -> int:
    """Stop what this runner started (kernels, their clusters) and orphans of dead runs; one
    line; exit 128 + signal. Finished chapters keep their markers: a re-run resumes."""
    import psutil

    from ddlstudy.cluster import engines as cluster
    from ddlstudy.network.emulated import netem

    # the first signal's handler already ignores further ones (cluster.handle_signals)
    with cluster.defer_signals():
        if watch is not None:
            watch.close()
            watch.sample()  # whatever is still running now counts too
        children = {p.pid for p in psutil.Process().children(recursive=True)}
        cluster.kill_after_grace(children, cluster.STOP_GRACE_S)
        orphans = cluster.cleanup()
        # an emulated chapter's namespaces and links: their owner (the kernel) is dead now
        links = netem.cleanup_all()
    # ended around the stop (on the signal itself, in papermill's kernel shutdown while the
    # exception unwound, or killed here): processes seen running in the last STOP_WINDOW_S
    stopped = watch.ended(STOP_WINDOW_S) if watch is not None else len(children)
    print(f"interrupted by {err}: stopped {stopped + orphans} processes"
          + (f", removed {len(links)} emulated-network objects" if links else "")
          + "; finished chapters are kept, re-run the same command to resume", file=sys.stderr)
    return int(getattr(err, "exit_code", 130))


if __name__ == "__main__":
    from ddlstudy.host import entry
    raise SystemExit(entry.run(main))
