"""Per-message latency emulated in the transport, where the kernel cannot add it (no netem qdisc).

Label for the records: "latency emulated in the transport (sender-side delay per message)".

Every message the Comm harness sends through `DistTransport.isend` to a rank on ANOTHER node is
issued `delay_s` after the call, by one delay thread per process (FIFO, so the order of messages
to a peer is kept); the caller is not blocked, so segments in flight overlap their delays as they
would on a wire. Messages between ranks of one node are not delayed. With links scaled by `scale`
(time dilation), the delay is the profile's real one-way latency x 1/scale, so the compute:latency
ratio of the real cluster is kept, as `dilate` keeps compute:bandwidth.

What it does NOT cover: torch.distributed's own collectives (gloo all_reduce, DDP, the `reference`
algorithm), Horovod and TensorFlow traffic, receives, ACKs. The veth + TCP path adds its own
(real, unscaled) latency of tens of microseconds on top.

Configured per process by the environment (set at engine start by the emulated cluster,
`ddlstudy.network.emulated.nodes`), or in-process with `configure` (tests):

    DDLSTUDY_LATENCY_S=0.0018      # delay per inter-node message, seconds (0 or unset: off)
    DDLSTUDY_RANK_NODES=0,0,1,1    # node of each global rank (unset: every peer is remote)
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ddlstudy.collectives.placement import ENV_RANK_NODES, parse_rank_nodes

ENV_DELAY = "DDLSTUDY_LATENCY_S"
LABEL = "latency emulated in the transport (sender-side delay per message)"
NOT_EMULATED = "not emulated: links are rate-shaped with tc tbf only (no netem qdisc here)"


@dataclass(frozen=True)
class Setting:
    """This process's emulated latency: delay per inter-node message, rank -> node map."""

    delay_s: float = 0.0
    rank_nodes: tuple[int, ...] = ()

    def delay_to(self, own: int, peer: int) -> float:
        """Seconds to hold a message from global rank `own` to global rank `peer`."""
        if self.delay_s <= 0:
            return 0.0
        nodes = self.rank_nodes
        if own < len(nodes) and peer < len(nodes) and nodes[own] == nodes[peer]:
            return 0.0
        return self.delay_s


_override: dict[str, Setting | None] = {"setting": None}
_cache: dict[tuple[str, str], Setting] = {}


def parse(delay: str, rank_nodes: str) -> Setting:
    """A Setting from the two environment strings (ValueError names the bad one)."""
    try:
        d = float(delay) if delay.strip() else 0.0
    except ValueError:
        raise ValueError(f"{ENV_DELAY} must be seconds, got {delay!r}") from None
    if not 0 <= d < 10:
        raise ValueError(f"{ENV_DELAY} must be in [0, 10) seconds, got {d!r}")
    return Setting(d, parse_rank_nodes(rank_nodes))


def current() -> Setting:
    """The setting `configure` made, else the environment's (parsed once per value)."""
    if _override["setting"] is not None:
        return _override["setting"]
    key = (os.environ.get(ENV_DELAY, ""), os.environ.get(ENV_RANK_NODES, ""))
    if key not in _cache:
        _cache[key] = parse(*key)
    return _cache[key]


def configure(delay_s: float | None, rank_nodes: Sequence[int] = ()) -> None:
    """Set this process's emulated latency (None: back to the environment's)."""
    _override["setting"] = None if delay_s is None else Setting(float(delay_s), tuple(rank_nodes))


def engine_configure(delay_s: float | None, rank_nodes: Sequence[int] = ()) -> float:
    """`configure` on an engine (cluster.run(engine_configure, ...)); returns the delay now set."""
    configure(delay_s, rank_nodes)
    return current().delay_s


def delay_for(profile: dict[str, Any] | None) -> float:
    """The delay per message for a network description (netem.profile_info / describe()):
    real one-way latency x 1/scale; 0 when the profile has no latency or no scale."""
    info = profile or {}
    lat, scale = info.get("real_latency_s"), info.get("scale")
    if not lat or not scale:
        return 0.0
    return float(lat) / float(scale)


class _Deferred:
    """A send issued later by the delay thread; `wait` waits for the issue, then the send."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.event = threading.Event()
        self.work: Any = None
        self.error: BaseException | None = None

    def wait(self, timeout_s: float) -> None:
        t0 = time.monotonic()
        if not self.event.wait(timeout_s):
            raise TimeoutError(f"{self.what} was not issued within {timeout_s:g} s "
                               "(emulated-latency delay thread stuck)")
        if self.error is not None:
            raise self.error
        self.work.wait(max(1e-3, timeout_s - (time.monotonic() - t0)))


class DelayLine:
    """One daemon thread issuing calls at their due time, in submission order (FIFO).

    A sleeping thread wakes late (timer slack, other processes on the cores: 0.16 ms median,
    1.4 ms at p90 on this 2-core host under load 11); the line measures its own lateness and
    wakes that much early (the median of the last LATE_WINDOW wake-ups, at most half the
    delay), so the median message leaves at its due time. `lateness_s` keeps the last ones.
    """

    LATE_WINDOW = 64

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._queue: deque[tuple[float, Callable[[], Any], _Deferred]] = deque()
        self._thread: threading.Thread | None = None
        self.lateness_s: deque[float] = deque(maxlen=self.LATE_WINDOW)
        self._lead = 0.0

    def submit(self, fn: Callable[[], Any], delay_s: float, what: str = "send") -> _Deferred:
        """Call fn() delay_s from now (never before a call submitted earlier)."""
        slot = _Deferred(what)
        with self._cv:
            now = time.perf_counter()
            lead = min(self._lead, delay_s / 2)
            self._queue.append((now + delay_s - lead, fn, slot))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="ddlstudy-latency",
                                                daemon=True)
                self._thread.start()
            self._cv.notify()
        return slot

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._queue:
                    self._cv.wait()
                due, fn, slot = self._queue[0]
                left = due - time.perf_counter()
                if left > 0:
                    self._cv.wait(left)
                    continue
                self._queue.popleft()
                self.lateness_s.append(-left)
                ordered = sorted(self.lateness_s)
                self._lead = ordered[len(ordered) // 2]
            try:
                slot.work = fn()
            except BaseException as err:  # handed to the waiter, the thread goes on
                slot.error = err
            slot.event.set()


_LINE = DelayLine()


def delayed(fn: Callable[[], Any], delay_s: float, what: str = "send") -> _Deferred:
    """fn() issued delay_s from now by this process's delay thread; a handle with wait()."""
    return _LINE.submit(fn, delay_s, what)


def describe(delay_s: float, profile: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the records say about latency for a run with `delay_s` per inter-node message."""
    info = profile or {}
    if delay_s <= 0:
        return {"latency_emulated": False, "latency_emulated_s": 0.0,
                "latency_method": NOT_EMULATED}
    return {"latency_emulated": True, "latency_emulated_s": delay_s,
            "latency_method": LABEL,
            "latency_rule": f"real one-way latency {info.get('real_latency_s')} s x 1/scale "
                            f"(scale {info.get('scale')}), only between ranks of different "
                            "nodes, only messages of the Comm harness (DistTransport)"}
