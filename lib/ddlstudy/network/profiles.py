"""The one list of link profiles: each real network's line rate and small-message latency, with
where the numbers come from. The emulator shapes links to these rates, the step model charges
them, params validate `network` names against them; torch-free and import-free, so any layer can
read it.
"""

from __future__ import annotations

from dataclasses import dataclass

MTU = 1500
# Ethernet 14 + IPv4 20 + TCP 20 + timestamps option 12: what each wire packet adds to the payload
# (Linux default tcp_timestamps=1); the counters' "payload" estimate subtracts it per packet.
HEADER_BYTES = 66


@dataclass(frozen=True)
class Profile:
    """A real network: its line rate and small-message one-way latency, with where they come from.

    Latencies are orders of magnitude for kernel TCP (Ethernet) or verbs/MPI (InfiniBand) through
    one switch; they are not emulated here (no netem) but stored for the cost model.
    """

    name: str
    rate_bps: float
    latency_s: float
    rate_source: str
    latency_source: str


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in [
        Profile("1GbE", 1e9, 50e-6,
                "IEEE 802.3ab 1000BASE-T: 1 Gb/s",
                "kernel TCP through one switch, dominated by NIC interrupt moderation "
                "(e1000e/igb default ~20k interrupts/s = 50 us); typical 30-60 us"),
        Profile("10GbE", 10e9, 18e-6,
                "IEEE 802.3ae 10GBASE-R: 10 Gb/s",
                "sockperf ping-pong, Linux kernel TCP, 10G NICs back to back: 17.8 us "
                "(F-Stack/f-stack issue #540); Hurwitz & Feng, HOTI 2003: ~20 us end-to-end"),
        Profile("25GbE", 25e9, 10e-6,
                "IEEE 802.3by 25GBASE-R: 25 Gb/s",
                "kernel TCP on 25G NICs: ~10 us (same stack as 10GbE, faster serialisation and "
                "NICs); order of magnitude"),
        Profile("IB-EDR", 100e9, 1e-6,
                "InfiniBand EDR 4x: 4 lanes x 25.78125 GBd, 64b/66b = 100 Gb/s",
                "MPI/verbs small-message latency on ConnectX-4 EDR, ~1 us (OSU osu_latency, "
                "MVAPICH2 published results); RDMA, not TCP"),
    ]
}
UNSHAPED = "unshaped"
# The smallest emulated scale: 1GbE x 0.001 = 1 Mbit/s, the slowest rate the tc shaping (tbf, with
# its burst sized for one MTU frame per timer tick) was checked at. Below it a rate rounds towards
# 0 bit/s and tc refuses it.
MIN_SCALE = 0.001
