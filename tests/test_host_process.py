"""host.process: stopping a command stops its whole process group, even a member that ignores
SIGTERM or outlives the leader, and never raises."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from ddlstudy.host.process import kill_group, stop_group

# A leader that starts a helper in its group which ignores SIGTERM, prints the helper's pid,
# then waits.
LEADER = """
import signal, subprocess, sys, time
helper = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"])
print(helper.pid, flush=True)
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie of an exited group is not alive
        return f.read().split(")")[-1].split()[0] != "Z"


def _start() -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, "-c", LEADER], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    return proc, int(proc.stdout.readline())


def test_stop_group_kills_a_helper_that_ignores_sigterm():
    proc, helper = _start()
    t0 = time.monotonic()
    assert stop_group(proc, grace_s=2.0) is True
    assert time.monotonic() - t0 < 2.0 + 15.0
    assert proc.returncode is not None
    deadline = time.monotonic() + 10
    while _alive(helper) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(helper)


def test_stopping_a_group_that_is_gone_raises_nothing():
    proc, helper = _start()
    assert kill_group(proc) is True
    assert kill_group(proc) is True and stop_group(proc, grace_s=0.1) is True
