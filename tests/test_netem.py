"""The emulated network really exists, is shaped to its profile, counts what collectives send,
and leaves nothing behind (also after an exception, also after a crashed run)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ddlstudy.network.emulated import measure, netem

AVAILABLE, WHY = netem.available()


def needs_netns(fn: Any) -> Any:
    """Skipped, with the reason, only where namespaces cannot be made here."""
    skip = pytest.mark.skipif(not AVAILABLE, reason=f"network namespaces unavailable: {WHY}")
    return pytest.mark.netns(skip(fn))


def _snapshot() -> dict[str, set[str]]:
    """Namespaces, links and qdiscs of the root namespace, to compare before/after."""
    netns = set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                               check=True).stdout.split())
    links = {link["ifname"] for link in json.loads(subprocess.run(
        ["ip", "-j", "link", "show"], capture_output=True, text=True, check=True).stdout)}
    qdiscs = set(subprocess.run(["tc", "qdisc", "show"], capture_output=True, text=True,
                                check=True).stdout.splitlines())
    return {"netns": netns, "links": links, "qdiscs": qdiscs}


def _ours(snap: dict[str, set[str]], run_id: str) -> list[str]:
    tag = f"{netem.PREFIX}{run_id}-"
    return [x for kind in snap.values() for x in kind if tag in x]


# ----------------------------------------------------------------------------- no root needed
def test_profiles_real_and_emulated_rates() -> None:
    info = netem.profile_info("10GbE")
    assert info["real_rate_bps"] == 10e9
    assert info["emulated_rate_bps"] == pytest.approx(10e9 * netem.DEFAULT_SCALE)
    assert info["latency_emulated"] is False and info["real_latency_s"] > 0
    assert netem.profile_info("IB-EDR", scale=0.005)["emulated_rate_bps"] == pytest.approx(5e8)
    rates = [netem.PROFILES[p].rate_bps for p in ("1GbE", "10GbE", "25GbE", "IB-EDR")]
    assert rates == sorted(rates) and rates[-1] == 100e9
    with pytest.raises(ValueError, match="valid: 1GbE"):
        netem.profile_info("40GbE")
    with pytest.raises(ValueError, match="scale"):
        netem.profile_info("1GbE", scale=2)


def test_tbf_params_hold_at_least_a_packet_and_a_queue() -> None:
    for rate in (1e7, 1e8, 1e9):
        p = netem.tbf_params(rate)
        assert p["burst_bytes"] >= 16_000 > netem.MTU
        assert p["limit_bytes"] >= 4 * p["burst_bytes"]


def test_not_root_is_a_reason_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netem.os, "geteuid", lambda: 1000)
    ok, why = netem.available(refresh=True)
    assert not ok and "not root" in why
    monkeypatch.undo()
    netem.available(refresh=True)


def test_fallback_to_loopback_prints_one_line(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(netem, "available", lambda refresh=False: (False, "not root"))
    with netem.network_or_loopback(2, "10GbE") as net:
        assert net is None
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "loopback" in out[0] and "not root" in out[0]


# ----------------------------------------------------------------------------- namespaces
@needs_netns
def test_network_created_shaped_and_removed() -> None:
    before = _snapshot()
    with netem.EmulatedNetwork(2, "10GbE") as net:
        during = _snapshot()
        ours = _ours(during, net.run_id)
        assert set(net.namespaces) <= during["netns"]
        assert {net.bridge, *net.host_ifaces} <= during["links"]
        rate = "100Mbit"
        assert sum(1 for q in during["qdiscs"] if "tbf" in q and rate in q) >= 2  # bridge ports
        for ns, veth, ip in zip(net.namespaces, net.ifaces, net.ips, strict=True):
            inside = subprocess.run(["tc", "-n", ns, "qdisc", "show", "dev", veth],
                                    capture_output=True, text=True, check=True).stdout
            assert "tbf" in inside and rate in inside  # uplink shaped too
            addr = subprocess.run(["ip", "-n", ns, "-br", "addr", "show", "dev", veth],
                                  capture_output=True, text=True, check=True).stdout
            assert ip in addr and "UP" in addr
        d = net.describe()
        assert d["emulated_rate_bps"] == 1e8 and d["latency_emulated"] is False
        assert d["packet_counting"].startswith(("wire-sized", "merged segments"))
        assert netem.STATE_DIR.joinpath(f"{net.run_id}.json").exists()
        assert len(ours) >= 5
    after = _snapshot()
    assert _ours(after, net.run_id) == []
    assert after["netns"] - before["netns"] == set() and after["links"] - before["links"] == set()
    assert not netem.STATE_DIR.joinpath(f"{net.run_id}.json").exists()


@needs_netns
def test_exception_inside_the_block_still_removes_everything() -> None:
    with pytest.raises(RuntimeError, match="boom"):
        with netem.EmulatedNetwork(2, "1GbE") as net:
            assert _ours(_snapshot(), net.run_id)
            raise RuntimeError("boom")
    assert _ours(_snapshot(), net.run_id) == []


@needs_netns
def test_cleanup_all_removes_a_crashed_run_but_not_a_live_one() -> None:
    # A process that builds a network and dies without cleaning up (os._exit skips atexit).
    code = ("import os; from ddlstudy.network.emulated import netem; "
            "n = netem.EmulatedNetwork(2, '1GbE').up(); print(n.run_id, flush=True); os._exit(0)")
    with netem.EmulatedNetwork(1, "1GbE") as live:
        crashed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                 check=True).stdout.strip()
        assert len(_ours(_snapshot(), crashed)) >= 5
        removed = netem.cleanup_all()
        assert any(crashed in r for r in removed)
        assert _ours(_snapshot(), crashed) == []
        assert _ours(_snapshot(), live.run_id), "a live run's network must survive cleanup_all"
    cli = subprocess.run([sys.executable, "-m", "ddlstudy.netem", "--cleanup"],
                         capture_output=True, text=True)
    assert cli.returncode == 0 and cli.stdout.startswith("removed")


@needs_netns
def test_offloads_off_without_ethtool(monkeypatch: pytest.MonkeyPatch) -> None:
    which = netem.shutil.which
    monkeypatch.setattr(netem.shutil, "which",
                        lambda name, *a, **k: None if name == "ethtool" else which(name, *a, **k))
    with netem.EmulatedNetwork(1, "10GbE") as net:
        d = net.describe()
        assert d["offload_method"] == "ioctl" and d["packet_counting"].startswith("wire-sized")
        assert netem.offload_state(net.host_ifaces[0]) == {"tso": False, "gso": False,
                                                            "gro": False}
    with netem.EmulatedNetwork(1, "10GbE", offload_off=False) as net:
        assert "merged segments" in net.describe()["packet_counting"]
        assert netem.offload_state(net.host_ifaces[0])["tso"] is True


@needs_netns
def test_records_say_which_tcp_congestion_control_shares_the_links() -> None:
    """Namespaces inherit the host's congestion control (bbr here), which sets how flows share
    a tbf link: describe() reads it inside the node namespace, an algorithm the kernel has."""
    host = Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text().strip()
    avail = Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
    with netem.EmulatedNetwork(1, "10GbE") as net:
        cc = net.describe()["tcp_congestion_control"]
    assert cc == host and cc in avail
    assert netem.congestion_control("ddl-no-such-namespace") == "unknown"


@needs_netns
def test_shaped_throughput_within_10_percent() -> None:
    with netem.EmulatedNetwork(2, "10GbE") as net:
        r = measure.measure_throughput(net, 0, 1, seconds=2.0)
    print(f"10GbE/{1 / netem.DEFAULT_SCALE:g}: payload {r['payload_bps'] / 1e6:.1f} Mbit/s, "
          f"wire {r['wire_bps'] / 1e6:.1f} Mbit/s, target {r['target_bps'] / 1e6:.1f} Mbit/s")
    assert r["payload_bps"] == pytest.approx(r["target_bps"], rel=0.10)
    assert r["wire_bps"] == pytest.approx(r["target_bps"], rel=0.10)
    assert r["wire_bps"] > r["payload_bps"]  # headers are on the wire, not in the payload


@needs_netns
def test_fan_measures_a_servers_link_over_a_common_window() -> None:
    """2 flows into node 0, then 2 each way: rates over the window all flows ran, so the sum
    cannot exceed the link (summing each flow over its own window gave up to 1.12 here)."""
    with netem.EmulatedNetwork(3, "1GbE", 0.1, offload_off=False) as net:
        with pytest.raises(ValueError, match="3 flows need 4 nodes"):
            measure.measure_fan_throughput(net, 3)
        alone = measure.measure_fan_throughput(net, 2, seconds=4.0, both=False)
        both = measure.measure_fan_throughput(net, 2, seconds=4.0, both=True)
    print(f"fan 2: in {alone['in_ratio']:.3f}; each way in {both['in_ratio']:.3f}, out "
          f"{both['out_ratio']:.3f} over {both['window_s']:.1f} s")
    assert alone["out_ratio"] == 0 and 0.5 < alone["in_ratio"] <= 1.03
    assert 0.5 < both["in_ratio"] <= 1.03 and 0.5 < both["out_ratio"] <= 1.03
    assert both["window_s"] >= 2.0


@pytest.mark.slow
@needs_netns
@pytest.mark.parametrize("profile", ["1GbE", "25GbE", "IB-EDR"])
def test_other_profiles_within_10_percent(profile: str) -> None:
    with netem.EmulatedNetwork(2, profile) as net:
        r = measure.measure_throughput(net, 0, 1, seconds=3.0)
    assert r["payload_bps"] == pytest.approx(r["target_bps"], rel=0.10)


# ----------------------------------------------------------------------------- with a cluster
def _allreduce_traffic(count: int, iters: int, algorithm: str) -> dict[str, Any]:
    """Engine side: `iters` all-reduces; the bytes the collective says it moved on this rank."""
    import torch
    import torch.distributed as dist

    from ddlstudy import collectives

    x = torch.ones(count)
    sent = recv = 0
    for _ in range(iters):
        if algorithm == "torch":
            dist.all_reduce(x)
            s, r = collectives.analytic_traffic("ring", x.numel() * 4, dist.get_world_size(),
                                                dist.get_rank())
        else:
            t = collectives.all_reduce(x, algorithm=algorithm, check=False)
            s, r = t.sent_bytes, t.recv_bytes
        sent, recv = sent + s, recv + r
    return {"sent": sent, "recv": recv}


# Shipped by value (engines cannot import this test module); its imports are inside it.
_allreduce_traffic.__module__ = "__main__"


@pytest.fixture(scope="module")
def ns_cluster() -> Iterator[tuple[netem.EmulatedNetwork, Any]]:
    if not AVAILABLE:
        pytest.skip(f"network namespaces unavailable: {WHY}")
    with netem.EmulatedNetwork(3, "25GbE") as net:
        cluster = netem.start_cluster_in_namespaces(net, collective_timeout_s=60)
        try:
            cluster.init_process_group()
            yield net, cluster
        finally:
            cluster.stop()


@needs_netns
@pytest.mark.parametrize("algorithm", ["ring", "torch"])
def test_counters_agree_with_collective_bytes(ns_cluster: tuple[netem.EmulatedNetwork, Any],
                                              algorithm: str) -> None:
    net, cluster = ns_cluster
    infos = cluster.info()
    nodes = netem.rank_nodes(cluster, net)
    assert sorted(nodes) == [0, 1, 2]
    assert [i["ip"] for i in infos] == [net.ips[n] for n in nodes]
    count = 3 << 20  # 12 MiB of float32, divisible by 3 ranks
    cluster.run(_allreduce_traffic, 1 << 10, 1, algorithm)  # connections up before counting
    before = net.counters(nodes)
    traffic = cluster.run(_allreduce_traffic, count, 2, algorithm)
    after = net.counters(nodes)
    for rank, (b, a, t) in enumerate(zip(before, after, traffic, strict=True)):
        assert t["sent"] == 2 * 2 * (3 - 1) * count * 4 // 3  # 2 x 2(n-1)/n x buffer
        for way in ("sent", "recv"):
            payload = a[f"payload_{way}_est"] - b[f"payload_{way}_est"]
            wire = a[f"bytes_{way}"] - b[f"bytes_{way}"]
            print(f"{algorithm} rank {rank} {way}: collective {t[way]}, veth payload {payload} "
                  f"({payload / t[way] - 1:+.2%}), wire {wire} ({wire / t[way] - 1:+.2%})")
            assert payload == pytest.approx(t[way], rel=0.05)
            assert t[way] <= wire <= 1.10 * t[way]  # frames carry ~4.6% headers at MTU 1500


@needs_netns
def test_monitor_inside_namespaces_counts_each_worker_alone(
        ns_cluster: tuple[netem.EmulatedNetwork, Any]) -> None:
    from ddlstudy.experiments import monitor

    net, cluster = ns_cluster
    nodes = netem.rank_nodes(cluster, net)
    before = net.counters(nodes)
    with monitor.monitoring(cluster, interval_s=0.2, roles=["ps", "worker", "worker"]) as mon:
        traffic = cluster.run(_allreduce_traffic, 1 << 20, 3, "ring")
    after = net.counters(nodes)
    frame = mon.frame
    assert set(frame["rank"]) == {0, 1, 2}
    for rank in range(3):
        rows = frame[frame["rank"] == rank]
        assert rows["iface"].unique().tolist() == [net.ifaces[nodes[rank]]]
        assert not rows["iface_shared"].any()
        assert rows["netns"].unique().tolist() == [net.namespaces[nodes[rank]]]
        assert rows["role"].iloc[0] == ("ps" if rank == 0 else "worker")
        last = rows.iloc[-1]
        wire = after[rank]["bytes_sent"] - before[rank]["bytes_sent"]
        assert traffic[rank]["sent"] <= last["bytes_sent"] <= wire
        assert last["packets_sent"] > traffic[rank]["sent"] / netem.MTU * 0.9 or (
            "merged" in last["packet_counting"])


# ----------------------------------------------------------------------------- calibration
@pytest.fixture
def calibrated(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A calibration file as `netem --calibrate` writes it, with chosen ceilings."""
    def write(aggregate_on: float, link_on: float, aggregate_off: float = 1e9,
              link_off: float = 1e8) -> Any:
        path = tmp_path / "cal.json"
        path.write_text(json.dumps({
            "offload_on": {"aggregate_bps": aggregate_on, "link_bps": link_on},
            "offload_off": {"aggregate_bps": aggregate_off, "link_bps": link_off}}))
        monkeypatch.setattr(netem, "CALIBRATION_FILE", path)
        return path
    return write


