"""Faults end fast, in one line, with nothing left behind (issue 12): engines SIGKILLed mid-run,
signals to the CLIs, orphans of a dead owner. Processes are real; nothing is mocked."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddlstudy.cluster import engines as cl

TIMEOUT_S = 20  # --timeout of the runs below: the collective timeout a dead rank is named within
BOUND_S = TIMEOUT_S + 15  # + the stop grace and a loaded host


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])


def _write_record(folder: Path, owners: list[int], pids: list[int]) -> None:
    folder.mkdir(parents=True)
    record = {"owners": [cl._stamp(p) for p in owners], "pids": [cl._stamp(p) for p in pids]}
    (folder / "pids.json").write_text(json.dumps(record))


def test_first_signal_interrupts_later_ones_are_ignored() -> None:
    """A CLI's first SIGTERM raises Interrupted; a second one while it unwinds raises nothing
    (it used to land in some finally block and print a traceback instead of the one line)."""
    old = {sig: signal.getsignal(sig) for sig in cl.HANDLED_SIGNALS}
    try:
        cl.handle_signals()
        with pytest.raises(cl.Interrupted) as got:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.5)
        assert got.value.exit_code == 128 + signal.SIGTERM
        for sig in (signal.SIGTERM, signal.SIGINT):
            os.kill(os.getpid(), sig)
        time.sleep(0.5)  # a handler that raised would have raised by now
        assert all(signal.getsignal(s) == signal.SIG_IGN for s in cl.HANDLED_SIGNALS)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def test_cleanup_stops_only_clusters_whose_owner_died(tmp_path: Path) -> None:
    owner, orphan_engine, live_engine = _sleeper(), _sleeper(), _sleeper()
    try:
        root = cl.clusters_dir(str(tmp_path))
        _write_record(root / f"{owner.pid}-dead", [owner.pid], [orphan_engine.pid])
        _write_record(root / f"{os.getpid()}-live", [os.getpid()], [live_engine.pid])
        (root / "999999999-partial").mkdir()  # killed before its pids.json: owner pid gone
        owner.kill()
        owner.wait()
        assert cl.cleanup(str(tmp_path)) == 1
        assert orphan_engine.wait(timeout=10) is not None  # stopped
        assert live_engine.poll() is None  # a live run's engine is untouched
        assert sorted(p.name for p in root.iterdir()) == [f"{os.getpid()}-live"]
        env = dict(os.environ, IPYTHONDIR=str(tmp_path))
        out = subprocess.run([sys.executable, "-m", "ddlstudy.cluster", "--stop-all"], env=env,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and "1 cluster(s) of live runs left running" in out.stdout
        assert live_engine.poll() is None
    finally:
        for proc in (owner, orphan_engine, live_engine):
            proc.kill()
            proc.wait()


def test_pid_reuse_is_not_a_match() -> None:
    stamp = cl._stamp(os.getpid())
    assert stamp is not None and cl._matches(stamp) is not None
    reused = {**stamp, "create_time": stamp["create_time"] - 100}  # another process, same pid
    if "start_ticks" in stamp:
        reused["start_ticks"] = stamp["start_ticks"] - 10_000
    assert cl._matches(reused) is None


def _cluster_record(owner: subprocess.Popen[str], deadline: float) -> tuple[Path, dict]:
    """The pids.json of the cluster run `owner` started, once it names every rank's pid; a run
    that ended first fails the test with its own last words (not a wait for a folder that its
    exit removed)."""
    root = cl.clusters_dir()
    while time.monotonic() < deadline:
        for folder in root.glob(f"{owner.pid}-*"):
            try:
                record = json.loads((folder / "pids.json").read_text())
            except (OSError, ValueError):
                continue
            if record.get("rank_pids"):
                return folder, record
        if owner.poll() is not None:
            _, err = owner.communicate()
            raise AssertionError(f"run {owner.pid} ended (exit {owner.returncode}) before its "
                                 f"cluster recorded its ranks: {err[-2000:]}")
        time.sleep(0.2)
    raise AssertionError(f"no cluster record of pid {owner.pid} appeared")


def _alive_of(record: dict) -> list[int]:
    return [st["pid"] for st in record["pids"] if cl._matches(st) is not None]


def _train(strategy: str, out: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "ddlstudy.train", "--model", "mlp", "--dataset", "synthetic",
         "--strategy", strategy, "--workers", "2", "--batch-size", "8", "--steps", "100000",
         "--warmup-steps", "1", "--timeout", str(TIMEOUT_S), "--no-progress", "--no-eval",
         "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_until_stepping(proc: subprocess.Popen[str], deadline: float) -> None:
    """Until the run prints 'Running N warm-up + M timed steps...': its process group is up,
    its engines are set up and the step loop comes next (a fixed sleep hoped for that; a loaded
    host took longer). Reads stdout's raw bytes, so `communicate` later gets the rest."""
    assert proc.stdout is not None
    fd, seen = proc.stdout.fileno(), b""
    while time.monotonic() < deadline:
        if any(line.startswith(b"Running ") for line in seen.split(b"\n")[:-1]):
            return
        ready, _, _ = select.select([fd], [], [], 1.0)
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                break  # the run ended before its steps
            seen += chunk
    raise AssertionError(f"the run never started its steps: {seen.decode(errors='replace')}")


