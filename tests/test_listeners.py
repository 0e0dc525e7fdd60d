"""Every listener of a local run is on loopback (issue 23): sampled during real `train` runs.

psutil.net_connections is sampled every 0.2 s over the whole run, for the driver and every process
under it (controller, engines, the frameworks' servers); a socket listening on 0.0.0.0, :: or *
(every interface) fails the test. A framework that is not installed skips with one line."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

WILDCARDS = {"0.0.0.0", "::", "*", ""}


def _listeners(pid: int) -> set[tuple[str, int, int, str]]:
    """(address, port, pid, process name) of every listening socket of pid and its descendants."""
    try:
        root = psutil.Process(pid)
        pids = {root.pid, *(c.pid for c in root.children(recursive=True))}
    except psutil.NoSuchProcess:
        return set()
    found = set()
    for conn in psutil.net_connections(kind="inet"):
        if conn.status == psutil.CONN_LISTEN and conn.pid in pids and conn.laddr:
            try:
                name = psutil.Process(conn.pid).name()
            except psutil.NoSuchProcess:
                name = "?"
            found.add((conn.laddr.ip, conn.laddr.port, conn.pid, name))
    return found


def _sample_run(strategy: str, out: Path, workers: int = 2) -> set[tuple[str, int, int, str]]:
    cmd = [sys.executable, "-m", "ddlstudy.train", "--strategy", strategy, "--model", "mlp",
           "--dataset", "synthetic", "--workers", str(workers), "--batch-size", "8",
           "--steps", "20", "--warmup-steps", "1", "--no-progress", "--no-eval",
           "--timeout", "120", "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: set[tuple[str, int, int, str]] = set()
    try:
        deadline = time.monotonic() + 600
        while proc.poll() is None and time.monotonic() < deadline:
            seen |= _listeners(proc.pid)
            time.sleep(0.2)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-3000:]
    return seen


def _need(module: str, strategy: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed: {strategy}'s listeners are not sampled")


def _check(seen: set[tuple[str, int, int, str]], strategy: str) -> None:
    ports = sorted({(ip, port) for ip, port, _, _ in seen})
    print(f"{strategy}: {len(ports)} listening address(es): "
          + ", ".join(f"{ip}:{port}" for ip, port in ports))
    exposed = sorted(s for s in seen if s[0] in WILDCARDS)
    assert seen, "no listener seen: the sampling missed the run"
    assert not exposed, f"{strategy} listens on every interface: {exposed}"


@pytest.mark.slow
def test_horovod_listens_on_loopback_only(tmp_path: Path) -> None:
    _need("horovod", "horovod")
    _check(_sample_run("horovod", tmp_path / "hvd"), "horovod")


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="TF's gRPC server binds 0.0.0.0 whatever TF_CONFIG or "
                   "ServerDef say (grpc_server_lib: '0.0.0.0:' + port; no option, see FINDINGS)")
def test_tf_ps_sync_listens_on_loopback_only(tmp_path: Path) -> None:
    _need("tensorflow", "tf_ps_sync")
    _check(_sample_run("tf_ps_sync", tmp_path / "tf"), "tf_ps_sync")


@pytest.mark.slow
def test_allreduce_listens_on_loopback_only(tmp_path: Path) -> None:
    _check(_sample_run("allreduce", tmp_path / "ar"), "allreduce")
