"""The monitor samples real processes and real interfaces: rows in time order, plausible values,
traffic counters that grow with the bytes actually sent."""

from __future__ import annotations

import math
import socket
import threading
import time
from typing import Any

import pandas as pd
import pytest

from ddlstudy.cluster.engines import Cluster
from ddlstudy.experiments import monitor


def _send_over_loopback(nbytes: int) -> None:
    """A real TCP transfer over lo inside this process."""
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    got = []

    def sink() -> None:
        conn, _ = srv.accept()
        n = 0
        while chunk := conn.recv(1 << 20):
            n += len(chunk)
        got.append(n)
        conn.close()

    t = threading.Thread(target=sink)
    t.start()
    with socket.create_connection(("127.0.0.1", port)) as c:
        c.sendall(b"\0" * nbytes)
    t.join(10)
    srv.close()
    assert got == [nbytes]


def _samples_at_least(n: int, bound_s: float = 120.0) -> int:
    """Until this process's sampler holds n rows (start's own first one included); how many it
    holds then. A fixed sleep hoped for them; a loaded host wakes the sampler thread late."""
    sampler = monitor._SAMPLER
    assert sampler is not None
    deadline = time.monotonic() + bound_s
    while len(sampler.rows) < n:
        assert time.monotonic() < deadline, f"{len(sampler.rows)} samples of {n} in {bound_s} s"
        time.sleep(0.01)
    return len(sampler.rows)


def test_sampler_in_process_rows_and_traffic() -> None:
    info = monitor.start_monitor(interval_s=0.05, iface="lo")
    assert info["iface"] == "lo" and info["interval_s"] == 0.05
    before = _samples_at_least(2)  # the sampler thread's first, before the transfer
    _send_over_loopback(8 << 20)
    _samples_at_least(before + 2)  # two more after it; stop adds a last one
    rows = monitor.stop_monitor()
    assert monitor.stop_monitor() == []  # stopped: nothing more
    ts = [r["t"] for r in rows]
    assert len(rows) >= 5 and ts == sorted(ts) and len(set(ts)) == len(ts)
    assert abs(ts[0] - time.time()) < 60  # wall clock, so workers on one host line up
    assert rows[0]["bytes_sent"] == 0 and math.isnan(rows[0]["cpu_pct"])
    # lo counts each byte once as sent and once as received, headers included
    assert rows[-1]["bytes_sent"] >= 8 << 20 and rows[-1]["bytes_recv"] >= 8 << 20
    assert rows[-1]["packets_sent"] > 0
    sent = [r["bytes_sent"] for r in rows]
    assert sent == sorted(sent)
    # each rate is its interval's bytes over its interval's seconds (a loaded host stretches the
    # intervals, so a fixed floor on the rate held only on a quiet one); the 8 MB show in them
    for prev, r in zip(rows, rows[1:], strict=False):
        for key in ("bytes_sent", "bytes_recv", "packets_sent", "packets_recv"):
            assert r[f"{key}_per_s"] == pytest.approx((r[key] - prev[key]) / (r["t"] - prev["t"]))
    assert max(r["bytes_sent_per_s"] for r in rows[1:]) >= (8 << 20) / (ts[-1] - ts[0])
    # host CPU % is NaN over an interval no clock tick fell in (stop's sample can follow the
    # sampler's own by a millisecond): every other value lies in [0, 100], and some exist
    host = [r["host_cpu_pct"] for r in rows[1:] if not math.isnan(r["host_cpu_pct"])]
    assert host and all(0 <= h <= 100 for h in host), rows
    for r in rows[1:]:
        assert r["cpu_pct"] >= 0 and r["rss_mb"] > 10
    try:
        import pynvml  # noqa: F401
    except ImportError:
        assert all(math.isnan(r["gpu_util_pct"]) and math.isnan(r["gpu_mem_mb"]) for r in rows)


def test_bad_arguments_are_clear() -> None:
    with pytest.raises(ValueError, match="no network interface 'nosuch0'"):
        monitor.start_monitor(0.5, iface="nosuch0")
    with pytest.raises(ValueError, match="interval_s"):
        monitor.start_monitor(0)


