"""A worker that dies (issue 13 item 4): real engines SIGKILLed mid-run by fault injection, the
run recovers (async PS goes on with the survivors; every other strategy restarts on fresh
engines from its last checkpoint), records what it cost, and leaves no engine behind.
Checkpoints are atomic and a damaged one is skipped. Nothing is mocked; no timing is asserted
(a loaded host may take any time), only what happened."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from ddlstudy.cluster import engines as cl
from ddlstudy.train import checkpoint
from ddlstudy.train.trainer import TrainConfig, train

TIMEOUT_S = 20  # --timeout of the runs: the collective timeout a dead rank is detected within


class _Stamps:
    """Every process a run's clusters ever recorded (old engines and the fresh ones too)."""

    def __init__(self, owner_pid: int) -> None:
        self.owner, self.stamps, self._stop = owner_pid, {}, threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            for folder in cl.clusters_dir().glob(f"{self.owner}-*"):
                try:
                    record = json.loads((folder / "pids.json").read_text())
                except (OSError, ValueError):
                    continue
                for st in record.get("pids", []):
                    self.stamps[(st["pid"], st["create_time"])] = st
            time.sleep(0.1)

    def alive(self) -> list[int]:
        self._stop.set()
        self._thread.join(timeout=5)
        return [st["pid"] for st in self.stamps.values() if cl._matches(st) is not None]


def _demo(strategy: str, out: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str],
                                                             list[int], int]:
    """The issue's demo command; returns the finished process, the processes of its clusters
    still alive afterwards, and how many distinct processes its clusters recorded."""
    cmd = [sys.executable, "-m", "ddlstudy.train", "--model", "mlp", "--dataset", "digits",
           "--strategy", strategy, "--workers", "3", "--steps", "40", "--checkpoint-every", "5",
           "--fail-worker", "1", "--fail-at-step", "12", "--out", str(out), "--timeout",
           str(TIMEOUT_S), "--no-progress", *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stamps = _Stamps(proc.pid)
    try:
        stdout, stderr = proc.communicate(timeout=500)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    left = stamps.alive()
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr), left, len(
        stamps.stamps)


def _check_demo(strategy: str, tmp_path: Path, action: str) -> pd.Series:
    out = tmp_path / "run"
    done, left, seen = _demo(strategy, out)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert left == [] and seen > 0, f"processes left behind: {left}"
    row = pd.read_csv(out / "summary.csv").iloc[0]
    assert int(row["steps"]) == 40 and int(row["steps_completed"]) == 42  # 2 warm-up + 40
    assert int(row["failures"]) == 1 and row["time_lost_s"] > 0
    fails = pd.read_csv(out / "failures.csv")
    assert fails["action"].tolist() == [action] and fails["ranks"].astype(str).tolist() == ["1"]
    assert bool(fails["injected"].iloc[0]) and int(fails["step"].iloc[0]) == 12
    meta = json.loads((out / "meta.json").read_text())
    assert meta["status"] == "ok" and len(meta["failures"]) == 1
    steps = pd.read_csv(out / "steps.csv")
    workers = steps[steps["role"] == "worker"]
    assert sorted(workers["step"].unique()) == list(range(2, 42))  # every timed step, once
    assert not workers.duplicated(["step", "rank"]).any()  # redone steps replace, not add
    assert "Steps completed: 42 (40 timed) with 1 failure(s)" in done.stdout
    assert "Traceback" not in done.stderr
    return row


def test_ps_async_goes_on_without_the_dead_worker(tmp_path: Path) -> None:
    row = _check_demo("ps_async", tmp_path, "continue")
    assert int(row["restarts"]) == 0 and int(row["steps_redone"]) == 0
    assert int(row["workers_final"]) == 2
    steps = pd.read_csv(tmp_path / "run" / "steps.csv")
    dead = steps[(steps["role"] == "worker") & (steps["rank"] == 1)]
    assert dead["step"].max() < 12  # the dead worker's rows end where it died


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["allreduce", "ps_sync", "ddp"])
def test_sync_strategy_restarts_from_checkpoint(strategy: str, tmp_path: Path) -> None:
    row = _check_demo(strategy, tmp_path, "restart")
    assert int(row["restarts"]) == 1 and int(row["workers_final"]) == 3
    fails = pd.read_csv(tmp_path / "run" / "failures.csv")
    assert int(fails["checkpoint_step"].iloc[0]) == 10 and int(row["steps_redone"]) == 2


# ----------------------------------------------------------------------------- checkpoints
def _state(step: int) -> dict:
    return {"step": step, "engine": {"w": torch.full((3,), float(step))}, "driver": "{}"}


