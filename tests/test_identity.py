"""Process identity that a stepped wall clock cannot fool (host.identity).

The CI of ea6e55a failed once with a live run's cluster folder gone under it. psutil's
create_time() adds /proc/stat's boot time, which Linux derives from the wall clock: a clock
step (NTP, a resumed VM) moves it, and a record written before the step no longer matches its
live owner, so a clean-up takes the live cluster for an orphan. These tests step psutil's view
of the boot time and check that live owners stay live and dead ones stay dead."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from ddlstudy.cluster import engines as cl
from ddlstudy.host import identity

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(),
                                reason="start ticks come from Linux's /proc")


def _step_clock(monkeypatch) -> None:
    """From now on psutil reads the boot time one second later than when the records were
    written: what an NTP step of the wall clock does to /proc/stat's btime."""
    import psutil._pslinux as pslinux

    btime = pslinux.boot_time()
    monkeypatch.setattr(pslinux, "boot_time", lambda: btime + 1.0)


def test_a_stamp_names_the_live_process_and_not_an_ended_one() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        st = identity.stamp(child.pid)
        assert st is not None and st["pid"] == child.pid and isinstance(st["start_ticks"], int)
        assert identity.matches(st) is not None
    finally:
        child.kill()
        child.wait()
    assert identity.matches(st) is None and identity.stamp(child.pid) is None


def test_a_reused_pid_is_not_a_match() -> None:
    st = identity.mine()
    assert identity.matches({**st, "start_ticks": st["start_ticks"] + 1}) is None


def test_a_clock_step_leaves_a_live_owner_live(monkeypatch) -> None:
    before = identity.mine()
    _step_clock(monkeypatch)
    # What the step does to the wall-clock start psutil reports, in a fresh Process object:
    assert abs(psutil.Process(os.getpid()).create_time() - before["create_time"]) > 0.5
    assert identity.matches(before) is not None


def test_a_clock_step_does_not_orphan_a_live_cluster(tmp_path: Path, monkeypatch) -> None:
    """A cluster folder whose owner runs is live before and after a step of the clock; the
    same folder with its owner ended is an orphan either way."""
    root = cl.clusters_dir(str(tmp_path))
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        folder = root / f"{owner.pid}-test"
        folder.mkdir(parents=True)
        (folder / "pids.json").write_text(json.dumps(
            {"owners": [identity.stamp(owner.pid)], "pids": [], "rank_pids": []}))
        assert cl.orphaned_clusters(str(tmp_path)) == ([], [folder])
        _step_clock(monkeypatch)
        assert cl.orphaned_clusters(str(tmp_path)) == ([], [folder])
        assert cl.cleanup(str(tmp_path)) == 0 and folder.exists()
    finally:
        owner.kill()
        owner.wait()
    assert cl.orphaned_clusters(str(tmp_path)) == ([folder], [])


def test_the_owner_list_in_the_environment_round_trips(monkeypatch) -> None:
    monkeypatch.delenv(cl.OWNER_ENV, raising=False)
    env = cl.owner_env()
    monkeypatch.setenv(cl.OWNER_ENV, env[cl.OWNER_ENV] + ",4242:12.5,junk")
    owners = cl._owners()
    assert owners[0] == owners[1] == identity.mine()  # this process, from both places
    assert owners[2] == {"pid": 4242, "create_time": 12.5}  # an older "pid:create_time" item
    assert len(owners) == 3  # the junk item is dropped


def test_a_clock_step_does_not_orphan_a_live_emulated_network(tmp_path: Path,
                                                              monkeypatch) -> None:
    """netem's clean-up of crashed runs asks the same question of its state files."""
    from ddlstudy.network.emulated import netem

    monkeypatch.setattr(netem, "STATE_DIR", tmp_path)
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        st = identity.stamp(owner.pid)
        (tmp_path / "run1.json").write_text(json.dumps(
            {"pid": owner.pid, "pid_create_time": st["create_time"], "owner": st}))
        _step_clock(monkeypatch)
        assert netem._owner_alive("run1")
    finally:
        owner.kill()
        owner.wait()
    assert not netem._owner_alive("run1") and not netem._owner_alive("no-such-run")


def test_the_report_runner_counts_a_stopped_child_once_even_after_a_clock_step(
        monkeypatch) -> None:
    """report.runner.Descendants: what a stop ended is counted from the samples' stamps."""
    import time

    from ddlstudy.report.runner import Descendants

    watch = Descendants(every_s=3600)  # sampled by hand below, not by its thread
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        deadline = time.monotonic() + 10
        while not watch.seen and time.monotonic() < deadline:
            watch.sample()
        _step_clock(monkeypatch)
        assert watch.ended(60) == 0  # alive: a step of the clock changes nothing
    finally:
        child.kill()
        child.wait()
        watch.close()
    assert watch.ended(60) == 1