def test_scale_fits_the_calibrated_ceiling(calibrated: Any) -> None:
    """10 nodes x 10GbE x scale <= 0.8 x 4 Gbit/s -> 0.02 (0.05 would ask 5 Gbit/s); IB-EDR,
    10x faster, gets a 10x smaller scale; a 1 Gbit/s per-link cap bounds 1GbE at 0.2 (not 1)."""
    path = calibrated(4e9, 1e9)
    assert netem.calibration(offload_off=False)["source"] == str(path)
    assert netem.scale_for("10GbE", 10) == 0.02
    assert netem.scale_for("IB-EDR", 10) == 0.002
    assert netem.scale_for("1GbE", 2) == 0.2
    for profile in ("1GbE", "10GbE", "25GbE", "IB-EDR"):
        s = netem.scale_for(profile, 7)
        assert 7 * netem.PROFILES[profile].rate_bps * s <= 0.8 * 4e9
    # offload off has its own, lower ceiling
    assert netem.scale_for("10GbE", 10, offload_off=True) == 0.005


def test_missing_calibration_falls_back_to_the_measured_defaults(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netem, "CALIBRATION_FILE", tmp_path / "absent.json")
    cal = netem.calibration(offload_off=True)
    assert cal["aggregate_bps"] == netem.CALIBRATION_DEFAULTS["offload_off"]["aggregate_bps"]
    assert cal["source"] == "netem.CALIBRATION_DEFAULTS"


