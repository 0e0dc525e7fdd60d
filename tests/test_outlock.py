"""One owner per output folder (issue 23): two runs on one --out never splice their records."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from ddlstudy.records.lock import LOCK_NAME

STEPS = 30


def _train(out: Path, steps: int = STEPS) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "ddlstudy.train", "--model", "mlp", "--dataset", "synthetic",
         "--workers", "2", "--batch-size", "8", "--steps", str(steps), "--warmup-steps", "1",
         "--no-progress", "--no-eval", "--timeout", "60", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _owner(out: Path, deadline: float) -> int | None:
    """The pid in the folder's lock record, once the first run has written it."""
    while time.monotonic() < deadline:
        try:
            return int(json.loads((out / LOCK_NAME).read_text())["pid"])
        except (OSError, ValueError, KeyError):
            time.sleep(0.05)
    return None


def _children_cpu_s() -> float:
    """User + system CPU seconds of this process's finished children."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def test_second_train_on_the_same_out_is_refused_and_the_first_keeps_its_steps(
        tmp_path: Path) -> None:
    out = tmp_path / "same"
    first = _train(out)
    try:
        assert _owner(out, time.monotonic() + 60) == first.pid, first.communicate()
        t0, cpu0 = time.monotonic(), _children_cpu_s()
        second = subprocess.run(first.args, capture_output=True, text=True, timeout=60)
        took, cpu = time.monotonic() - t0, _children_cpu_s() - cpu0
        assert first.poll() is None, "the first run should still be running"
        assert second.returncode == 2, second.stderr
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and f"in use by pid {first.pid}" in lines[0], second.stderr
        assert "Traceback" not in second.stderr and second.stdout == ""
        # CPU seconds, not wall: on a loaded host the wall time is the scheduler's (60 s
        # timeout above catches a hang); on a quiet one both are ~2-3 s.
        assert cpu < 5, f"the second run spent {cpu:.1f} CPU s before its refusal"
        print(f"second train refused in {took:.2f} s wall, {cpu:.2f} CPU s")
        stdout, stderr = first.communicate(timeout=600)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 0, stderr[-3000:]
    steps = pd.read_csv(out / "steps.csv")
    workers = steps[steps["role"] == "worker"]
    assert sorted(workers["step"].unique()) == list(range(1, 1 + STEPS))  # its own steps only
    assert len(workers) == 2 * STEPS
    meta = json.loads((out / "meta.json").read_text())
    assert meta["run"]["pid"] == first.pid and meta["status"] == "ok"
    assert not (out / LOCK_NAME).exists()  # released
    assert not list(out.rglob("*.tmp"))  # no temp left


def _ci_params(repo_root: Path) -> list[str]:
    return ["--params", str(repo_root / "params/default.yaml"),
            "--params", str(repo_root / "params/ci.yaml")]


@pytest.fixture
def runner_here(monkeypatch):
    """The report runner's main, run in this process: what it sets for its kernels (the owner
    list in the environment, its signal handlers) is put back after the test, so later tests'
    runs do not inherit this test's runner as their owner."""
    from ddlstudy.cluster.engines import HANDLED_SIGNALS, OWNER_ENV
    from ddlstudy.report import runner

    monkeypatch.delenv(OWNER_ENV, raising=False)
    handlers = {sig: signal.getsignal(sig) for sig in HANDLED_SIGNALS}
    yield runner.main
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


def test_report_on_a_held_folder_is_refused_naming_the_owner(
        tmp_path: Path, repo_root: Path, capsys, runner_here) -> None:
    """A second report (or reference) on a run folder stops before any chapter, in one line."""
    from ddlstudy.records.lock import OutputLock

    out = tmp_path / "run"
    with OutputLock(out, "report (the first)"):
        code = runner_here([*_ci_params(repo_root), "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f"in use by pid {os.getpid()}" in err and "report (the first)" in err
    assert sorted(p.name for p in out.iterdir()) == []  # nothing written, no chapter ran


def test_report_on_a_file_is_one_line(tmp_path: Path, repo_root: Path, capsys,
                                      runner_here) -> None:
    afile = tmp_path / "file"
    afile.write_text("x")
    code = runner_here([*_ci_params(repo_root), "--out", str(afile / "run")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "cannot write" in err, err


def test_bench_on_a_held_folder_is_refused_before_a_cluster(tmp_path: Path, capsys,
                                                            monkeypatch) -> None:
    import argparse

    from ddlstudy.bench import collectives, train
    from ddlstudy.cluster.engines import Cluster
    from ddlstudy.records.lock import OutputLock

    def no_cluster(self: Cluster) -> Cluster:
        raise AssertionError("a cluster started before the held folder was refused")

    monkeypatch.setattr(Cluster, "start", no_cluster)  # before a cluster, not "quickly"
    out = tmp_path / "bench"
    for module, flags in ((collectives, []), (train, ["--model", "mlp"])):
        parser = argparse.ArgumentParser()
        module.add_arguments(parser)
        with OutputLock(out, "bench (the first)"):
            t0 = time.thread_time()  # CPU seconds: a loaded host's wall time is the scheduler's
            code = module.main(parser.parse_args([*flags, "--out", str(out)]))
        err = capsys.readouterr().err.strip()
        assert code == 2 and f"in use by pid {os.getpid()}" in err, err
        assert time.thread_time() - t0 < 5
