"""Utilization and traffic time series per worker, as in Shi 2019 section 4.3 (figures 4.5-4.22):
CPU, memory, GPU, and bytes/packets sent and received by each node over time.

A sampler thread runs inside every engine (started and stopped by engine calls), so it measures
the engine process itself and the network interface the engine's traffic uses. Timestamps are
wall-clock `time.time()`, so samples of different workers on one host line up (across hosts they
are as good as NTP).

Which interface: inside an emulated network (ddlstudy.network.emulated.netem) each engine has its
own namespace,
and the counters of its veth are that worker's traffic alone. Without namespaces, all local
engines talk over `lo`, whose counters are shared by every worker (and anything else on the host):
the rows then say `iface_shared=True` and the per-worker split cannot be read from them.

    with monitoring(cluster, interval_s=0.5, ranks=[0, 1]) as mon:
        cluster.run(train_step_loop)
    frame = mon.frame
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import psutil

COLUMNS = ["rank", "role", "t", "elapsed_s", "cpu_pct", "host_cpu_pct", "rss_mb", "gpu_util_pct",
           "gpu_mem_mb", "iface", "iface_shared", "bytes_sent", "bytes_recv", "packets_sent",
           "packets_recv", "bytes_sent_per_s", "bytes_recv_per_s", "packets_sent_per_s",
           "packets_recv_per_s", "packet_counting", "host", "pid", "netns"]
NAN = float("nan")


# ----------------------------------------------------------------------------- engine side
class _Gpu:
    """NVML handle of this engine's GPU, when pynvml is importable and a GPU is present."""

    def __init__(self) -> None:
        self.handle: Any = None
        self.nvml: Any = None
        try:
            import pynvml

            pynvml.nvmlInit()
            if pynvml.nvmlDeviceGetCount() == 0:
                return
            index = 0
            with contextlib.suppress(Exception):
                from ddlstudy.cluster.engines import engine_device

                device = engine_device()
                if device.startswith("cuda:"):
                    index = int(device.split(":")[1])
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            self.nvml = pynvml
        except Exception:  # noqa: BLE001 - no NVML, no driver, no GPU: the columns stay NaN
            self.handle = None

    def sample(self) -> tuple[float, float]:
        """(utilization %, device memory used MB) - the device's, shared if engines share it."""
        if self.handle is None:
            return NAN, NAN
        try:
            util = self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu
            mem = self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used
            return float(util), mem / 1e6
        except Exception:  # noqa: BLE001 - a GPU that vanished mid-run: record NaN, keep going
            return NAN, NAN


def default_iface() -> str:
    """The interface this engine's collective traffic uses: gloo's, else the one holding the
    engine's address (DDLSTUDY_HOST_IP), else loopback."""
    nics = psutil.net_io_counters(pernic=True)
    gloo = os.environ.get("GLOO_SOCKET_IFNAME", "").split(",")[0]
    if gloo in nics:
        return gloo
    ip = os.environ.get("DDLSTUDY_HOST_IP")
    if ip:
        for name, addrs in psutil.net_if_addrs().items():
            if any(a.address == ip for a in addrs) and name in nics:
                return name
    return "lo"


