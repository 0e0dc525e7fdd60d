"""Several hosts on one machine: engines started over SSH by ipyparallel's SSH launcher.

Three network namespaces are the hosts h0, h1, h2 (each also a UTS namespace with that hostname,
an sshd from Debian's openssh-server on its own address, keys made here), joined by a bridge
whose address holds the controller (scripts/multihost/nshosts.py). What this proves and what
only a real cluster proves: docs/cluster.md.

    pytest -m multihost -s        # as root; skips with one line otherwise

The log (stdout, and outputs/multihost/test_multihost.log) names the hosts, the rendezvous
address, the losses compared and the timings.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import math
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
LOG = REPO / "outputs" / "multihost" / "test_multihost.log"
# The namespace tests take over 3 minutes here (4.8 min, cores shared): slow as well;
# `pytest -m multihost` runs them. The settings' unit tests at the end run everywhere.
HEAVY = [pytest.mark.multihost, pytest.mark.slow, pytest.mark.timeout(600)]


def heavy(fn: Any) -> Any:
    for mark in HEAVY:
        fn = mark(fn)
    return fn

# The smallest training run the other tests use (tests/test_trainer.py TINY), fixed threads so
# a run on 2 engines per host and one on 4 local engines do the same float arithmetic.
TINY = dict(model="mlp", dataset="digits", batch_size=8, steps=4, warmup_steps=2, eval=False)
SLOTS = "h0:2,h1:1,h2:1"
PROFILE = "1GbE"  # ddlstudy.network.profiles: the hosts' links are shaped to it


def _nshosts() -> Any:
    spec = importlib.util.spec_from_file_location("nshosts",
                                                  REPO / "scripts" / "multihost" / "nshosts.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def log(line: str) -> None:
    """One line to stdout and to the test's log file."""
    print(line, flush=True)
    LOG.parent.mkdir(parents=True, exist_ok=True)
    with LOG.open("a") as f:
        f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}\n")


@pytest.fixture(scope="module")
def hosts() -> Iterator[Any]:
    if os.geteuid() != 0:
        pytest.skip("multihost: needs root (network namespaces, sshd)")
    nshosts = _nshosts()
    ok, why = nshosts.ensure_sshd()
    if not ok:
        pytest.skip(f"multihost: {why}")
    ok, why = nshosts.available()
    if not ok:
        pytest.skip(f"multihost: {why}")
    os.environ.setdefault("IPYTHONDIR", str(REPO / ".ipython"))  # the Makefile's, one for all
    LOG.parent.mkdir(parents=True, exist_ok=True)
    LOG.write_text("")
    t0 = time.monotonic()
    try:
        net = nshosts.NamespaceHosts(3).up()  # removes leftovers of the prefix first
    except nshosts.HostsError as err:
        pytest.skip(f"multihost: cannot start namespace hosts ({err})")
    from ddlstudy.network.emulated import netem

    rate = netem.profile_info(PROFILE, 1.0)["emulated_rate_bps"]
    net.shape(netem.tbf_params(rate))  # the study's emulated link, on every host's link
    log(f"hosts {net.names} at {net.ips}, bridge {net.bridge_ip}, interface {net.ifname}, "
        f"links {PROFILE} (tc tbf {rate / 1e9:g} Gbit/s each way), "
        f"up in {time.monotonic() - t0:.1f} s")
    try:
        yield net
    finally:
        net.down()


@pytest.fixture(scope="module")
def ssh_cluster(hosts: Any) -> Iterator[Any]:
    from ddlstudy.cluster.engines import Cluster
    from ddlstudy.cluster.launchers import launch_spec

    spec = launch_spec("ssh", SLOTS, hosts.ifname, hosts.bridge_ip,
                       ssh_args=["-F", str(hosts.ssh_config)])
    cluster = Cluster(launch=spec, threads_per_engine=1, start_timeout_s=180,
                      collective_timeout_s=60)
    t0 = time.monotonic()
    cluster.start()
    log(f"ssh cluster {SLOTS}: {cluster.size} engines in {time.monotonic() - t0:.1f} s")
    try:
        yield cluster
    finally:
        cluster.stop()


