"""Slurm, really: ipyparallel's SlurmEngineSetLauncher submits the engines with sbatch to a
one-node Slurm (Debian's slurm-wlm + munge, started by the test in a temporary folder:
scripts/multihost/slurm_node.py), and the study's process group forms over them.

    pytest -m slurm -s        # as root; skips with one line where Slurm cannot start

What this proves and what only a real cluster proves: docs/cluster.md.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from namespace_hosts import REPO, script

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def slurm() -> Iterator[Any]:
    if os.geteuid() != 0:
        pytest.skip("slurm: needs root (slurmd, munged)")
    mod = script("slurm_node")
    ok, why = mod.ensure_installed()
    if not ok:
        pytest.skip(f"slurm: {why}")
    t0 = time.monotonic()
    try:
        node = mod.SlurmNode().up()
    except mod.SlurmError as err:
        pytest.skip(f"slurm: cannot start a one-node Slurm ({err})")
    print(f"slurm node {node.node} up in {time.monotonic() - t0:.1f} s ({node.conf})")
    old = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(node.conf)  # sbatch/scancel, run by the launcher, read it
    os.environ.setdefault("IPYTHONDIR", str(REPO / ".ipython"))
    try:
        yield node
    finally:
        node.down()
        if old is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old


def test_engines_start_as_a_slurm_job_and_form_a_group(slurm: Any) -> None:
    from ddlstudy.cluster.engines import Cluster, pingpong
    from ddlstudy.cluster.launchers import launch_spec

    spec = launch_spec("slurm", ifname="lo")
    t0 = time.monotonic()
    with Cluster(workers=2, launch=spec, threads_per_engine=1, start_timeout_s=180,
                 collective_timeout_s=60) as cluster:
        started = time.monotonic() - t0
        jobs = slurm.jobs()
        # os.getenv is imported by name on the engines (a test function would not be)
        envs = [{"SLURM_JOB_ID": job, "SLURM_PROCID": proc} for job, proc in zip(
            cluster.run(os.getenv, "SLURM_JOB_ID"), cluster.run(os.getenv, "SLURM_PROCID"),
            strict=True)]
        print(f"slurm: {cluster.size} engines in {started:.1f} s; jobs {jobs}; engines {envs}")
        assert cluster.size == 2
        assert len(jobs) == 1
        assert {e.get("SLURM_JOB_ID") for e in envs} == set(jobs)  # srun tasks of that job
        assert sorted(e["SLURM_PROCID"] for e in envs) == ["0", "1"]
        assert {i["host"] for i in cluster.info()} == {socket.gethostname()}
        assert [i["local_rank"] for i in cluster.info()] == [0, 1]
        cluster.init_process_group()
        print(f"slurm: rendezvous {cluster.init_method}")
        assert cluster.init_method.startswith("tcp://127.0.0.1:")
        rows = cluster.run(pingpong, [8, 1 << 16], 3)[0]
        assert [r["peer"] for r in rows] == [1, 1]
        pids = [int(i["pid"]) for i in cluster.info()]
    deadline = time.monotonic() + 30
    while slurm.jobs() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert slurm.jobs() == [], "the engines' job is still in the queue after stop"
    import psutil

    alive = [p for p in pids if psutil.pid_exists(p)
             and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"engine processes {alive} outlived the stop"