def _kill_ranks_mid_run(cases: list[tuple[str, int]], tmp_path: Path) -> None:
    """Start every (strategy, rank) run at once (their cluster starts overlap: most of a case's
    time), then SIGKILL each one's rank in turn and check the run names it and leaves nothing."""
    procs = [(_train(strategy, tmp_path / f"run{i}"), rank, tmp_path / f"run{i}")
             for i, (strategy, rank) in enumerate(cases)]
    try:
        for proc, rank, out in procs:
            _kill_and_check(proc, rank, out)
    finally:
        for proc, _, _ in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _kill_and_check(proc: subprocess.Popen[str], rank: int, out: Path) -> None:
    folder, record = _cluster_record(proc, time.monotonic() + 180)
    _wait_until_stepping(proc, time.monotonic() + 300)
    assert proc.poll() is None, proc.communicate()
    victim = record["rank_pids"][rank]
    t0 = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    _, err = proc.communicate(timeout=BOUND_S + 30)
    took = time.monotonic() - t0
    lines = err.strip().splitlines()
    assert proc.returncode == 1, err[-2000:]
    assert f"rank {rank} (engine" in lines[-1] and f"pid {victim}" in lines[-1], err[-2000:]
    assert "died" in lines[-1] and "Traceback" not in err
    assert took < BOUND_S, f"named the dead rank after {took:.1f} s"
    assert _alive_of(record) == [] and not folder.exists()  # nothing left behind
    meta = json.loads((out / "meta.json").read_text())
    assert "died" in str(meta.get("status", ""))  # the failed run's record says why


