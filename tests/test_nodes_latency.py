"""Emulated nodes of several GPUs (k engines per node namespace, one shared shaped link) and
emulated per-message latency in the transport (issue 21, items 3 and 6).

The root test starts one emulated cluster (4 engines, 2 per node, 10GbE x 0.01 = 100 Mbit/s) and
checks: 2 namespaces; ranks grouped by node; a node's veth carries the sum of its two ranks'
inter-node bytes and none of their intra-node bytes; a 64 KiB ping-pong within a node is faster
than across;
with latency on, the one-way small-message time across nodes grows by the configured delay
(profile latency x 1/scale) within a measured tolerance, and within a node not at all.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from ddlstudy.collectives import latency
from ddlstudy.network.emulated import netem, nodes

AVAILABLE, WHY = netem.available()
OUT = Path("outputs/gpn/checks")


# ----------------------------------------------------------------------------- no root needed
def test_node_layout_and_env_settings() -> None:
    assert nodes.nodes_for(4, 2) == 2 and nodes.nodes_for(5, 2) == 3
    assert nodes.engine_nodes(5, 2) == [0, 0, 1, 1, 2]
    with pytest.raises(ValueError, match="gpus_per_node"):
        nodes.nodes_for(4, 0)
    s = latency.parse("0.002", "0,0,1,1")
    assert s.delay_to(0, 1) == 0.0 and s.delay_to(0, 2) == 0.002 and s.delay_to(3, 2) == 0.0
    assert latency.parse("", "").delay_to(0, 1) == 0.0
    assert latency.parse("0.001", "").delay_to(0, 1) == 0.001  # no map: every peer remote
    with pytest.raises(ValueError, match="DDLSTUDY_LATENCY_S"):
        latency.parse("soon", "")
    info = netem.profile_info("10GbE", 0.01)
    assert latency.delay_for(info) == pytest.approx(18e-6 / 0.01)
    assert latency.describe(0.0)["latency_emulated"] is False


def test_delay_line_keeps_order_and_delays_without_blocking() -> None:
    issued: list[tuple[int, float]] = []

    class Work:
        def wait(self, timeout_s: float) -> None:
            return None

    # A 1 s delay: a loaded host's late wake-ups (tenths of a second) stay well inside the
    # margins below, which still tell a held caller and a serial line from the right one.
    delay = 1.0
    t0 = time.perf_counter()
    handles = [latency.delayed(lambda i=i: issued.append((i, time.perf_counter())) or Work(),
                               delay) for i in range(5)]
    submitted = time.perf_counter() - t0
    for h in handles:
        h.wait(120)
    assert [i for i, _ in issued] == list(range(5))
    assert submitted < delay / 2  # the caller was not held (held: 1 s per call)
    assert all(t - t0 >= delay / 2 for _, t in issued)  # early by at most half the delay
    # overlapped: the five are due together and leave together, however late the line woke;
    # serially they would leave a delay apart (4 s from the first to the last)
    assert issued[-1][1] - issued[0][1] < delay, issued
    assert issued[0][1] - t0 < 3 * delay  # due at 1 s: not held back a delay or more past it


# ----------------------------------------------------------------------------- root
def _pp(cluster: Any, pairs: list[tuple[int, int]], sizes: list[int],
        iters: int = 30) -> dict[tuple[int, int, int], float]:
    rows = [r for rank_rows in cluster.run(nodes.pingpong_rows, pairs, sizes, iters)
            for r in rank_rows]
    return {(r["a"], r["b"], r["size_bytes"]): r for r in rows}


@pytest.mark.netns
@pytest.mark.skipif(not AVAILABLE, reason=f"network namespaces unavailable: {WHY}")
def test_two_gpus_per_node_share_a_link_and_latency_adds_the_delay() -> None:
    from ddlstudy.experiments.grid import emulated_cluster

    t_start = time.perf_counter()
    with emulated_cluster("10GbE", 4, 0.01, offload_off=False, gpus_per_node=2,
                          latency=False, collective_timeout_s=60) as cluster:
        net, info = cluster.emulated_network, cluster.network_info
        assert net.n_nodes == 2 and len(set(net.namespaces)) == 2
        assert info["rank_nodes"] == [0, 0, 1, 1] == netem.rank_nodes(cluster, net)
        assert info["gpus_per_node"] == 2 and info["latency_emulated_s"] == 0.0
        cluster.init_process_group()
        # Bytes: 0<->2 and 1<->3 cross nodes (3 MB, 1 MB each way), 0<->1 stays in node 0 (4 MB).
        before = net.counters()
        mb = 1 << 20
        per_rank = cluster.run(nodes.exchange, [(0, 2, 3 * mb), (1, 3, mb), (0, 1, 4 * mb)])
        moved = nodes.node_bytes(before, net.counters())
        inter0 = per_rank[0]["inter_bytes"] + per_rank[1]["inter_bytes"]
        assert inter0 == 4 * mb and per_rank[0]["intra_bytes"] == 4 * mb
        for row in moved:  # TCP payload on the node's link: its ranks' inter-node bytes only
            assert row["payload_sent_est"] == pytest.approx(inter0, rel=0.02)
            assert row["payload_recv_est"] == pytest.approx(inter0, rel=0.02)
        # Ping-pong within node 0 (0,1) and across (0,2). At 4 B both take the same (~60 us
        # here: gloo + TCP, the veth and bridge add nothing measurable, and tbf only bites on
        # bytes); at 64 KiB the shaped link shows (100 Mbit/s: ~5 ms vs loopback).
        sizes = [4, 64 << 10]
        base = _pp(cluster, [(0, 1), (0, 2)], sizes)
        assert (3 * base[(0, 1, 64 << 10)]["one_way_p50_s"]
                < base[(0, 2, 64 << 10)]["one_way_p50_s"])
        # Latency on, set here in place so one cluster serves both arms. A latency=True cluster
        # sets the profile's latency x 1/scale (18 us x 1/0.01 = 1.8 ms per message); the
        # mechanism is checked with 10 x that, well above a saturated host's scheduling noise
        # (beside `stress-ng --cpu 2` a 4 B message within a node took 0.06-1.5 ms one way).
        assert latency.delay_for(info) == pytest.approx(1.8e-3)
        delay = 10 * latency.delay_for(info)
        cluster.run(latency.engine_configure, delay, info["rank_nodes"])
        delayed = _pp(cluster, [(0, 1), (0, 2)], [4], iters=60)
        cluster.run(latency.engine_configure, None)
        again = _pp(cluster, [(0, 2)], [4])
    added = delayed[(0, 2, 4)]["one_way_p50_s"] - base[(0, 2, 4)]["one_way_p50_s"]
    intra_added = delayed[(0, 1, 4)]["one_way_p50_s"] - base[(0, 1, 4)]["one_way_p50_s"]
    # Across minus within, in the same phase (at 4 B both take the same without latency: the
    # base phase's contrast is recorded): load moves both pairs alike, so the contrast is the
    # delay whatever the host does between phases (a fresh-clone CI at load ~5 saw the base
    # phase's medians 1.2 ms above the delayed phase's).
    contrast = delayed[(0, 2, 4)]["one_way_p50_s"] - delayed[(0, 1, 4)]["one_way_p50_s"]
    base_contrast = base[(0, 2, 4)]["one_way_p50_s"] - base[(0, 1, 4)]["one_way_p50_s"]
    record = {
        "configured_delay_s": delay, "added_one_way_s": added, "error_s": added - delay,
        "intra_added_s": intra_added, "contrast_s": contrast, "base_contrast_s": base_contrast,
        "pingpong": {f"{a}-{b} {s} B": r for (a, b, s), r in base.items()},
        "with_latency": {f"{a}-{b} {s} B": r for (a, b, s), r in delayed.items()},
        "off_again_0-2_4B": again[(0, 2, 4)], "node_bytes": moved,
        "inter_bytes_node0": inter0, "elapsed_s": time.perf_counter() - t_start,
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "nodes_latency.json").write_text(json.dumps(record, indent=1, default=str))
    # Applied, and about the configured amount: the inter-node pair is slower than the
    # intra-node pair of the same phase by the delay, within half of it either way (the precise
    # overshoot, +0.17-0.24 ms at load 10-16, is recorded above, not asserted).
    assert delay / 2 < contrast < 1.5 * delay, record
    # Not delayed within a node: a delayed message would add the whole delay over the base
    # phase; faster than the base phase (load easing between phases) is not a delay.
    assert intra_added < delay / 2, record
    # "off again" (latency switched off in place on live engines) is recorded, not asserted: a
    # transport built while latency was on keeps its delay (seen: 1.8 ms after switching off),
    # so it is a property of when the Comm was built, not of the emulation; clusters set latency
    # at start (emulated_cluster(latency=...)), which is what runs use.


def test_train_cli_refuses_nodes_and_latency_without_a_network() -> None:
    from ddlstudy.cli.train import _parser, check_node_args

    args = _parser().parse_args(["--gpus-per-node", "2"])
    assert "need an emulated --network" in (check_node_args(args) or "")
    args = _parser().parse_args(["--latency"])
    assert "need an emulated --network" in (check_node_args(args) or "")
    args = _parser().parse_args(["--network", "10GbE", "--gpus-per-node", "0"])
    assert "--gpus-per-node must be in" in (check_node_args(args) or "")
    assert check_node_args(_parser().parse_args(["--network", "10GbE", "--latency"])) is None