class _Sampler:
    def __init__(self, interval_s: float, iface: str | None) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be positive, got {interval_s!r}")
        self.interval_s = float(interval_s)
        self.iface = iface or default_iface()
        if self.iface not in psutil.net_io_counters(pernic=True):
            raise ValueError(f"no network interface {self.iface!r} here; have: "
                             f"{', '.join(sorted(psutil.net_io_counters(pernic=True)))}")
        self.proc = psutil.Process()
        self.gpu = _Gpu()
        self.rows: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._base = (0, 0, 0, 0)  # set by the first sample (start)
        self.proc.cpu_percent(None)  # first call primes the interval counters
        self._host_times = psutil.cpu_times()
        self._thread = threading.Thread(target=self._loop, name="ddlstudy-monitor", daemon=True)

    def _net(self) -> tuple[int, int, int, int]:
        c = psutil.net_io_counters(pernic=True).get(self.iface)
        if c is None:
            return 0, 0, 0, 0
        return c.bytes_sent, c.bytes_recv, c.packets_sent, c.packets_recv

    def _host_cpu(self) -> float:
        """Busy % of all cores since the last sample (psutil.cpu_percent keeps its state per
        thread, and samples come from two threads: the sampler and the final one at stop)."""
        now = psutil.cpu_times()
        d = {k: max(0.0, getattr(now, k) - getattr(self._host_times, k)) for k in now._fields}
        self._host_times = now
        total = sum(d.values()) - d.get("guest", 0.0) - d.get("guest_nice", 0.0)
        idle = d.get("idle", 0.0) + d.get("iowait", 0.0)
        return 100.0 * (total - idle) / total if total > 0 else NAN

    def sample(self, first: bool = False) -> None:
        t = time.time()
        net = self._net()
        if first:  # counters start at this sample: lo is shared, others' traffic moves it anytime
            self._base = net
        sent, recv, psent, precv = (a - b for a, b in zip(net, self._base, strict=True))
        gpu_util, gpu_mem = self.gpu.sample()
        row = {
            "t": t, "cpu_pct": NAN if first else self.proc.cpu_percent(None),
            "host_cpu_pct": NAN if first else self._host_cpu(),
            "rss_mb": self.proc.memory_info().rss / 1e6, "gpu_util_pct": gpu_util,
            "gpu_mem_mb": gpu_mem, "bytes_sent": sent, "bytes_recv": recv,
            "packets_sent": psent, "packets_recv": precv,
        }
        prev = self.rows[-1] if self.rows else None
        dt = t - prev["t"] if prev else 0.0
        for key in ("bytes_sent", "bytes_recv", "packets_sent", "packets_recv"):
            row[f"{key}_per_s"] = (row[key] - prev[key]) / dt if prev and dt > 0 else NAN
        self.rows.append(row)

    def _loop(self) -> None:
        next_t = time.monotonic() + self.interval_s
        while not self._stop.wait(max(0.0, next_t - time.monotonic())):
            self.sample()
            next_t += self.interval_s
            if next_t < time.monotonic():  # fell behind (a busy host): skip, do not burst
                next_t = time.monotonic() + self.interval_s

    def start(self) -> None:
        self.sample(first=True)
        self._thread.start()

    def stop(self) -> list[dict[str, Any]]:
        self._stop.set()
        self._thread.join(timeout=10 * self.interval_s + 5)
        self.sample()
        return self.rows


_SAMPLER: _Sampler | None = None
_LOCK = threading.Lock()


def start_monitor(interval_s: float = 0.5, iface: str | None = None) -> dict[str, Any]:
    """Start sampling in this process (an engine). A running sampler is replaced (its rows lost).

    iface: network interface to count (default: see `default_iface`).
    """
    global _SAMPLER
    with _LOCK:
        if _SAMPLER is not None:
            _SAMPLER.stop()
        _SAMPLER = _Sampler(interval_s, iface)
        _SAMPLER.start()
        return _meta(_SAMPLER)


def stop_monitor() -> list[dict[str, Any]]:
    """Stop sampling; the samples, each with this engine's rank, interface and host."""
    global _SAMPLER
    with _LOCK:
        sampler, _SAMPLER = _SAMPLER, None
    if sampler is None:
        return []
    rows = sampler.stop()
    meta = _meta(sampler)
    return [{**meta, **row} for row in rows]


def _meta(s: _Sampler) -> dict[str, Any]:
    from ddlstudy.network.emulated.netem import packet_counting

    rank = 0
    with contextlib.suppress(Exception):
        from ddlstudy.cluster.engines import engine_rank

        rank = engine_rank()
    return {"rank": rank, "iface": s.iface, "packet_counting": packet_counting(s.iface),
            "host": os.uname().nodename, "pid": os.getpid(),
            "netns": os.environ.get("DDLSTUDY_NETNS", ""),
            "ip": os.environ.get("DDLSTUDY_HOST_IP", ""),
            "gpu": s.gpu.handle is not None, "interval_s": s.interval_s}


# ----------------------------------------------------------------------------- driver side
def _ranks(cluster: Any, ranks: Sequence[int] | None) -> list[int]:
    ranks = list(range(cluster.size)) if ranks is None else list(ranks)
    bad = [r for r in ranks if not 0 <= r < cluster.size]
    if bad:
        raise ValueError(f"ranks {bad} not in this cluster of {cluster.size} engines")
    return ranks