def test_sigkill_ps_sync_worker_and_allreduce_rank0_are_named_fast(tmp_path: Path) -> None:
    _kill_ranks_mid_run([("ps_sync", 1), ("allreduce", 0)], tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("strategy,rank", [("ps_sync", 2), ("ps_sync", 0), ("allreduce", 1),
                                           ("ps_sharded", 3), ("ps_async", 2), ("ddp", 1)])
def test_sigkill_any_rank_any_strategy(strategy: str, rank: int, tmp_path: Path) -> None:
    _kill_ranks_mid_run([(strategy, rank)], tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_to_train_stops_engines(sig: signal.Signals, tmp_path: Path) -> None:
    proc = _train("allreduce", tmp_path / "run")
    try:
        folder, record = _cluster_record(proc, time.monotonic() + 180)
        _wait_until_stepping(proc, time.monotonic() + 300)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + sig, err[-2000:]
    assert err.strip().splitlines()[-1] == f"interrupted by {sig.name}; engines stopped"
    assert "Traceback" not in err and _alive_of(record) == [] and not folder.exists()


# ----------------------------------------------------------------------------- report runner
def _report(out: Path, params: Path, repo_root: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "ddlstudy.report", "--params",
         str(repo_root / "params/default.yaml"), "--params", str(repo_root / "params/ci.yaml"),
         "--params", str(params), "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=repo_root)


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "times"), [(signal.SIGTERM, 1), (signal.SIGTERM, 2),
                                            (signal.SIGINT, 1), (signal.SIGKILL, 1)],
                         ids=["SIGTERM", "SIGTERM-twice", "SIGINT", "SIGKILL"])
def test_signal_to_report_mid_chapter_then_rerun(sig: signal.Signals, times: int,
                                                 tmp_path: Path, repo_root: Path) -> None:
    """Chapter 00 finishes, 01 is killed while its cluster runs; the re-run reuses 00 and
    completes; no process of the killed run is left. A second SIGTERM while the runner stops
    (a supervisor repeating itself) changes nothing: still one line, no traceback."""
    tiny = tmp_path / "tiny.yaml"
    tiny.write_text("run_id: faults\nreport:\n  chapters: [00_background, 01_cluster_setup]\n")
    out = tmp_path / "out"
    proc = _report(out, tiny, repo_root)
    try:
        deadline = time.monotonic() + 400
        while not list(out.glob("00_background*.done.json")) and time.monotonic() < deadline:
            time.sleep(0.5)
        kernel_owner = None
        while kernel_owner is None and time.monotonic() < deadline:  # 01's cluster is up
            for folder in cl.clusters_dir().glob("*"):
                try:
                    record = json.loads((folder / "pids.json").read_text())
                except (OSError, ValueError):
                    continue
                if any(o["pid"] == proc.pid for o in record["owners"]) and record["rank_pids"]:
                    kernel_owner = (folder, record)
            time.sleep(0.5)
        assert kernel_owner is not None, "chapter 01 never started its cluster"
        t0 = time.monotonic()
        proc.send_signal(sig)
        for _ in range(times - 1):
            time.sleep(1.0)  # the runner is stopping its kernels by now
            proc.send_signal(sig)
        _, err = proc.communicate(timeout=90)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    folder, record = kernel_owner
    if sig != signal.SIGKILL:
        assert proc.returncode == 128 + sig and took < 60, (proc.returncode, took, err[-2000:])
        assert "Traceback" not in err and err.strip().splitlines()[-1].startswith(
            f"interrupted by {sig.name}: stopped")
        stopped = int(err.strip().splitlines()[-1].split(": stopped ")[1].split()[0])
        # the kernel and chapter 01's engines at least, whoever ended them (issue 23: not 0)
        assert stopped >= 1 + len(record["rank_pids"]), err.strip().splitlines()[-1]
        assert _alive_of(record) == []
    done = list(out.glob("00_background*.done.json"))  # the finished chapter's record is intact
    assert done and json.loads(done[0].read_text()) and (out / "00_background.ipynb").exists()
    rerun = _report(out, tiny, repo_root)  # reuses 00 unless lib/ changed meanwhile (shared tree)
    stdout, err = rerun.communicate(timeout=900)
    assert rerun.returncode == 0 and "0 failed" in stdout, stdout + err[-3000:]
    assert _alive_of(record) == [] and not folder.exists()  # SIGKILL's orphans: cleaned up


def test_a_killed_kernels_cluster_is_stopped_by_the_runner(tmp_path: Path,
                                                            repo_root: Path) -> None:
    """The OOM killer (here: SIGKILL) ends a chapter's kernel while its cluster runs: the
    runner names the failure and stops the engines, nannies and controller the kernel left,
    before its next chapter or its exit, even when no later chapter starts a cluster (a later
    cluster start would have cleaned them; this run starts none)."""
    tiny = tmp_path / "tiny.yaml"
    tiny.write_text("run_id: faults\nreport:\n  chapters: [01_cluster_setup]\n")
    out = tmp_path / "out"
    proc = _report(out, tiny, repo_root)
    try:
        found = None
        deadline = time.monotonic() + 400
        while found is None and time.monotonic() < deadline:
            for folder in cl.clusters_dir().glob("*"):
                try:
                    record = json.loads((folder / "pids.json").read_text())
                except (OSError, ValueError):
                    continue
                owners = [o["pid"] for o in record["owners"]]
                if proc.pid in owners and record["rank_pids"]:
                    found = (folder, record, [p for p in owners if p != proc.pid])
            time.sleep(0.5)
        assert found is not None, "chapter 01 never started its cluster"
        folder, record, kernels = found
        assert kernels and _alive_of(record), "no kernel or no engine to kill"
        for pid in kernels:
            os.kill(pid, signal.SIGKILL)
        stdout, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = stdout + err
    assert "01_cluster_setup: FAILED" in text, text[-3000:]
    assert "01_cluster_setup: its dead kernel had left" in text, text[-3000:]
    assert "Traceback" not in err
    assert _alive_of(record) == [] and not folder.exists()