def test_checkpoint_is_atomic_and_a_damaged_one_is_skipped(tmp_path: Path) -> None:
    for step in (5, 10, 15):
        checkpoint.save(tmp_path, _state(step))
    files = sorted(p.name for p in checkpoint.folder(tmp_path).iterdir())
    assert files == ["ckpt-00000010.pt", "ckpt-00000015.pt"]  # KEEP = 2, no temp file left
    newest = checkpoint.path_for(tmp_path, 15)
    data = newest.read_bytes()
    newest.write_bytes(data[: len(data) // 2])  # partial write (what os.replace prevents)
    got = checkpoint.latest(tmp_path)
    assert got is not None and got["step"] == 10 and torch.equal(got["engine"]["w"],
                                                                 torch.full((3,), 10.0))
    flipped = bytearray(checkpoint.path_for(tmp_path, 10).read_bytes())
    flipped[-10] ^= 0xFF  # one corrupted byte: the checksum catches it
    checkpoint.path_for(tmp_path, 10).write_bytes(bytes(flipped))
    assert checkpoint.latest(tmp_path) is None
    (checkpoint.folder(tmp_path) / ".ckpt-00000020.pt.1.tmp").write_bytes(b"half")
    assert checkpoint.latest(tmp_path) is None  # a temp file is never a checkpoint


def test_rerun_resumes_from_the_newest_good_checkpoint(cluster: cl.Cluster,
                                                       tmp_path: Path) -> None:
    cfg = TrainConfig(model="mlp", dataset="digits", strategy="allreduce", workers=2,
                      batch_size=16, steps=10, warmup_steps=2, checkpoint_every=5, eval=False)
    first = train(cluster, cfg, tmp_path, progress=False)
    assert first.row["steps"] == 10 and first.row["failures"] == 0
    ckpts = sorted(p.name for p in checkpoint.folder(tmp_path).iterdir())
    assert ckpts == ["ckpt-00000010.pt", "ckpt-00000012.pt"]
    checkpoint.path_for(tmp_path, 12).write_bytes(b"DDLSTUDY-CKPT-1\ntruncated")
    lines: list[str] = []
    again = train(cluster, cfg, tmp_path, progress=False, announce=lines.append)
    assert again.row["resumed_from_step"] == 10 and "resuming" in lines[0]
    # the checkpoint says whose run wrote it, and the resumed run says so
    assert f"written by pid {os.getpid()} on " in lines[0] and "run started " in lines[0]
    assert checkpoint.latest(tmp_path)["run"]["pid"] == os.getpid()
    assert again.row["steps"] == 10 and again.row["steps_completed"] == 12
    kept = again.steps[again.steps["role"] == "worker"]
    assert sorted(kept["step"].unique()) == list(range(2, 12))
    # the resumed run ends where the uninterrupted one did: same data, same weights
    assert again.row["loss_last"] == pytest.approx(first.row["loss_last"], rel=1e-5)
    other = TrainConfig(**{**cfg.to_dict(), "lr": 0.5})
    with pytest.raises(ValueError, match="another configuration"):
        train(cluster, other, tmp_path, progress=False)


def test_announced_steps_are_the_steps_run(cluster: cl.Cluster) -> None:
    """--epochs 1 used to announce '2 warm-up + 20 timed steps' and run a whole epoch."""
    cfg = TrainConfig(model="mlp", dataset="digits", strategy="allreduce", workers=2,
                      batch_size=16, epochs=1, eval=False)  # 44 steps per epoch
    lines: list[str] = []
    result = train(cluster, cfg, None, progress=False, announce=lines.append)
    warm, timed = (int(w) for w in lines[0].split()[1:5:3])
    assert (warm, timed) == (cfg.warmup_steps, result.row["steps"])
    assert warm + timed == result.row["steps_completed"] != cfg.warmup_steps + cfg.steps


def test_fault_options_are_checked_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    base = {"model": "mlp", "dataset": "digits", "workers": 3, "steps": 40}
    for bad, match in [({"fail_worker": 1}, "go together"),
                       ({"fail_worker": 3, "fail_at_step": 5}, "worker rank 0..2"),
                       ({"fail_worker": 0, "fail_at_step": 42}, "fail_at_step"),
                       ({"checkpoint_every": 0}, "checkpoint_every"),
                       ({"checkpoint_every": 5, "lr_warmup_epochs": 0.5}, "schedule")]:
        with pytest.raises(ValueError, match=match):
            TrainConfig(**base, **bad).validate()
    from ddlstudy.cli.train import main

    saved = {sig: signal.getsignal(sig) for sig in cl.HANDLED_SIGNALS}
    errors = []
    try:  # the CLI in-process: both fail before any engine (or namespace) starts
        for argv in (["--fail-worker", "5", "--fail-at-step", "3"],
                     # a sync strategy cannot restart on emulated links
                     ["--strategy", "allreduce", "--workers", "3", "--steps", "40",
                      "--fail-worker", "1", "--fail-at-step", "12", "--network", "10GbE"]):
            with pytest.raises(SystemExit) as exit_info:
                main(argv)
            errors.append((exit_info.value.code, capsys.readouterr().err))
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    for (code, err), words in zip(errors, ["fail_worker", "drop --network 10GbE"], strict=True):
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert words in err and "Traceback" not in err


@pytest.mark.slow
def test_killed_run_leaves_records_and_rerun_resumes(tmp_path: Path) -> None:
    """SIGKILL the driver itself after a checkpoint: the records up to it are on disk; the same
    command again resumes from it and completes."""
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "ddlstudy.train", "--model", "resnet18", "--dataset",
           "synthetic", "--strategy", "allreduce", "--workers", "2", "--batch-size", "8",
           "--steps", "30", "--warmup-steps", "1", "--checkpoint-every", "5", "--out", str(out),
           "--timeout", str(TIMEOUT_S), "--no-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stamps = _Stamps(proc.pid)
    try:
        deadline = time.monotonic() + 400
        while not checkpoint.path_for(out, 10).exists() and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    meta = json.loads((out / "meta.json").read_text())
    assert meta["status"].startswith("running: checkpoint at step")
    assert len(pd.read_csv(out / "steps.csv")) > 0
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resuming from the checkpoint at step" in again.stdout
    assert f"written by pid {proc.pid} on " in again.stdout  # whose run it continues
    assert f"took over a stale lock from pid {proc.pid}" in again.stdout
    row = pd.read_csv(out / "summary.csv").iloc[0]
    assert int(row["steps"]) == 30 and row["resumed_from_step"] >= 10
    stamps.alive()  # the killed run's engines are orphans: the rerun's cluster start stops them
    time.sleep(1)
    assert [st["pid"] for st in stamps.stamps.values() if cl._matches(st)] == []


# ----------------------------------------------------------------------------- chapter 10
def _runs(loss_fail: list[float]) -> pd.DataFrame:
    """Synthetic runs.csv: allreduce restarts (3 repeats), ps_async goes on."""
    rows = []
    for rep, lf in enumerate(loss_fail):
        for strategy, restarts, lost, redone, workers in (("allreduce", 1, 20.0 + rep, 2, 3),
                                                          ("ps_async", 0, 0.5 + rep / 10, 0, 2)):
            base = {"strategy": strategy, "repeat": rep, "error": "", "steps": 40,
                    "test_accuracy": 0.5}
            rows.append({**base, "arm": "clean", "run_wall_s": 10.0, "loss_last": 1.0,
                         "time_lost_s": 0.0, "restarts": 0, "steps_redone": 0,
                         "recovery_s": 0.0, "workers_final": 3})
            rows.append({**base, "arm": "failure", "run_wall_s": 10.0 + lost,
                         "loss_last": lf if strategy == "allreduce" else 1.0 + 0.1 * (rep + 1),
                         "time_lost_s": lost, "restarts": restarts, "steps_redone": redone,
                         "recovery_s": lost * 0.9, "workers_final": workers})
    return pd.DataFrame(rows)


def test_recovery_costs_and_prose_follow_the_records() -> None:
    from ddlstudy.train import recovery

    costs = recovery.cost_table(_runs([1.0, 1.0, 1.0]))
    by = costs.set_index("strategy")
    assert by.loc["allreduce", "recovery"] == "restart"
    assert by.loc["ps_async", "recovery"] == "continue"
    assert by.loc["allreduce", "time_lost_s"] == 21.0 and by.loc["allreduce", "steps_redone"] == 2
    assert by.loc["allreduce", "loss_verdict"] == "identical"
    assert by.loc["ps_async", "loss_verdict"] == "differs"  # +0.1..0.3 in every repeat
    assert by.loc["allreduce", "wall_verdict"] == "agrees"  # failing runs all slower
    text = " ".join(recovery.sentences(costs))
    assert "allreduce: restarted all engines" in text and "redid 2 steps" in text
    assert "ps_async: went on with 2 workers" in text
    assert "exactly the clean run's training loss" in text
    changed = recovery.cost_table(_runs([1.0, 1.5, 0.9]))  # restart that did not replay
    assert changed.set_index("strategy").loc["allreduce", "loss_verdict"] != "identical"
    summary = recovery.summary_text(costs)
    assert "allreduce restarted" in summary and "ps_async went on" in summary
    assert "identical to the run without failure: allreduce" in summary