@heavy
def test_engines_on_three_hosts_grouped_by_host(hosts: Any, ssh_cluster: Any) -> None:
    infos = ssh_cluster.info()
    for info in infos:
        log(f"rank {info['rank']} local_rank {info['local_rank']} host {info['host']} "
            f"ip {info['ip']} pid {info['pid']} code {info['code_hash']}")
    assert [i["host"] for i in infos] == ["h0", "h0", "h1", "h2"]
    assert len({i["host"] for i in infos}) == 3
    assert [i["local_rank"] for i in infos] == [0, 1, 0, 0]
    assert [i["ip"] for i in infos] == [hosts.ips[0], hosts.ips[0], hosts.ips[1], hosts.ips[2]]
    # the engines really live in the namespaces (their pids are in h<k>'s network namespace)
    for k in range(3):
        assert {i["pid"] for i in infos if i["host"] == f"h{k}"} <= hosts.processes(k)


@heavy
def test_rendezvous_on_the_bridge_network(hosts: Any, ssh_cluster: Any) -> None:
    from ddlstudy.cluster.engines import pingpong

    ssh_cluster.init_process_group()
    method = ssh_cluster.init_method
    log(f"rendezvous (init_method): {method}")
    host = method.removeprefix("tcp://").rpartition(":")[0]
    assert method.startswith("tcp://")
    assert not ipaddress.ip_address(host).is_loopback
    assert host == hosts.ips[0]  # rank 0's address on ifname, in the bridge's subnet
    assert ipaddress.ip_address(host) in ipaddress.ip_network(f"{hosts.bridge_ip}/24",
                                                              strict=False)
    before = [hosts.shaped_bytes(k) for k in range(3)]
    rows = ssh_cluster.run(pingpong, [8, 4 << 20], 3)[0]
    after = [hosts.shaped_bytes(k) for k in range(3)]
    assert sorted({r["peer"] for r in rows}) == [1, 2, 3]
    assert all(r["latency_us"] > 0 for r in rows)
    # ranks 2 and 3 (h1, h2) are reached through the shaped links: at most the profile's rate,
    # and the 4 MiB messages went through h0's and their tbf qdiscs
    from ddlstudy.network.profiles import PROFILES

    limit_GBps = PROFILES[PROFILE].rate_bps / 8 / 1e9 * 1.05
    big = {r["peer"]: r["bandwidth_GBps"] for r in rows if r["size_bytes"] == 4 << 20}
    moved = [(a[0] - b[0], a[1] - b[1]) for a, b in zip(after, before, strict=True)]
    log(f"ping-pong 4 MiB GB/s per peer {big} (link {PROFILE}: {limit_GBps / 1.05:.3f} GB/s); "
        f"tbf bytes up/down per host {moved}")
    assert big[2] <= limit_GBps and big[3] <= limit_GBps
    assert all(min(up, down) > 3 * (4 << 20) for up, down in moved)  # 5 round trips each


def _losses(result: Any) -> list[float]:
    steps = result.steps.sort_values(["step", "rank"])
    return [float(x) for x in steps["loss"]]


def _close(a: list[float], b: list[float], tol: float = 1e-6) -> bool:
    return len(a) == len(b) and all(
        (math.isnan(x) and math.isnan(y)) or abs(x - y) <= tol for x, y in zip(a, b, strict=True))


@heavy
@pytest.mark.parametrize("strategy,extra", [("ps_sync", {"workers": 3}),
                                            ("allreduce", {"workers": 4, "algorithm": "ring"})],
                         ids=["ps_sync", "ring"])
def test_train_across_hosts_matches_a_local_run(ssh_cluster: Any, local_cluster: Any,
                                                strategy: str, extra: dict[str, Any]) -> None:
    from ddlstudy.train.trainer import TrainConfig, train

    config = TrainConfig(strategy=strategy, **extra, **TINY)
    t0 = time.monotonic()
    remote = train(ssh_cluster, config, progress=False)
    t1 = time.monotonic()
    local = train(local_cluster, config, progress=False)
    t2 = time.monotonic()
    a, b = _losses(remote), _losses(local)
    diff = max((abs(x - y) for x, y in zip(a, b, strict=True)
                if not (math.isnan(x) or math.isnan(y))), default=0.0)
    log(f"{strategy}: {len(a)} losses across h0,h1,h2 ({t1 - t0:.1f} s) vs local "
        f"({t2 - t1:.1f} s): max |diff| {diff:.2e}; rendezvous {ssh_cluster.init_method}")
    assert ssh_cluster.world_size == config.world_size == 4
    assert any(not math.isnan(x) for x in a)
    assert _close(a, b), f"{strategy}: remote {a} vs local {b}"


