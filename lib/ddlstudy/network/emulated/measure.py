"""Measuring the emulated network: one bulk TCP transfer across a shaped link, every node of a
ring sending at once, and the host calibration `scale_for` picks scales from; the
`python -m ddlstudy.netem` command line (check, calibrate, cleanup).

Split from netem.py, which owns the kernel objects (namespaces, bridge, veth, tbf) and their
cleanup; this module only uses them.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ddlstudy.network.emulated.netem import (
    CALIBRATION_FILE,
    HEADER_BYTES,
    HELD,
    PROFILES,
    UNSHAPED,
    EmulatedNetwork,
    NetemError,
    available,
    cleanup_all,
    profile_info,
    scale_for,
)

# ----------------------------------------------------------------------------- throughput
_SINK = r"""
import json, socket, sys, time
s = socket.socket(); s.bind((sys.argv[1], 0)); s.listen(1)
print(s.getsockname()[1], flush=True)
c, _ = s.accept(); buf = bytearray(1 << 20); n = 0; t0 = None
while True:
    k = c.recv_into(buf)
    if not k: break
    if t0 is None: t0 = time.perf_counter()
    n += k
print(json.dumps({"bytes": n, "seconds": time.perf_counter() - (t0 or time.perf_counter())}))
"""
_SOURCE = r"""
import socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
buf = b"\0" * (1 << 20); t0 = time.perf_counter()
while time.perf_counter() - t0 < float(sys.argv[3]):
    s.sendall(buf)
