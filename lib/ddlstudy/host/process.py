"""Stop what a command started: its whole process group, whatever it ignores.

A child started with `start_new_session=True` leads a process group of its own; its helpers
(notebook kernels, ipyparallel engines, Chromium's zygotes) join that group and may outlive the
leader. Stopping the leader alone would leave them running, so every stop here signals the
group. TensorFlow's servers ignore SIGTERM, hence SIGKILL after a grace period.
"""

from __future__ import annotations

import os
import signal
import subprocess

REAP_S = 10.0  # how long to wait for the leader after SIGKILL before giving up on reaping it


def _signal_group(pgid: int, sig: signal.Signals) -> bool:
    """Send `sig` to process group `pgid`; False when no process of it is left."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def stop_group(proc: subprocess.Popen, grace_s: float) -> bool:
    """SIGTERM the group `proc` leads, wait up to `grace_s` for the leader to exit (so it can
    keep what it finished), then SIGKILL the group, helpers that outlived the leader included,
    and reap the leader. `proc` must have been started with `start_new_session=True`.
    Returns whether the leader was reaped (False: still in uninterruptible sleep after REAP_S
    past SIGKILL); raises nothing, so a caller's clean-up after it always runs."""
    if _signal_group(proc.pid, signal.SIGTERM):
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    return kill_group(proc)


def kill_group(proc: subprocess.Popen) -> bool:
    """SIGKILL the group `proc` leads (started with `start_new_session=True`) and reap the
    leader; returns whether it was reaped within REAP_S. Raises nothing, also when the group is
    already gone."""
    _signal_group(proc.pid, signal.SIGKILL)
    try:
        proc.wait(timeout=REAP_S)
    except subprocess.TimeoutExpired:
        return False
    return True
