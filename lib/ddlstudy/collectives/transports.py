"""How bytes move between ranks: torch.distributed point-to-point, or threads in one process.

- `DistTransport`: torch.distributed isend/irecv (gloo on CPU) - the measured runs;
- `LocalTransport`: threads in one process exchanging tensors through queues - the same algorithm
  code without a network (see `simulate.run_local`).
"""

from __future__ import annotations

import datetime as dt
import queue
import threading
from typing import Any, Protocol

import torch


class Handle(Protocol):
    def wait(self, timeout_s: float) -> None: ...


class Transport(Protocol):
    rank: int
    size: int

    def isend(self, tensor: torch.Tensor, peer: int, tag: int) -> Handle: ...

    def irecv(self, tensor: torch.Tensor, peer: int, tag: int) -> Handle: ...


class _DistHandle:
    """A torch.distributed Work whose wait is bounded and names what it waited for."""

    def __init__(self, work: Any, what: str) -> None:
        self.work, self.what = work, what

    def wait(self, timeout_s: float) -> None:
        try:
            self.work.wait(timeout=dt.timedelta(seconds=timeout_s))
        except RuntimeError as err:
            raise TimeoutError(f"{self.what} did not complete within {timeout_s:g} s "
                               f"(a peer failed or is stuck): {err}") from None


class DistTransport:
    """torch.distributed point-to-point on `group` (ranks are group ranks)."""

    def __init__(self, group: Any = None) -> None:
        import torch.distributed as dist

        import ddlstudy.collectives.latency as latency

        self.dist, self.group = dist, group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        # emulated per-message latency (ddlstudy.collectives.latency; off unless configured)
        self._latency, self._own = latency.current(), dist.get_rank()
        self._delayed = latency.delayed

    def _global(self, peer: int) -> int:
        if self.group is None:
            return peer
        return self.dist.get_global_rank(self.group, peer)

    def global_rank(self, peer: int) -> int:
        """The global rank of group rank `peer` (which node it is on: `placement.tier`)."""
        return self._global(peer)

    def isend(self, tensor: torch.Tensor, peer: int, tag: int) -> Handle:
        what = f"send {self.rank}->{peer} (tag {tag})"
        delay = self._latency.delay_to(self._own, self._global(peer))
        if delay > 0:  # issued `delay` later by the delay thread; the caller goes on
            return self._delayed(lambda: _DistHandle(self.dist.isend(
                tensor, self._global(peer), group=self.group, tag=tag), what), delay, what)
        work = self.dist.isend(tensor, self._global(peer), group=self.group, tag=tag)
        return _DistHandle(work, what)

    def irecv(self, tensor: torch.Tensor, peer: int, tag: int) -> Handle:
        work = self.dist.irecv(tensor, self._global(peer), group=self.group, tag=tag)
        return _DistHandle(work, f"recv {self.rank}<-{peer} (tag {tag})")


class _Done:
    """An already-completed operation (buffered local send, zero-length message)."""

    def wait(self, timeout_s: float) -> None:
        return None


class _LocalRecv:
    def __init__(self, box: queue.Queue, tensor: torch.Tensor, what: str) -> None:
        self.box, self.tensor, self.what = box, tensor, what

    def wait(self, timeout_s: float) -> None:
        try:
            data = self.box.get(timeout=timeout_s)
        except queue.Empty:
            raise TimeoutError(f"{self.what} did not complete within {timeout_s:g} s") from None
        if data.numel() != self.tensor.numel():
            raise RuntimeError(f"{self.what}: got {data.numel()} elements, "
                               f"expected {self.tensor.numel()}")
        self.tensor.copy_(data)


class LocalTransport:
    """In-process ranks (threads) with buffered sends; mailboxes are FIFO per (src, dst, tag)."""

    def __init__(self, rank: int, size: int, boxes: dict[tuple[int, int, int], queue.Queue],
                 lock: threading.Lock) -> None:
        self.rank, self.size, self._boxes, self._lock = rank, size, boxes, lock

    def _box(self, src: int, dst: int, tag: int) -> queue.Queue:
        with self._lock:
            return self._boxes.setdefault((src, dst, tag), queue.Queue())

    def isend(self, tensor: torch.Tensor, peer: int, tag: int) -> Handle:
        self._box(self.rank, peer, tag).put(tensor.detach().clone())
        return _Done()

    def irecv(self, tensor: torch.Tensor, peer: int, tag: int) -> Handle:
        return _LocalRecv(self._box(peer, self.rank, tag), tensor,
                          f"local recv {self.rank}<-{peer} (tag {tag})")