s.close()
"""


def measure_throughput(net: EmulatedNetwork, src: int = 0, dst: int = 1,
                       seconds: float = 2.0) -> dict[str, Any]:
    """One TCP bulk transfer src -> dst for `seconds`: payload goodput and wire rate (counters)."""
    before = net.counters()
    sink = subprocess.Popen([*net.exec_prefix(dst), sys.executable, "-c", _SINK, net.ips[dst]],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert sink.stdout is not None
        port = sink.stdout.readline().strip()
        if not port.isdigit():
            raise NetemError(f"throughput sink failed: {sink.stderr.read() if sink.stderr else ''}")
        subprocess.run([*net.exec_prefix(src), sys.executable, "-c", _SOURCE, net.ips[dst], port,
                        str(seconds)], check=True, capture_output=True, timeout=seconds + 60)
        out, err = sink.communicate(timeout=60)
    finally:
        if sink.poll() is None:
            sink.kill()
            sink.wait()
    result = json.loads(out.strip().splitlines()[-1])
    after = net.counters()
    secs = max(result["seconds"], 1e-9)
    wire = after[src]["bytes_sent"] - before[src]["bytes_sent"]
    target = net.profile["emulated_rate_bps"]
    return {
        "src": src, "dst": dst, "seconds": secs, "payload_bytes": result["bytes"],
        "payload_bps": result["bytes"] * 8 / secs, "wire_bps": wire * 8 / secs,
        "packets": after[src]["packets_sent"] - before[src]["packets_sent"],
        "target_bps": target,
        "payload_ratio": result["bytes"] * 8 / secs / target if target else None,
    }


def _flows(net: EmulatedNetwork, pairs: Sequence[tuple[int, int]], seconds: float,
           sink: str) -> list[Any]:
    """One bulk TCP flow per (src, dst) node pair, all at once for `seconds`; each sink's last
    output line (JSON), in pair order. Nothing is left running, whatever fails."""
    sinks = [subprocess.Popen([*net.exec_prefix(d), sys.executable, "-c", sink, net.ips[d]],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _, d in pairs]
    sources: list[subprocess.Popen[str]] = []
    try:
        ports = [s.stdout.readline().strip() if s.stdout else "" for s in sinks]
        if not all(p.isdigit() for p in ports):
            raise NetemError("throughput sink failed to start")
        sources = [subprocess.Popen([*net.exec_prefix(src), sys.executable, "-c", _SOURCE,
                                     net.ips[dst], port, str(seconds)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                   for (src, dst), port in zip(pairs, ports, strict=True)]
        for src in sources:
            src.wait(timeout=seconds + 60)
        return [json.loads(s.communicate(timeout=60)[0].strip().splitlines()[-1]) for s in sinks]
    finally:
        for proc in [*sources, *sinks]:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def measure_ring_throughput(net: EmulatedNetwork, seconds: float = 2.0) -> dict[str, Any]:
    """Every node sends to the next at once (a ring, as all-reduce loads the links): the total
    payload rate all links carried together, the host's aggregate ceiling when unshaped."""
    n = net.n_nodes
    results = _flows(net, [(i, (i + 1) % n) for i in range(n)], seconds, _SINK)
    per_link = sorted(r["bytes"] * 8 / max(r["seconds"], 1e-9) for r in results)
    target = net.profile["emulated_rate_bps"]
    median = per_link[len(per_link) // 2]
    return {"nodes": n, "seconds": seconds, "aggregate_payload_bps": sum(per_link),
            "min_link_payload_bps": per_link[0], "target_bps": target,
            "min_link_ratio": per_link[0] / target if target else None,
            "median_link_ratio": median / target if target else None}


# A sink that keeps (wall time, bytes so far) marks, so flows started one after another are
# compared over the window all of them were running (each sink's own first-byte clock is not
# common to the others: summing per-flow rates over their own windows overstates the total).
_MARK_SINK = r"""
import json, socket, sys, time
s = socket.socket(); s.bind((sys.argv[1], 0)); s.listen(1)
print(s.getsockname()[1], flush=True)
c, _ = s.accept(); buf = bytearray(1 << 20); marks = []; n = 0
while True:
    k = c.recv_into(buf)
    if not k: break
    n += k; marks.append((time.time(), n))
print(json.dumps(marks[::20] + marks[-1:]))
"""


def _bytes_at(marks: Sequence[Sequence[float]], t: float) -> float:
    """Bytes a sink had received by wall time t (its last mark at or before t)."""
    got = 0.0
    for when, n in marks:
        if when > t:
            break
        got = n
    return got


def measure_fan_throughput(net: EmulatedNetwork, flows: int, seconds: float = 4.0,
                           both: bool = True) -> dict[str, Any]:
    """A parameter server's link: nodes 1..flows each send to node 0 at once (incast) and, with
    `both`, node 0 sends to each of them meanwhile. Returns node 0's payload rates in and out
    as fractions of the emulated rate, over the window every flow was running (its first
    second, slow start, left out), and how unequally the incoming flows shared the link
    (fastest / slowest flow's rate). ValueError for flows outside 1..n_nodes-1."""
    if not 1 <= flows < net.n_nodes:
        raise ValueError(f"{flows} flows need {flows + 1} nodes, the network has {net.n_nodes}")
    pairs = [(w, 0) for w in range(1, flows + 1)]
    pairs += [(0, w) for w in range(1, flows + 1)] if both else []
    marks = _flows(net, pairs, seconds, _MARK_SINK)
    a = max(m[0][0] for m in marks) + 1.0
    b = min(m[-1][0] for m in marks) - 0.25
    if b - a < 0.5:
        raise NetemError(f"the {len(pairs)} flows ran together for {b - a + 1.25:.1f} s only: "
                         "give --seconds 4 or more")
    rate = net.profile["emulated_rate_bps"]

    def ratio(keep: Any) -> float:
        moved = sum(_bytes_at(m, b) - _bytes_at(m, a)
                    for pair, m in zip(pairs, marks, strict=True) if keep(pair))
        return moved * 8 / (b - a) / rate

    inflow = sorted(ratio(lambda p, w=w: p == (w, 0)) for w in range(1, flows + 1))
    return {"flows": flows, "both": both, "window_s": b - a, "target_bps": rate,
            "in_ratio": ratio(lambda p: p[1] == 0), "out_ratio": ratio(lambda p: p[0] == 0),
            "in_flow_spread": inflow[-1] / inflow[0] if inflow[0] > 0 else float("inf")}


def _fan(profile: str, scale: float | None, seconds: float, flows: int,
         out: str | None = None) -> int:
    """`--fan N`: node 0's link with 1..N flows in, then each way, on links of `profile`;
    `out`: the trials as JSON beside the run's meta (code version, host, argv)."""
    trials = []
    with EmulatedNetwork(flows + 1, profile, scale, offload_off=False) as net:
        print(f"profile {profile} at {_bps(net.profile['emulated_rate_bps'])} per link, "
              f"offload on (as training runs); payload per emulated bit on node 0's link "
              f"(the headers of full {net.mtu}-byte frames leave "
              f"{(net.mtu - (HEADER_BYTES - 14)) / (net.mtu + 14):.3f}; offloaded super-packets "
              f"carry fewer)")
        for n in sorted({1, *range(2, flows + 1, max(1, flows // 3)), flows}):
            for both in (False, True):
                r = measure_fan_throughput(net, n, seconds, both)
                trials.append(r)
                print(f"  {n} flow(s) in{' and out' if both else ''}: in {r['in_ratio']:.3f}"
                      + (f", out {r['out_ratio']:.3f}" if both else "")
                      + (f"; fastest / slowest flow in {r['in_flow_spread']:.2f}" if n > 1
                         else "") + f" (over {r['window_s']:.1f} s)")
        network = net.describe()
    if out:
        from ddlstudy.records.store import run_meta

        path = Path(out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**run_meta({"profile": profile, "scale": scale,
                                                "seconds": seconds, "flows": flows}),
                                    "network": network, "trials": trials},
                                   indent=1, default=str) + "\n")
        print(f"wrote {path}")
    return 0


def _check(profile: str, scale: float | None, seconds: float) -> int:
    with EmulatedNetwork(2, profile, scale) as net:
        d = net.describe()
        r = measure_throughput(net, 0, 1, seconds)
        target = d["emulated_rate_bps"]
        print(f"profile {profile}: real {_bps(d['real_rate_bps'])}, scale {d['scale']}, "
              f"emulated {_bps(target)}; latency not emulated (real one-way "
              f"{d['real_latency_s'] * 1e6 if d['real_latency_s'] else float('nan'):.1f} us)")
        print(f"measured {seconds:g} s TCP bulk transfer node0 -> node1: payload "
              f"{_bps(r['payload_bps'])} ({r['payload_ratio']:.1%} of emulated; headers take "
              f"{HEADER_BYTES / (net.mtu + 14):.1%}), wire {_bps(r['wire_bps'])} "
              f"({r['wire_bps'] / target:.1%}); {r['packets']} packets, {d['packet_counting']}")
    return 0 if abs(r["wire_bps"] / target - 1) < 0.1 else 1


def calibrate(seconds: float = 2.0, offload_off: bool = True) -> dict[str, Any]:
    """Unshaped veth throughput between two namespaces: the ceiling any scaled profile must fit."""
    with EmulatedNetwork(2, UNSHAPED, offload_off=offload_off) as net:
        r = measure_throughput(net, 0, 1, seconds)
        return {**r, "packet_counting": net.describe()["packet_counting"]}


def calibrate_host(seconds: float = 2.0, nodes: int = 5,
                   link_rates: Sequence[float] = (2.5e7, 5e7, 1e8, 2.5e8, 5e8, 1e9, 2e9)
                   ) -> dict[str, Any]:
    """Per offload state: the aggregate ceiling (every node of an unshaped ring sending at once)
    and the fastest tbf link rate a loaded ring still held: median link payload >= HELD x the
    rate (the median, not the slowest link: on a host shared with other jobs one starved
    sender says more about the scheduler than about tbf). What `scale_for` picks scales from."""
    out: dict[str, Any] = {"nodes": nodes, "seconds": seconds, "host": socket.gethostname(),
                           "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    for off in (True, False):
        with EmulatedNetwork(nodes, UNSHAPED, offload_off=off) as net:
            ring = measure_ring_throughput(net, seconds)
        held, trials = 0.0, []
        for rate in link_rates:
            with EmulatedNetwork(nodes, "IB-EDR", rate / PROFILES["IB-EDR"].rate_bps,
                                 offload_off=off) as net:
                r = measure_ring_throughput(net, seconds)
            ok = r["median_link_ratio"] >= HELD
            trials.append({"rate_bps": rate, "min_link_ratio": r["min_link_ratio"],
                           "median_link_ratio": r["median_link_ratio"], "held": ok})
            if not ok:
                break
            held = rate
        out["offload_off" if off else "offload_on"] = {
            "aggregate_bps": ring["aggregate_payload_bps"], "link_bps": held,
            "tbf_trials": trials}
    return out


def _bps(v: float | None) -> str:
    if v is None:
        return "unshaped"
    return f"{v / 1e9:.3f} Gbit/s" if v >= 1e9 else f"{v / 1e6:.1f} Mbit/s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ddlstudy.netem", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true",
                        help="build 2 nodes, measure shaped throughput vs the profile, tear down")
    parser.add_argument("--calibrate", action="store_true",
                        help="measure unshaped veth throughput (offload off and on)")
    parser.add_argument("--cleanup", action="store_true",
                        help="remove leftovers (namespaces, veths, bridges) of crashed runs")
    parser.add_argument("--force", action="store_true",
                        help="with --cleanup: also remove networks of runs still alive")
    parser.add_argument("--network", dest="profile", default="10GbE", choices=[*PROFILES, UNSHAPED],
                        help="the link profile to check (network profile, as training.network)")
    parser.add_argument("--scale", type=float, default=None,
                        help="rate scale factor (default: calibrated per profile, scale_for)")
    parser.add_argument("--fan", type=int, default=0, metavar="N",
                        help="a parameter server's link: up to N flows into node 0, then N each "
                        "way at once (incast and its reverse), payload vs the emulated rate")
    parser.add_argument("--out", default=None, metavar="FILE",
                        help="with --fan: write the trials and the run's meta as JSON here")
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args(argv)
    if args.cleanup:
        removed = cleanup_all(force=args.force)
        print(f"removed {len(removed)} objects" + "".join(f"\n  {r}" for r in removed))
        return 0
    ok, why = available()
    if not ok:
        print(f"netem not available here: {why}", file=sys.stderr)
        return 2
    try:
        if args.calibrate:
            for off in (True, False):
                r = calibrate(args.seconds, off)
                print(f"unshaped veth, offload {'off' if off else 'on'}: payload "
                      f"{_bps(r['payload_bps'])}, wire {_bps(r['wire_bps'])}, "
                      f"{r['packets']} packets ({r['packet_counting']})")
            cal = calibrate_host(args.seconds)
            for key in ("offload_off", "offload_on"):
                c = cal[key]
                print(f"{key.replace('_', ' ')}: {cal['nodes']}-node ring aggregate "
                      f"{_bps(c['aggregate_bps'])}; tbf held {_bps(c['link_bps'])} per link ("
                      + ", ".join(f"{_bps(t['rate_bps'])}: {t['median_link_ratio']:.0%}"
                                  for t in c["tbf_trials"]) + ")")
            from ddlstudy.records.store import project_root

            path = (CALIBRATION_FILE if CALIBRATION_FILE.is_absolute()
                    else project_root() / CALIBRATION_FILE)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(cal, indent=1) + "\n")
            print(f"wrote {path}; scales now: " + ", ".join(
                f"{p} {scale_for(p, 7):g}" for p in PROFILES) + " (7 nodes, offload on)")
            return 0
        if args.check:
            return _check(args.profile, args.scale, args.seconds)
        if args.fan:
            if not 1 <= args.fan <= 16:
                print(f"error: --fan must be in 1..16 flows, got {args.fan}", file=sys.stderr)
                return 2
            return _fan(args.profile, args.scale, max(args.seconds, 4.0), args.fan, args.out)
        for name in PROFILES:
            info = profile_info(name, args.scale)
            print(f"{name:7s} real {_bps(info['real_rate_bps']):>16s}  emulated "
                  f"{_bps(info['emulated_rate_bps']):>16s}  latency "
                  f"{info['real_latency_s'] * 1e6:g} us (not emulated)")
    except (NetemError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    from ddlstudy.host import entry
    from ddlstudy.network.emulated.netem import main as _main

    raise SystemExit(entry.run(_main))
