"""The cluster really starts engines, ranks them, runs collectives, and leaves nothing behind."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import psutil
import pytest

from ddlstudy.cluster import engines as cl
from ddlstudy.cluster.engines import Cluster, ClusterError


def test_ranks_hosts_devices(cluster: Cluster) -> None:
    infos = cluster.info()
    assert [i["rank"] for i in infos] == [0, 1, 2, 3]
    assert len({i["pid"] for i in infos}) == 4
    assert all(i["device"] == "cpu" for i in infos)
    assert all(psutil.pid_exists(i["pid"]) for i in infos)


def test_process_group_and_pingpong(cluster: Cluster) -> None:
    cluster.init_process_group(world_size=3)
    rows = cluster.run(cl.pingpong, [8, 4096], 3, 1)
    assert rows[1] == [] and rows[2] == []
    assert [(r["peer"], r["size_bytes"]) for r in rows[0]] == [(1, 8), (1, 4096), (2, 8),
                                                              (2, 4096)]
    assert all(r["latency_us"] > 0 and r["bandwidth_GBps"] > 0 for r in rows[0])


def test_world_size_larger_than_cluster_is_a_clear_error(cluster: Cluster) -> None:
    with pytest.raises(ClusterError, match="--workers 5"):
        cluster.init_process_group(world_size=5)


def test_engine_error_names_rank_and_type(cluster: Cluster) -> None:
    with pytest.raises(ZeroDivisionError, match="rank 0"):
        cluster.run(divmod, 1, 0, world_size=1)


def test_bad_worker_count() -> None:
    with pytest.raises(ClusterError, match="positive integer"):
        Cluster(workers=0)


def test_bad_profile_is_one_clear_error(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path))
    with pytest.raises(ClusterError, match="ipcluster start --profile=nosuch"):
        Cluster(profile="nosuch", start_timeout_s=3).start()


def test_stop_leaves_no_process_behind() -> None:
    c = Cluster(workers=2).start()
    engine_pids = [i["pid"] for i in c.info()]
    all_pids = set(c._pids)
    assert set(engine_pids) <= all_pids and len(all_pids) > len(engine_pids)  # + controller etc.
    c.init_process_group()
    c.stop()
    alive = [p for p in all_pids if psutil.pid_exists(p)
             and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert alive == []


def test_engines_temporary_files_go_with_the_cluster() -> None:
    """What an engine leaves in its temporary directory (TensorFlow's autograph modules outlive a
    SIGKILLed engine) lies in the cluster's run folder and is gone after stop."""
    c = Cluster(workers=2).start()
    try:
        made = [path for _fd, path in c.run(tempfile.mkstemp, ".py", "__autograph_like")]
        assert len(set(made)) == 2 and all(os.path.exists(p) for p in made)
        assert all(Path(p).is_relative_to(c.run_dir) for p in made)
    finally:
        c.stop()
    assert [p for p in made if os.path.exists(p)] == []


def test_kill_after_grace_kills_what_ignores_sigterm() -> None:
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c",
                             "import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
                             "print('ready', flush=True); time.sleep(600)"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    survivors = cl.kill_after_grace({proc.pid}, 0.5)
    assert survivors == [proc.pid]
    # SIGKILLed: it ends once the scheduler runs it (kill_after_grace waits 0.5 s for that, a
    # loaded host may take longer); not killed, it would sleep 600 s and time out here. (The
    # exit status is psutil's when its wait reaped the child first: not checked.)
    proc.wait(timeout=60)
    assert os.getpid() not in survivors


def test_listens_on_loopback_only(cluster: Cluster) -> None:
    """Controller, engines and gloo bind 127.0.0.1; the rendezvous is a file, not a socket."""
    cluster.init_process_group(world_size=2)
    assert cluster.run(cl._engine_info, world_size=2)[0]["ip"] == "127.0.0.1"
    pids = set(cluster._pids) | {os.getpid()}
    listening = [c for c in psutil.net_connections("inet")
                 if c.status == psutil.CONN_LISTEN and c.pid in pids]
    assert listening and {c.laddr.ip for c in listening} <= {"127.0.0.1", "::1"}, listening