@pytest.fixture(scope="module")
def local_cluster() -> Iterator[Any]:
    from ddlstudy.cluster.engines import Cluster

    with Cluster(workers=4, threads_per_engine=1, collective_timeout_s=60) as cluster:
        yield cluster


def _settled(hosts: Any) -> list[set[int]]:
    """Processes left on each host once the shared ssh connections are closed (they hold a
    session process on each host) and the last sessions had a moment to end."""
    hosts.close_connections()
    left: list[set[int]] = []
    for _ in range(100):
        left = [hosts.processes(k) for k in range(3)]
        if not any(left):
            break
        time.sleep(0.1)
    return left


@heavy
def test_stop_leaves_no_process_on_any_host(hosts: Any, ssh_cluster: Any) -> None:
    t0 = time.monotonic()
    ssh_cluster.stop()
    left = _settled(hosts)
    log(f"stop: {time.monotonic() - t0:.1f} s; processes left per host {left}")
    assert not any(left), f"processes left on the hosts: {_describe(left)}"


def _describe(left: list[set[int]]) -> list[list[str]]:
    out = []
    for pids in left:
        names = []
        for pid in sorted(pids):
            try:
                names.append(f"{pid}:{Path(f'/proc/{pid}/cmdline').read_bytes()[:80]!r}")
            except OSError:
                continue
        out.append(names)
    return out


