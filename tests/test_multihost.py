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

import ipaddress
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from namespace_hosts import REPO, TINY, Log, engines_placed, marked, namespace_hosts

log = Log(REPO / "outputs" / "multihost" / "test_multihost.log")
# The namespace tests take over 3 minutes here (4.8 min, cores shared): slow as well;
# `pytest -m multihost` runs them. The settings' unit tests at the end run everywhere.
heavy = marked(pytest.mark.multihost, pytest.mark.slow, pytest.mark.timeout(1200))
SLOTS = "h0:2,h1:1,h2:1"
PREFIX = "ddmh"  # its namespaces (nshosts' default); tests/test_mpi.py's are "ddmp"
PROFILE = "1GbE"  # ddlstudy.network.profiles: the hosts' links are shaped to it


@pytest.fixture(scope="module")
def hosts() -> Iterator[Any]:
    with namespace_hosts(3, PREFIX, "multihost", log) as net:
        from ddlstudy.network.emulated import netem

        rate = netem.profile_info(PROFILE, 1.0)["emulated_rate_bps"]
        net.shape(netem.tbf_params(rate))  # the study's emulated link, on every host's link
        log(f"hosts {net.names} at {net.ips}, bridge {net.bridge_ip}, interface {net.ifname}, "
            f"links {PROFILE} (tc tbf {rate / 1e9:g} Gbit/s each way), "
            f"up in {net.up_s:.1f} s")
        yield net


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
    # ranks h0, h0, h1, h2 on their hosts' addresses, each pid in its host's namespace
    infos = engines_placed(ssh_cluster, hosts, SLOTS, log,
                           note=lambda info: f" code {info['code_hash']}")
    assert len({i["host"] for i in infos}) == 3
    # the hosts' rank -> node map reaches every engine; 2 + 1 + 1 is no single gpus_per_node
    got = ssh_cluster.run(os.getenv, "DDLSTUDY_RANK_NODES", world_size=ssh_cluster.size)
    assert got == ["0,0,1,2"] * 4
    assert ssh_cluster.run(os.getenv, "DDLSTUDY_GPUS_PER_NODE",
                           world_size=ssh_cluster.size) == [None] * 4


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


@heavy
def test_hierarchical_refuses_hosts_of_unequal_size(ssh_cluster: Any) -> None:
    """h0:2,h1:1,h2:1: nodes of k cannot describe the hosts, so the hierarchical all-reduce says
    so (every rank, before any message) instead of reducing across a node it thinks it is in."""
    from ddlstudy.train.trainer import TrainConfig, train

    config = TrainConfig(strategy="allreduce", algorithm="hierarchical", workers=4, **TINY)
    with pytest.raises(ValueError, match="does not match the hosts.*same number of engines"):
        train(ssh_cluster, config, progress=False)


@heavy
def test_dead_engine_on_another_host_is_noticed(hosts: Any, ssh_cluster: Any) -> None:
    """An engine SIGKILLed on h2 (not the driver's host: no local pid to look at) is named as
    dead through the controller (its nanny's report or the lost heartbeat), not after the
    collective timeout."""
    import signal

    from ddlstudy.cluster.engines import RankFailed
    from ddlstudy.cluster.launchers import HEARTBEAT_MISSES, HEARTBEAT_MS

    victim = ssh_cluster.info()[3]
    assert victim["host"] == "h2" and victim["pid"] in hosts.processes(2)
    pending = ssh_cluster.submit(time.sleep, 20, world_size=4)
    time.sleep(1.0)
    os.kill(victim["pid"], signal.SIGKILL)  # namespaces share the pid space: root sees it
    t0 = time.monotonic()
    with pytest.raises(RankFailed, match="rank 3") as err:
        ssh_cluster.wait(pending, timeout=60)
    took = time.monotonic() - t0
    log(f"engine of rank 3 (pid {victim['pid']} on h2) killed: noticed in {took:.1f} s: "
        f"{err.value}")
    assert took < HEARTBEAT_MS / 1000 * HEARTBEAT_MISSES + 15  # the collective timeout is 60 s
    assert ssh_cluster.dead_ranks() == [3]


@heavy
def test_stop_leaves_no_process_on_any_host(hosts: Any, ssh_cluster: Any) -> None:
    t0 = time.monotonic()
    ssh_cluster.stop()
    left = hosts.settled()
    log(f"stop: {time.monotonic() - t0:.1f} s; processes left per host {left}")
    assert not any(left), f"processes left on the hosts: {hosts.describe(left)}"