def _call(cluster: Any, ranks: Sequence[int], fn: Any, *args: Any,
          timeout: float = 60.0) -> list[Any]:
    """fn on the given ranks at once; results in that order."""
    return cluster.run_ranks(ranks, fn, *args, timeout=timeout)


def shares_stack(cluster: Any, ranks: Sequence[int]) -> bool:
    """True when the ranks share one network stack (one host, no namespaces): traffic on lo."""
    infos = cluster.info()
    keys = {(infos[r]["host"], infos[r]["ip"]) for r in ranks}
    return len(keys) < len(ranks)


def start(cluster: Any, interval_s: float = 0.5, ranks: Sequence[int] | None = None,
          iface: str | None = None) -> list[dict[str, Any]]:
    """Start the sampler on the given ranks (all by default); their interface and settings.

    Ranks sharing one network stack count `lo` unless iface says otherwise: their traffic to each
    other never reaches a NIC.
    """
    ranks = _ranks(cluster, ranks)
    if iface is None and len(ranks) > 0 and shares_stack(cluster, range(cluster.size)):
        iface = "lo"
    return _call(cluster, ranks, start_monitor, interval_s, iface)


def collect(cluster: Any, ranks: Sequence[int] | None = None,
            roles: Sequence[str] | Mapping[int, str] | None = None,
            timeout: float = 600.0) -> Any:
    """Stop the samplers on the given ranks and return one tidy DataFrame (COLUMNS).

    Counters are deltas since start; *_per_s are rates over each sampling interval (NaN on the
    first row). roles: per rank (list in rank order, or {rank: role}); default "worker".
    elapsed_s is seconds since the earliest sample of any rank, so workers line up on one axis.
    """
    import pandas as pd

    ranks = _ranks(cluster, ranks)
    per_rank = _call(cluster, ranks, stop_monitor, timeout=timeout)
    shared = shares_stack(cluster, ranks) if ranks else False
    rows = []
    for rank, samples in zip(ranks, per_rank, strict=True):
        role = "worker"
        if isinstance(roles, Mapping):
            role = roles.get(rank, role)
        elif roles is not None and rank < len(roles):
            role = roles[rank]
        for s in samples:
            rows.append({**s, "rank": rank, "role": role,
                         "iface_shared": s["iface"] == "lo" or shared})
    frame = pd.DataFrame(rows)
    if frame.empty:
        return pd.DataFrame(columns=COLUMNS)
    frame["elapsed_s"] = frame["t"] - frame["t"].min()
    extra = [c for c in frame.columns if c not in COLUMNS]
    return frame[COLUMNS + extra].sort_values(["t", "rank"], kind="stable").reset_index(drop=True)


class Monitoring:
    """What `monitoring()` yields: `.frame` holds the samples once the block has ended."""

    def __init__(self) -> None:
        self.frame: Any = None
        self.started: list[dict[str, Any]] = []


@contextlib.contextmanager
def monitoring(cluster: Any, interval_s: float = 0.5, ranks: Sequence[int] | None = None,
               roles: Sequence[str] | Mapping[int, str] | None = None,
               iface: str | None = None) -> Iterator[Monitoring]:
    """Sample the ranks while the block runs; the frame is in `.frame` afterwards (also on error:
    what was sampled until then is kept)."""
    mon = Monitoring()
    ranks = _ranks(cluster, ranks)
    mon.started = start(cluster, interval_s, ranks, iface)
    try:
        yield mon
    finally:
        mon.frame = collect(cluster, ranks, roles)


def summary(frame: Any) -> Any:
    """Mean utilization and total traffic per rank (a table for the report next to the plots)."""
    g = frame.groupby(["rank", "role"])
    return g.agg(cpu_pct=("cpu_pct", "mean"), host_cpu_pct=("host_cpu_pct", "mean"),
                 rss_mb=("rss_mb", "max"), bytes_sent=("bytes_sent", "max"),
                 bytes_recv=("bytes_recv", "max"), packets_sent=("packets_sent", "max"),
                 packets_recv=("packets_recv", "max"),
                 seconds=("elapsed_s", lambda s: float(s.max() - s.min()))).reset_index()