def test_cpu_bound_flags_cells_above_the_ceiling() -> None:
    info = {"emulated_rate_bps": 1e9, "aggregate_ceiling_bps": 3.5e9}
    assert netem.cpu_bound(info, 3) is False
    assert netem.cpu_bound(info, 4) is True
    assert netem.cpu_bound({"profile": "none"}, 8) is False  # unshaped: nothing to flag
    assert netem.cpu_bound(None, 8) is False
    # one link faster than tbf held in calibration (10GbE x 0.02 where 100 Mbit/s held here)
    info = {"emulated_rate_bps": 2e8, "aggregate_ceiling_bps": 1.8e9, "link_ceiling_bps": 1e8}
    assert netem.cpu_bound(info, 4) is True
    assert netem.cpu_bound({**info, "emulated_rate_bps": 1e8}, 4) is False


@needs_netns
def test_a_cpu_bound_cell_is_flagged_in_its_record(calibrated: Any, tmp_path: Any) -> None:
    """A real replayed run whose links together exceed a (deliberately tiny) ceiling carries
    cpu_bound in summary.csv; the same run under a large ceiling does not."""
    from ddlstudy.experiments.grid import dilation, emulated_cluster
    from ddlstudy.train.trainer import TrainConfig, train

    flags = {}
    for ceiling in (1e6, 1e12):
        calibrated(ceiling, 1e9)
        with emulated_cluster("10GbE", 2, scale=0.01, offload_off=False,
                              collective_timeout_s=60) as cluster:
            assert cluster.network_info["aggregate_ceiling_bps"] == ceiling
            config = TrainConfig(model="mlp", shape="mnist", batch_size=8, steps=1,
                                 warmup_steps=0, workers=2, compute="replay",
                                 replay_source=str(_table(tmp_path)),
                                 time_dilation=dilation(cluster, "replay"))
            result = train(cluster, config, tmp_path / f"c{ceiling:g}", progress=False)
        summary = json.loads(result.summary.to_json(orient="records"))[0]
        flags[ceiling] = summary["cpu_bound"]
    assert flags == {1e6: True, 1e12: False}


def _table(tmp_path: Any) -> Any:
    path = tmp_path / "ref.csv"
    path.write_text("model,shape,batch_size,compute_s_p50\nmlp,mnist,8,0.01\n")
    return path


def test_latency_note_states_what_was_found() -> None:
    """Records say latency is not emulated, and whether netem exists here as found, not assumed."""
    note = netem.latency_note()
    assert note.startswith("not emulated") and "tbf" in note
    assert ("netem is available" in note) == netem.netem_qdisc_known()
