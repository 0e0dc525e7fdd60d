"""Every listener of a local run is on loopback (issue 23): sampled during real `train` runs.

psutil.net_connections is sampled every 0.2 s over the whole run, for the driver and every process
under it (controller, engines, the frameworks' servers); a socket listening on 0.0.0.0, :: or *
(every interface), or on any address outside loopback, fails the test. A framework that is not
installed skips with one line. TF's gRPC servers bind 0.0.0.0 by themselves: the engines carry
ddlstudy.cluster.loopback's LD_PRELOAD shim, tested here alone first (real binds, real sockets)."""

from __future__ import annotations

import importlib.util
import ipaddress
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from ddlstudy.cluster import loopback

WILDCARDS = {"0.0.0.0", "::", "*", ""}

# Binds in a child process carrying the shim: (family, type, address) -> the bound address.
BINDS = """
import json, socket, sys
out = []
for fam, typ, host in json.loads(sys.argv[1]):
    s = socket.socket(getattr(socket, fam), getattr(socket, typ))
    if fam == "AF_INET6":
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.bind((host, 0))
    if typ == "SOCK_STREAM":
        s.listen()
    out.append(s.getsockname()[0])
print(json.dumps(out))
"""


def _bound(cases: list[tuple[str, str, str]], **env: str) -> list[str]:
    import json

    shim = loopback.build()
    child = {k: v for k, v in os.environ.items() if k not in ("DDLSTUDY_BIND_ADDR",
                                                                 "DDLSTUDY_HOST_IP")}
    child.update(env, LD_PRELOAD=str(shim))
    done = subprocess.run([sys.executable, "-c", BINDS, json.dumps(cases)], env=child,
                          capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout)


def test_shim_binds_wildcard_tcp_listeners_to_loopback() -> None:
    """0.0.0.0 -> 127.0.0.1; [::] dual-stack -> ::ffff:127.0.0.1 (IPv4 peers still connect);
    a named address and UDP are left alone."""
    got = _bound([("AF_INET", "SOCK_STREAM", "0.0.0.0"), ("AF_INET", "SOCK_STREAM", ""),
                  ("AF_INET6", "SOCK_STREAM", "::"), ("AF_INET", "SOCK_STREAM", "127.0.0.3"),
                  ("AF_INET", "SOCK_DGRAM", "0.0.0.0")])
    assert got == ["127.0.0.1", "127.0.0.1", "::ffff:127.0.0.1", "127.0.0.3", "0.0.0.0"]


def test_shim_binds_the_address_the_cluster_names() -> None:
    """DDLSTUDY_BIND_ADDR (what a TF task's spec names) first, else DDLSTUDY_HOST_IP."""
    cases = [("AF_INET", "SOCK_STREAM", "0.0.0.0"), ("AF_INET6", "SOCK_STREAM", "::")]
    assert _bound(cases, DDLSTUDY_HOST_IP="127.0.0.5") == ["127.0.0.5", "::ffff:127.0.0.5"]
    assert _bound(cases, DDLSTUDY_HOST_IP="127.0.0.5", DDLSTUDY_BIND_ADDR="127.0.0.6") == \
        ["127.0.0.6", "::ffff:127.0.0.6"]
    assert _bound(cases, DDLSTUDY_BIND_ADDR="::1") == ["127.0.0.1", "::1"]


def test_preloaded_sets_ld_preload_for_the_block_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LD_PRELOAD", "libkeep.so")
    with loopback.preloaded() as path:
        assert path is not None and os.environ["LD_PRELOAD"] == f"{path} libkeep.so"
    assert os.environ["LD_PRELOAD"] == "libkeep.so"
    monkeypatch.delenv("LD_PRELOAD")
    with loopback.preloaded(enabled=False) as path:
        assert path is None and "LD_PRELOAD" not in os.environ
    assert not loopback.active()  # the driver itself never carries it


def test_a_tf_engine_on_a_local_address_without_the_shim_is_refused() -> None:
    """What the TF driver checks before any server starts (states from each engine)."""
    ok = {"shim": True, "local": True}
    loopback.check_engines("tf_ps_sync", [ok, {"shim": False, "local": False}])  # other hosts
    with pytest.raises(ValueError, match=r"rank\(s\) \[1\] lack the loopback shim"):
        loopback.check_engines("tf_ps_sync", [ok, {"shim": False, "local": True}])
    assert loopback.engine_state("127.0.0.1")["local"]
    assert not loopback.engine_state("192.0.2.7")["local"] or os.environ.get("DDLSTUDY_NETNS")


