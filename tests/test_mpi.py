"""Engines started by ipyparallel's MPI launcher: one `mpiexec` (Debian's Open MPI) whose daemons
reach two namespace hosts over ssh (scripts/multihost/nshosts.py), then a training run and the
ping-pong through those engines.

    pytest -m mpi -s        # as root; skips with one line otherwise

Open MPI refuses root unless OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
(set here for mpiexec only). The engines' ipyparallel runs with `--mpi` (mpi4py, the `mpi`
extra), so engine ids are MPI ranks. The log: outputs/multihost/test_mpi.log.
"""

from __future__ import annotations

import importlib.util
import math
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from namespace_hosts import REPO, TINY, Log, engines_placed, marked, namespace_hosts

log = Log(REPO / "outputs" / "multihost" / "test_mpi.log")
PREFIX = "ddmp"  # its own namespaces: runs beside tests/test_multihost.py's "ddmh"
SLOTS = "h0:2,h1:2"
heavy = marked(pytest.mark.mpi, pytest.mark.slow, pytest.mark.timeout(900))


def ensure_openmpi() -> tuple[bool, str]:
    """Debian's Open MPI (mpiexec) and mpi4py: installed with apt when root and missing."""
    if shutil.which("mpiexec") is None and os.geteuid() == 0:
        for cmd in (["apt-get", "install", "-y", "-q", "openmpi-bin", "libopenmpi-dev"],
                    ["apt-get", "update", "-q"],
                    ["apt-get", "install", "-y", "-q", "openmpi-bin", "libopenmpi-dev"]):
            if shutil.which("mpiexec"):
                break
            try:
                subprocess.run(cmd, capture_output=True, timeout=600, check=False,
                               env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
            except subprocess.TimeoutExpired:
                return False, "apt-get install openmpi-bin timed out"
    if shutil.which("mpiexec") is None:
        return False, "mpiexec not found (apt-get install -y openmpi-bin libopenmpi-dev)"
    if importlib.util.find_spec("mpi4py") is None:
        return False, "mpi4py not installed (pip install -e '.[mpi]' -c constraints.txt)"
    return True, ""


@pytest.fixture(scope="module")
def hosts() -> Iterator[Any]:
    os.environ.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    try:
        with namespace_hosts(2, PREFIX, "mpi", log, ready=ensure_openmpi) as net:
            log(f"hosts {net.names} at {net.ips}, bridge {net.bridge_ip}, interface "
                f"{net.ifname}")
            yield net
    finally:
        for key in ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"):
            os.environ.pop(key, None)


@pytest.fixture(scope="module")
def mpi_cluster(hosts: Any) -> Iterator[Any]:
    from ddlstudy.cluster.engines import Cluster
    from ddlstudy.cluster.launchers import launch_spec

    subnet = f"{hosts.bridge_ip.rsplit('.', 1)[0]}.0/24"
    # mpiexec runs on the driver (the bridge side, another interface name than the hosts'):
    # its wiring and MPI's TCP transport are named by subnet
    spec = launch_spec("mpi", SLOTS, hosts.ifname, hosts.bridge_ip,
                       ssh_args=["-F", str(hosts.ssh_config)],
                       launcher_args=["--mca", "oob_tcp_if_include", subnet,
                                      "--mca", "btl_tcp_if_include", subnet])
    cluster = Cluster(launch=spec, threads_per_engine=1, start_timeout_s=400,
                      collective_timeout_s=60)
    t0 = time.monotonic()
    cluster.start()
    args = spec.cluster_kwargs(os.environ["IPYTHONDIR"])["config"].MPIEngineSetLauncher.mpi_args
    log(f"mpi cluster {SLOTS}: {cluster.size} engines in {time.monotonic() - t0:.1f} s; "
        f"mpiexec -n 4 {' '.join(args)}")
    try:
        yield cluster
    finally:
        cluster.stop()


@heavy
def test_mpi_engines_are_one_mpi_job_across_hosts(hosts: Any, mpi_cluster: Any) -> None:
    # ranks h0, h0, h1, h1 on their hosts' addresses, each pid in its host's namespace
    engines_placed(mpi_cluster, hosts, SLOTS, log,
                   note=lambda info: f" engine id {mpi_cluster.engine_ids[info['rank']]}")
    # ipyparallel's `--mpi` engines ran `mpi_rank, mpi_size = MPI.COMM_WORLD...` (mpi4py) at
    # start, in their namespace
    worlds = [tuple(mpi_cluster.client[eid].pull(["mpi_rank", "mpi_size"]).get(timeout=60))
              for eid in mpi_cluster.engine_ids]
    log(f"MPI.COMM_WORLD (rank, size) per ddlstudy rank: {worlds}")
    assert sorted(w[0] for w in worlds) == [0, 1, 2, 3] and {w[1] for w in worlds} == {4}
    assert [w[0] for w in worlds] == mpi_cluster.engine_ids  # engine id = MPI rank


@heavy
def test_pingpong_and_training_through_mpi_engines(hosts: Any, mpi_cluster: Any) -> None:
    from ddlstudy.cluster.engines import pingpong
    from ddlstudy.train.trainer import TrainConfig, train

    mpi_cluster.init_process_group()
    log(f"rendezvous: {mpi_cluster.init_method}")
    assert mpi_cluster.init_method.startswith(f"tcp://{hosts.ips[0]}:")
    rows = mpi_cluster.run(pingpong, [8, 65536], 3)[0]
    log("ping-pong " + "; ".join(f"peer {r['peer']} {r['size_bytes']} B "
                                 f"{r['latency_us']:.0f} us" for r in rows))
    assert sorted({r["peer"] for r in rows}) == [1, 2, 3]
    assert all(r["latency_us"] > 0 for r in rows)
    config = TrainConfig(strategy="allreduce", algorithm="ring", workers=4, **TINY)
    t0 = time.monotonic()
    result = train(mpi_cluster, config, progress=False)
    losses = [float(x) for x in result.steps.sort_values(["step", "rank"])["loss"]]
    log(f"ring allreduce over the MPI engines: {len(losses)} losses in "
        f"{time.monotonic() - t0:.1f} s, {losses[:4]}")
    assert mpi_cluster.world_size == 4
    assert len(losses) >= 4 and all(math.isfinite(x) for x in losses)
    assert sorted(set(result.steps["rank"])) == [0, 1, 2, 3]


@heavy
def test_mpi_stop_leaves_no_process_on_any_host(hosts: Any, mpi_cluster: Any) -> None:
    t0 = time.monotonic()
    mpi_cluster.stop()
    left = hosts.settled()
    log(f"stop: {time.monotonic() - t0:.1f} s; processes left per host {hosts.describe(left)}")
    assert not any(left), f"processes left on the hosts: {hosts.describe(left)}"