@heavy
def test_cli_check_inside_the_namespaces(hosts: Any) -> None:
    """The issue's command, run in h0's namespace: controller on h0's ifname address."""
    cmd = ["ip", "netns", "exec", hosts.namespaces[0], sys.executable, "-m", "ddlstudy.cluster",
           "--launcher", "ssh", "--hosts", "h0:2,h1:2", "--ifname", hosts.ifname,
           "--ssh-args", f"-F {hosts.ssh_config}", "--check", "--sizes", "8,65536",
           "--iters", "3"]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "IPYTHONDIR": os.environ["IPYTHONDIR"]})
    log(f"cli check ({time.monotonic() - t0:.1f} s, rc {proc.returncode}):\n{proc.stdout}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    table = [line.split() for line in lines[1:5]]
    assert [(int(r[0]), r[2]) for r in table] == [(0, "h0"), (1, "h0"), (2, "h1"), (3, "h1")]
    assert f"rendezvous: tcp://{hosts.ips[0]}:" in proc.stdout
    start = next(i for i, line in enumerate(lines) if line.startswith("ping-pong"))
    peers = [int(line.split()[0]) for line in lines[start + 2:] if line.strip()]
    assert sorted(set(peers)) == [1, 2, 3]
    left = _settled(hosts)
    assert not any(left), f"processes left on the hosts: {_describe(left)}"


# ----------------------------------------------------------------------------- settings (no root)
def test_bad_hosts_or_ifname_exit_2_before_starting() -> None:
    for args, needle in ((["--hosts", "h0:two"], "bad slot count"),
                         (["--hosts", "h0:2", "--ifname", "no/such"], "bad interface name"),
                         (["--hosts", "h0:2", "--ifname", "ddmhnope0"], "no IPv4 address")):
        if "--ifname" not in args:
            args = [*args, "--ifname", "lo"]
        proc = subprocess.run([sys.executable, "-m", "ddlstudy.cluster", "--launcher", "ssh",
                               *args], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, proc.stderr
        assert needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("kw,needle", [
    ({"launcher": "ssh", "hosts": ["h0:0"], "ifname": "lo"}, "bad slot count"),
    ({"launcher": "ssh", "hosts": ["h0:2", "h0:1"], "ifname": "lo"}, "listed twice"),
    ({"launcher": "ssh", "hosts": ["bad host:2"], "ifname": "lo"}, "bad host name"),
    ({"launcher": "ssh", "hosts": ["h0:2"]}, "needs ifname"),
    ({"launcher": "mpi", "ifname": "lo"}, "needs hosts"),
    ({"launcher": "ssh", "hosts": ["h0:2"], "ifname": "lo"}, "is loopback"),
    ({"launcher": "ssh", "hosts": ["h0:2"], "ifname": "eth0", "controller_ip": "10.0.0.300"},
     "bad controller_ip"),
    ({"launcher": "ssh", "hosts": ["h0:2"], "ifname": "x" * 16}, "bad interface name"),
    ({"launcher": "local", "hosts": ["h0:2"]}, "only apply"),
    ({"launcher": "ssh", "profile": "slurm", "hosts": ["h0:2"], "ifname": "lo"},
     "starts its own engines"),
])
def test_cluster_params_refuse_bad_launch_settings(kw: dict[str, Any], needle: str) -> None:
    from pydantic import ValidationError

    from ddlstudy.config.params import ClusterParams

    with pytest.raises(ValidationError, match=needle):
        ClusterParams(**kw)


def test_ssh_settings_become_ipyparallel_config() -> None:
    from ipyparallel.cluster.launcher import (
        MPIEngineSetLauncher,
        SlurmEngineSetLauncher,
        SSHEngineSetLauncher,
    )

    from ddlstudy.config.params import ClusterParams

    params = ClusterParams(launcher="ssh", hosts=["n1:2", "me@n2.example.org:1"], ifname="ib0",
                           controller_ip="10.1.2.3", remote_python="/opt/venv/bin/python",
                           env={"OMP_NUM_THREADS": "4"}, ssh_args=["-F", "/tmp/cfg"])
    kwargs = params.cluster_kwargs()
    spec = kwargs["launch"]
    assert spec.slots == 3 and spec.host_order() == ["n1", "n2"]
    ipp = spec.cluster_kwargs("/repo/.ipython")
    cfg = ipp["config"].SSHEngineSetLauncher
    assert ipp["engine_launcher_class"] is SSHEngineSetLauncher and ipp["n"] == 3
    assert ipp["controller_ip"] == "10.1.2.3"
    assert cfg.engines["n1"]["n"] == 2
    assert cfg.engines["me@n2.example.org"]["remote_profile_dir"].endswith("ddlstudy-hosts/n2")
    assert cfg.remote_python == "/opt/venv/bin/python"
    assert cfg.engine_cmd[0] == "/opt/venv/bin/python"
    assert cfg.ssh_args == ["-F", "/tmp/cfg"]
    assert cfg.environment == {"IPYTHONDIR": "/repo/.ipython", "GLOO_SOCKET_IFNAME": "ib0",
                               "NCCL_SOCKET_IFNAME": "ib0", "DDLSTUDY_IFNAME": "ib0",
                               "OMP_NUM_THREADS": "4"}
    slurm = ClusterParams(launcher="slurm", hosts=["n1:2", "n2:2"], ifname="ib0",
                          controller_ip="10.1.2.3", launcher_args=["--partition=gpu"])
    ipp = slurm.launch_spec().cluster_kwargs("/repo/.ipython")
    assert ipp["engine_launcher_class"] is SlurmEngineSetLauncher and ipp["n"] == 4
    assert ipp["config"].SlurmEngineSetLauncher.submit_command == [
        "sbatch", "--partition=gpu", "--nodelist=n1,n2", "--ntasks-per-node=2"]
    mpi = ClusterParams(launcher="mpi", hosts=["n1:2", "n2:2"], ifname="ib0",
                        controller_ip="10.1.2.3")
    ipp = mpi.launch_spec().cluster_kwargs("/repo/.ipython")
    args = ipp["config"].MPIEngineSetLauncher.mpi_args
    assert ipp["engine_launcher_class"] is MPIEngineSetLauncher
    assert args[:2] == ["--host", "n1:2,n2:2"] and "GLOO_SOCKET_IFNAME" in args
    assert ClusterParams().launch_spec().cluster_kwargs("/x") == {}  # local: as before