def _allreduce_loop(count: int, seconds: float, samples: int) -> int:
    """Engine side: all-reduce for `seconds` and until every rank's sampler holds `samples` rows
    (a loaded host wakes the sampler threads late: the loop waits for their samples instead of
    hoping for them; 600 s at most); bytes this rank sent (ring count)."""
    import time

    import torch
    import torch.distributed as dist

    from ddlstudy.experiments import monitor as engine_monitor

    x = torch.ones(count)
    more = torch.ones(1)
    n, t0 = 0, time.perf_counter()
    while True:
        # Ranks agree on when to stop (MAX of their wishes to go on): a rank that stopped alone
        # would leave the other waiting in a collective until the group's timeout.
        sampler = engine_monitor._SAMPLER
        have = len(sampler.rows) if sampler is not None else 0
        elapsed = time.perf_counter() - t0
        more.fill_(float(elapsed < 600 and (elapsed < seconds or have < samples)))
        dist.all_reduce(more, op=dist.ReduceOp.MAX)
        if not more.item():
            break
        dist.all_reduce(x)
        n += 1
    p = dist.get_world_size()
    return n * 2 * (p - 1) * count * 4 // p


_allreduce_loop.__module__ = "__main__"  # shipped by value: engines cannot import tests/


def test_two_local_engines(cluster: Cluster) -> None:
    cluster.init_process_group(world_size=2)
    t_start = time.time()
    with monitor.monitoring(cluster, interval_s=0.2, ranks=[0, 1], roles=["worker", "worker"]
                            ) as mon:
        sent = cluster.run(_allreduce_loop, 1 << 20, 1.5, 3, world_size=2)
    t_end = time.time()
    frame: pd.DataFrame = mon.frame
    assert list(frame.columns[:len(monitor.COLUMNS)]) == monitor.COLUMNS
    assert set(frame["rank"]) == {0, 1} and set(frame["role"]) == {"worker"}
    for rank in (0, 1):
        rows = frame[frame["rank"] == rank]
        assert len(rows) >= 4  # start's, 2+ of the thread's (the loop waits for them), stop's
        assert rows["t"].is_monotonic_increasing and rows["t"].is_unique
        assert (rows["elapsed_s"] >= 0).all()
        assert rows["iface"].unique().tolist() == ["lo"] and rows["iface_shared"].all()
        body = rows.iloc[1:]
        assert body["cpu_pct"].between(0, 100 * 64).all()
        host = body["host_cpu_pct"].dropna()  # NaN: no clock tick in the interval (see above)
        assert len(host) and host.between(0, 100).all()
        assert body["cpu_pct"].max() > 5  # the engine was busy all-reducing
        assert (rows["rss_mb"] > 50).all()  # torch is loaded
        assert rows["bytes_sent"].is_monotonic_increasing
        # lo is shared: it saw at least both ranks' payload
        assert rows["bytes_sent"].iloc[-1] >= sent[0] + sent[1]
        assert body["bytes_sent_per_s"].max() > 0 and body["packets_sent_per_s"].max() > 0
    # workers line up on one clock, the host's wall clock: every sample lies in the driver's
    # window around the block, and the two ranks' sampling windows overlap (both start before
    # either stops). How close their starts are is the scheduler's, not the clock's.
    spans = frame.groupby("rank")["t"].agg(["min", "max"])
    assert frame["t"].between(t_start, t_end).all(), (t_start, t_end, spans)
    assert spans["min"].max() < spans["max"].min(), spans
    summary = monitor.summary(frame)
    assert summary["bytes_sent"].min() >= sent[0]


def test_collect_without_start_is_empty_and_bad_ranks_are_clear(cluster: Cluster) -> None:
    frame = monitor.collect(cluster, ranks=[0])
    assert frame.empty and list(frame.columns) == monitor.COLUMNS
    with pytest.raises(ValueError, match="ranks \\[9\\]"):
        monitor.start(cluster, ranks=[9])


def test_monitoring_keeps_samples_when_the_block_fails(cluster: Cluster) -> None:
    mon: Any = None
    with pytest.raises(RuntimeError, match="boom"):
        with monitor.monitoring(cluster, interval_s=0.1, ranks=[0]) as mon:
            time.sleep(0.3)
            raise RuntimeError("boom")
    assert mon is not None and len(mon.frame) >= 2