def test_a_dead_engine_is_named_at_once() -> None:
    import signal
    import time

    with Cluster(workers=2, collective_timeout_s=60) as c:
        victim = c.info()[1]["pid"]
        # rank 0 answers after 240 s, the wait gives up after 240 s: naming the dead rank at
        # once is told from either by a bound far below both (a loaded host's polls and
        # scheduling take seconds, not minutes)
        pending = [c.client[eid].apply_async(time.sleep, 240) for eid in c.engine_ids]
        os.kill(victim, signal.SIGKILL)
        t0 = time.monotonic()
        named = f"rank 1 \\(engine {c.engine_ids[1]}, pid {victim}"
        with pytest.raises(cl.RankFailed, match=named):
            c._wait_all(pending, 240)
        assert time.monotonic() - t0 < 60  # not after rank 0's 240 s, not after the timeout


def test_a_chapter_grid_sends_remote_engines_a_relative_data_root(tmp_path, repo_root) -> None:
    """Chapters' grids (experiments.grid.base_config) give engines on other hosts the data root
    relative to their own checkout, a local cluster the driver's absolute path (issue 22)."""
    from ddlstudy.config.params import load_params
    from ddlstudy.experiments.grid import base_config

    default = repo_root / "params/default.yaml"
    local = base_config(load_params(default), "mlp").data_root
    assert local == str(repo_root / "data")
    layer = tmp_path / "ssh.yaml"
    layer.write_text("cluster:\n  launcher: ssh\n  hosts: ['h0:2', 'h1:3']\n  ifname: lo\n"
                     "  controller_ip: 10.0.0.1\n")
    assert base_config(load_params(default, layer), "mlp").data_root == "data"


def test_an_engine_that_died_between_calls_is_named_not_an_index_error() -> None:
    """An engine killed while nothing waits on it (the OOM killer between two cells): the next
    call names its rank, engine and pid in one RankFailed, even once the controller has dropped
    it (ipyparallel alone raises IndexError 'No such engine: 0')."""
    import signal
    import time

    with Cluster(workers=2, collective_timeout_s=60) as c:
        victim = c.info()[0]["pid"]
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while not c._unregistered(0) and time.monotonic() < deadline:  # the controller drops it
            time.sleep(0.2)
        assert c._unregistered(0), "the controller never dropped the killed engine"
        named = f"rank 0 \\(engine {c.engine_ids[0]}, pid {victim}.*out of memory"
        with pytest.raises(cl.RankFailed, match=named):
            c.init_process_group(2)
        with pytest.raises(cl.RankFailed, match=named):
            c.run(time.sleep, 0)


def test_replaying_grids_may_start_more_engines_per_core(monkeypatch) -> None:
    """More engines than 8 per core are refused in one line, unless every cell replays compute
    (16 per core): Wang's 4 x 8 V100 grid is 32 replaying engines on this 2-core host."""
    from ddlstudy.chapters.ch03_ps_vs_ring import _engines_per_core
    from ddlstudy.cluster.launchers import (
        MAX_ENGINES_PER_CORE,
        REPLAY_ENGINES_PER_CORE,
        engine_count_problem,
    )
    from ddlstudy.train.config import TrainConfig

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert "32 workers on 2 cores would thrash: use at most 16" in engine_count_problem(32)
    assert engine_count_problem(32, REPLAY_ENGINES_PER_CORE) is None
    assert "use at most 32" in engine_count_problem(33, REPLAY_ENGINES_PER_CORE)
    replay = TrainConfig(model="mlp", compute="replay", replay_source="gpu")
    real = TrainConfig(model="mlp")
    assert _engines_per_core([replay, replay]) == REPLAY_ENGINES_PER_CORE
    assert _engines_per_core([replay, real]) == MAX_ENGINES_PER_CORE
    assert _engines_per_core([]) == MAX_ENGINES_PER_CORE
    with pytest.raises(ClusterError, match="would thrash"):
        Cluster(workers=33).start()


def test_engines_that_never_register_say_why() -> None:
    """The engines cannot start (an argument ipengine refuses): the start times out, and
    the error carries each engine launcher's state and last output, so the cause is on screen;
    nothing is left running."""
    from traitlets.config import Config

    cfg = Config()
    cfg.LocalEngineLauncher.engine_args = ["--no-such-flag-for-ddlstudy"]
    cluster = Cluster(workers=2, start_timeout_s=20, config=cfg)
    with pytest.raises(ClusterError) as err:
        cluster.start()
    text = str(err.value)
    assert "2 engines not ready in 20" in text and "engine launchers' output" in text
    assert text.count("  engine ") == 2 and "no-such-flag-for-ddlstudy" in text
    assert not any(psutil.pid_exists(p) for p in cluster._pids)