def test_tf_without_a_buildable_shim_is_refused_before_a_cluster(tmp_path: Path) -> None:
    """No compiler and no built shim: one line, exit 2, no engines started."""
    _need("tensorflow", "tf_ps_sync")
    # a fresh IPYTHONDIR: a cluster started by the run would leave its entry under it (wall
    # time told that only on a quiet host); the bound on the refusal is its CPU seconds
    ipython = tmp_path / "ipython"
    env = dict(os.environ, CC="/bin/false", DDLSTUDY_CACHE=str(tmp_path / "cache"),
               IPYTHONDIR=str(ipython))
    cpu0 = _children_cpu_s()
    done = subprocess.run([sys.executable, "-m", "ddlstudy.train", "--strategy", "tf_ps_sync",
                           "--model", "mlp", "--dataset", "synthetic", "--workers", "2",
                           "--steps", "2", "--out", str(tmp_path / "out")], env=env,
                          capture_output=True, text=True, timeout=600)
    cpu = _children_cpu_s() - cpu0
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-2000:]
    assert "loopback shim" in lines[0] and "Traceback" not in done.stderr
    clusters = ipython / "ddlstudy-clusters"
    assert not (clusters.exists() and any(clusters.iterdir())), "a cluster was started"
    assert cpu < 60 and not (tmp_path / "out").exists(), f"{cpu:.1f} CPU s"


def _children_cpu_s() -> float:
    """User + system CPU seconds of this process's finished children."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _listeners(pid: int) -> set[tuple[str, int, int, str]]:
    """(address, port, pid, process name) of every listening socket of pid and its descendants."""
    try:
        root = psutil.Process(pid)
        pids = {root.pid, *(c.pid for c in root.children(recursive=True))}
    except psutil.NoSuchProcess:
        return set()
    found = set()
    for pid in pids:  # per process: a system-wide scan takes seconds on a loaded host
        try:
            proc = psutil.Process(pid)
            name, conns = proc.name(), proc.net_connections(kind="inet")
        except psutil.Error:
            continue
        found |= {(c.laddr.ip, c.laddr.port, pid, name) for c in conns
                  if c.status == psutil.CONN_LISTEN and c.laddr}
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


def _is_loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip.split("%")[0])
    mapped = getattr(addr, "ipv4_mapped", None)
    return (mapped or addr).is_loopback


def _check(seen: set[tuple[str, int, int, str]], strategy: str) -> None:
    ports = sorted({(ip, port) for ip, port, _, _ in seen})
    print(f"{strategy}: {len(ports)} listening address(es): "
          + ", ".join(f"{ip}:{port}" for ip, port in ports))
    exposed = sorted(s for s in seen if s[0] in WILDCARDS)
    assert seen, "no listener seen: the sampling missed the run"
    assert not exposed, f"{strategy} listens on every interface: {exposed}"
    off = sorted(s for s in seen if not _is_loopback(s[0]))
    assert not off, f"{strategy} listens off loopback: {off}"


@pytest.mark.slow
def test_horovod_listens_on_loopback_only(tmp_path: Path) -> None:
    _need("horovod", "horovod")
    _check(_sample_run("horovod", tmp_path / "hvd"), "horovod")


@pytest.mark.slow
def test_tf_ps_sync_listens_on_loopback_only(tmp_path: Path) -> None:
    """TF's gRPC servers (2 workers, 1 ps, the chief) through the shim: each task's server on
    the address its spec names (::ffff:127.0.0.1 on gRPC's dual-stack socket)."""
    _need("tensorflow", "tf_ps_sync")
    seen = _sample_run("tf_ps_sync", tmp_path / "tf")
    _check(seen, "tf_ps_sync")
    assert len({pid for _, _, pid, _ in seen}) >= 4, f"not every TF task was seen: {seen}"


@pytest.mark.slow
def test_tf_allreduce_listens_on_loopback_only(tmp_path: Path) -> None:
    _need("tensorflow", "tf_allreduce")
    seen = _sample_run("tf_allreduce", tmp_path / "tfar")
    _check(seen, "tf_allreduce")
    assert len({pid for _, _, pid, _ in seen}) >= 2, f"not every TF task was seen: {seen}"


@pytest.mark.slow
def test_allreduce_listens_on_loopback_only(tmp_path: Path) -> None:
    _check(_sample_run("allreduce", tmp_path / "ar"), "allreduce")