@heavy
def test_cli_check_inside_the_namespaces(hosts: Any) -> None:
    """The issue's command, run in h0's namespace: controller on h0's ifname address."""
    cmd = ["ip", "netns", "exec", hosts.namespaces[0], sys.executable, "-m", "ddlstudy.cluster",
           "--launcher", "ssh", "--hosts", "h0:2,h1:2", "--ifname", hosts.ifname,
           "--ssh-args", f"-F {hosts.ssh_config}", "--check", "--sizes", "8,65536",
           "--iters", "3", "--start-timeout", "600"]
    t0 = time.monotonic()
    # (ipyparallel's SSH launcher stops each engine through several ssh round trips, each a
    # remote Python: minutes on a host at load 30)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "IPYTHONDIR": os.environ["IPYTHONDIR"]})
    log(f"cli check ({time.monotonic() - t0:.1f} s, rc {proc.returncode}):\n{proc.stdout}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    table = [line.split() for line in lines[1:5]]
    assert [(int(r[0]), r[2]) for r in table] == [(0, "h0"), (1, "h0"), (2, "h1"), (3, "h1")]
    assert [int(r[3]) for r in table] == [0, 0, 1, 1]  # the node column: the hosts' map
    assert f"rendezvous: tcp://{hosts.ips[0]}:" in proc.stdout
    start = next(i for i, line in enumerate(lines) if line.startswith("ping-pong"))
    peers = [int(line.split()[0]) for line in lines[start + 2:] if line.strip()]
    assert sorted(set(peers)) == [1, 2, 3]
    left = hosts.settled()
    assert not any(left), f"processes left on the hosts: {hosts.describe(left)}"


def _ssh_flags(hosts: Any, slots: str) -> list[str]:
    return ["--launcher", "ssh", "--hosts", slots, "--ifname", hosts.ifname,
            "--controller-ip", hosts.bridge_ip, "--ssh-args", f"-F {hosts.ssh_config}"]


@heavy
def test_train_cli_across_hosts_with_a_remote_root(hosts: Any, local_cluster: Any,
                                                   tmp_path: Path) -> None:
    """`python -m ddlstudy.train --launcher ssh --hosts ...`: the engines work in --remote-root
    (another folder than the driver's checkout), the driver's absolute --data-root under its
    checkout reaches them as `data`, resolved there; losses as a local run's."""
    from ddlstudy.train.trainer import TrainConfig, train
    from ddlstudy.workload.data import fetch_fashion_mnist

    fetch_fashion_mnist(REPO / "data")  # a fresh clone has no data/: Debian's package, verified
    node_root = tmp_path / "node-checkout"
    shutil.copytree(REPO / "data" / "fashion_mnist", node_root / "data" / "fashion_mnist")
    out = tmp_path / "out"
    run = dict(model="mlp", dataset="fashion_mnist", batch_size=8, steps=3, warmup_steps=1)
    cmd = [sys.executable, "-m", "ddlstudy.train", *_ssh_flags(hosts, "h0:2,h1:2"),
           "--remote-root", str(node_root), "--strategy", "allreduce", "--algorithm", "ring",
           "--workers", "4", "--model", run["model"], "--dataset", run["dataset"],
           "--data-root", str(REPO / "data"), "--batch-size", str(run["batch_size"]),
           "--steps", str(run["steps"]), "--warmup-steps", str(run["warmup_steps"]),
           "--no-eval", "--no-progress", "--out", str(out)]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    log(f"train cli ({time.monotonic() - t0:.1f} s, rc {proc.returncode}):\n{proc.stdout}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Launcher: ssh, ranks on hosts 0:h0, 1:h0, 2:h1, 3:h1" in proc.stdout
    # the hosts decide the tiers: mean of ranks 0, 2 (to their host's other rank) and 1, 3 (to
    # the next host), each half of the ring's bytes, as the analytic split says
    line = next(x for x in proc.stdout.splitlines() if x.startswith("Bytes sent per worker"))
    intra, inter = (float(v) for v in re.findall(r"([\d.]+) MB", line))
    assert intra > 0 and intra == inter, line
    assert f"engines work in {node_root}" in proc.stdout
    meta = json.loads((out / "meta.json").read_text())
    assert meta["params"]["data_root"] == "data"  # relative: resolved on each engine
    import pandas as pd

    steps = pd.read_csv(out / "steps.csv").sort_values(["step", "rank"])
    leaves = steps.groupby("rank")["bytes_sent_inter"].max()
    assert leaves[0] == leaves[2] == 0 and leaves[1] > 0 and leaves[3] > 0
    remote = [float(x) for x in steps["loss"]]
    local = _losses(train(local_cluster, TrainConfig(
        strategy="allreduce", algorithm="ring", workers=4, eval=False,
        data_root=str(REPO / "data"), **run), progress=False))
    log(f"train cli losses {remote[:4]}... vs local {local[:4]}...")
    assert _close(remote, local), f"remote {remote} vs local {local}"
    left = hosts.settled()
    assert not any(left), f"processes left on the hosts: {hosts.describe(left)}"


@heavy
def test_engine_of_another_ddlstudy_is_refused(hosts: Any, tmp_path: Path) -> None:
    """An engine importing another ddlstudy (a copied checkout on PYTHONPATH whose version
    differs) is refused at connect with one line, and nothing is left on the host."""
    copy = tmp_path / "other-checkout"
    shutil.copytree(REPO / "lib", copy / "lib", ignore=shutil.ignore_patterns("__pycache__"))
    init = copy / "lib" / "ddlstudy" / "__init__.py"
    init.write_text(init.read_text().replace('__version__ = "', '__version__ = "0.0.0+copy-'))
    proc = subprocess.run([sys.executable, "-m", "ddlstudy.cluster", *_ssh_flags(hosts, "h1:1"),
                           "--env", f"PYTHONPATH={copy / 'lib'}"],
                          capture_output=True, text=True, timeout=900)
    log(f"other ddlstudy on h1: rc {proc.returncode}: {proc.stderr.strip()}")
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "rank 0 on h1 runs ddlstudy 0.0.0+copy-" in proc.stderr
    assert str(copy) in proc.stderr  # the engine's checkout is named
    left = hosts.settled()
    assert not any(left), f"processes left on the hosts: {hosts.describe(left)}"


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


@pytest.mark.parametrize("args,needle", [
    (["--launcher", "ssh", "--hosts", "h0:two", "--ifname", "lo"], "bad slot count"),
    (["--launcher", "ssh", "--hosts", "h0:1", "--ifname", "lo", "--controller-ip", "10.0.0.1"],
     "needs 2 engines"),
    (["--launcher", "mpi", "--hosts", "h0:2", "--ifname", "lo", "--network", "1GbE"],
     "cannot use --launcher mpi"),
    (["--launcher", "ssh", "--hosts", "h0:2", "--ifname", "lo", "--controller-ip", "10.0.0.1",
      "--remote-root", "rel/dir"], "not an absolute path"),
    (["--hosts", "h0:2"], "only apply to the ssh, slurm and mpi"),
    (["--launcher", "ssh", "--hosts", "h0:2", "--ifname", "lo", "--controller-ip", "10.0.0.1",
      "--env", "NOVALUE"], "write NAME=VALUE"),
], ids=["slots", "too-few", "network", "remote-root", "local-hosts", "env"])
def test_train_launch_flags_checked_through_params(args: list[str], needle: str) -> None:
    from ddlstudy.cli.train import _parser, check_launch_args, config_from_args

    parsed = _parser().parse_args(["--workers", "2", "--steps", "1", *args])
    config = config_from_args(parsed, strategy=parsed.strategy, algorithm=parsed.algorithm)
    launch, _, problem = check_launch_args(parsed, config)
    assert launch is None and problem is not None and needle in problem, problem
    assert "\n" not in problem


def test_train_cli_refuses_bad_launch_flags_before_starting(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "ddlstudy.train", "--workers", "2", "--steps",
                           "1", "--out", str(out), "--launcher", "ssh", "--hosts", "h0:two",
                           "--ifname", "lo"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "bad slot count" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not out.exists()  # refused before anything started: no folder left


def test_paths_sent_to_remote_engines() -> None:
    from ddlstudy.cluster.launchers import LaunchSpec, launch_spec

    spec = launch_spec("ssh", "n1:2", "lo", "10.1.2.3", remote_root="/opt/ddlstudy")
    root = Path("/home/me/ddlstudy")
    assert spec.engine_path("/home/me/ddlstudy/data", root) == "data"
    assert spec.engine_path("data/mnist", root) == "data/mnist"
    assert spec.engine_path("/shared/datasets", root) == "/shared/datasets"
    assert LaunchSpec().engine_path("/home/me/ddlstudy/data", root) == "/home/me/ddlstudy/data"
    env = spec.cluster_kwargs("/x")["config"].SSHEngineSetLauncher.environment
    assert env["DDLSTUDY_REMOTE_ROOT"] == "/opt/ddlstudy"


def test_mpi_settings_reach_remote_ranks() -> None:
    """Open MPI passes remote ranks only -x variables: ipyparallel's cluster id and profile dir
    must be among them, and ssh_args become the daemons' ssh."""
    from ddlstudy.cluster.launchers import launch_spec

    spec = launch_spec("mpi", "n1:2,n2:2", "ib0", "10.1.2.3", ssh_args=["-F", "/tmp/cfg"])
    kwargs = spec.cluster_kwargs("/repo/.ipython")
    args = kwargs["config"].MPIEngineSetLauncher.mpi_args
    exported = {args[i + 1] for i, a in enumerate(args) if a == "-x"}
    assert {"IPP_CLUSTER_ID", "IPP_PROFILE_DIR", "IPYTHONDIR", "GLOO_SOCKET_IFNAME"} <= exported
    assert args[args.index("plm_rsh_agent") + 1] == "ssh -F /tmp/cfg"
    assert args[args.index("oob_tcp_if_include") + 1] == "ib0"
    assert "--ping=1000" in kwargs["controller_args"]
