"""`allreduce`: gradients packed into buckets of `bucket_mb`, each bucket all-reduced (mean) by
a `ddlstudy.collectives` algorithm; with `overlap=True` a bucket is launched from autograd hooks
the moment its last gradient is ready and reduced on a communication thread while backward
goes on; `overlap=False` reduces the same buckets after backward."""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ddlstudy.strategies.base import StepStats, Strategy

# StepStats' per-tier byte fields -> (tier, 0 sent / 1 received) of `Traffic.tiers()`
TIER_COLUMNS = {"bytes_sent_intra": ("intra", 0), "bytes_sent_inter": ("inter", 0),
                "bytes_recv_intra": ("intra", 1), "bytes_recv_inter": ("inter", 1)}


@dataclass
class _Bucket:
    index: int
    params: list[nn.Parameter]
    offsets: list[tuple[int, int]]
    buf: torch.Tensor
    pending: int = 0


def make_buckets(params: Sequence[nn.Parameter], bucket_bytes: int) -> list[_Bucket]:
    """Greedy buckets in the given order, each up to bucket_bytes (a larger tensor gets its own).

    Callers pass parameters in reverse registration order: backward produces the last layer's
    gradients first, so the first bucket is ready earliest (as DDP does).
    """
    groups: list[list[nn.Parameter]] = []
    size = 0
    for p in params:
        nbytes = p.numel() * p.element_size()
        if not groups or size + nbytes > bucket_bytes and size > 0:
            groups.append([])
            size = 0
        groups[-1].append(p)
        size += nbytes
    buckets = []
    for i, group in enumerate(groups):
        offsets, start = [], 0
        for p in group:
            offsets.append((start, start + p.numel()))
            start += p.numel()
        buf = torch.zeros(start, dtype=group[0].dtype, device=group[0].device)
        buckets.append(_Bucket(i, group, offsets, buf))
    return buckets


class BucketHooks:
    """Gradient buckets filled from autograd hooks and handed, complete and in bucket order, to a
    communication thread's queue (`_todo`), so every rank issues the same messages in the same
    sequence. Shared by the overlapped all-reduce and the overlapped parameter server; the host
    class sets `buckets`, `_where` (id(param) -> (bucket, index)), `_next`, `_todo` and
    `overlap` (False: buckets wait for `_launch_ready(force=True)` after backward)."""

    buckets: list[_Bucket]
    _where: dict[int, tuple[_Bucket, int]]
    _next: int
    _todo: queue.Queue
    _done: queue.Queue
    timeout_s: float
    overlap: bool = True

    def _on_grad(self, p: torch.Tensor) -> None:
        """Autograd hook: pack this gradient; launch every bucket that is now complete."""
        bucket, i = self._where[id(p)]
        a, b = bucket.offsets[i]
        bucket.buf[a:b].copy_(p.grad.reshape(-1))
        bucket.pending -= 1
        if self.overlap:
            self._launch_ready()

    def _grad_ready(self, p: torch.Tensor) -> None:
        self._on_grad(p)

    def _launch_ready(self, force: bool = False) -> None:
        """Queue every complete bucket in order; `force`: the rest too (unused parameters'
        gradients are zero)."""
        while self._next < len(self.buckets):
            bucket = self.buckets[self._next]
            if bucket.pending > 0 and not force:
                return
            if bucket.pending > 0:
                for p, (a, b) in zip(bucket.params, bucket.offsets, strict=True):
                    if p.grad is None:
                        bucket.buf[a:b].zero_()
            self._todo.put(bucket)
            self._next += 1

    def _await_done(self, count: int, what: str) -> None:
        """Wait for `count` reports from the communication thread (each None or the exception
        it hit, raised here); TimeoutError naming `what` past the transport's timeout + 30 s."""
        wait = self.timeout_s + 30
        for _ in range(count):
            try:
                err = self._done.get(timeout=wait)
            except queue.Empty:
                raise TimeoutError(f"{what} not done within {wait:g} s") from None
            if err is not None:
                raise err


class AllReduce(BucketHooks, Strategy):
    """Bucketed all-reduce of gradients with any `collectives` algorithm, overlapped or not."""

    name = "allreduce"

    def __init__(self, model: nn.Module, *, algorithm: str = "ring", bucket_mb: float = 25.0,
                 overlap: bool = True, group: Any = None, **kw: Any) -> None:
        super().__init__(model, **kw)
        from ddlstudy import collectives

        if algorithm not in collectives.ALGORITHMS:
            raise ValueError(f"unknown all-reduce algorithm {algorithm!r}; valid: "
                             f"{', '.join(collectives.ALGORITHMS)}")
        if bucket_mb <= 0:
            raise ValueError(f"bucket_mb must be > 0, got {bucket_mb}")
        self.collectives = collectives
        self.algorithm, self.overlap, self.group = algorithm, overlap, group
        self.bucket_bytes = int(bucket_mb * 2**20)
        self.buckets = make_buckets(list(reversed(self.params)), self.bucket_bytes)
        self._where = {id(p): (b, i) for b in self.buckets for i, p in enumerate(b.params)}
        self.opt = self._optimizer(self.params)
        self._handles = [p.register_post_accumulate_grad_hook(self._on_grad) for p in self.params]
        self._next = 0
        self._steps = 0
        self._lock = threading.Lock()
        self._reset_counters()
        self._todo: queue.Queue[_Bucket | None] = queue.Queue()
        self._done: queue.Queue[BaseException | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        if overlap:
            self._thread = threading.Thread(target=self._comm_loop, name="ddlstudy-allreduce",
                                            daemon=True)
            self._thread.start()

    def _reset_counters(self) -> None:
        self._busy_s, self._sent, self._recv = 0.0, 0, 0
        self._tiers: dict[str, float] = dict.fromkeys(TIER_COLUMNS, 0.0)

    def _reduce(self, bucket: _Bucket) -> None:
        t = time.perf_counter()
        traffic = self.collectives.all_reduce(bucket.buf, self.algorithm, op="mean",
                                              group=self.group, timeout_s=self.timeout_s,
                                              check=self._steps == 0)
        self._sync()  # CUDA: the reduction is done, not only launched
        dt = time.perf_counter() - t
        tiers = traffic.tiers()
        with self._lock:
            self._busy_s += dt
            self._sent += traffic.sent_bytes
            self._recv += traffic.recv_bytes
            for name, (tier, way) in TIER_COLUMNS.items():
                self._tiers[name] += math.nan if tiers is None else tiers[tier][way]

    def analytic_tiers(self) -> dict[str, float] | None:
        """Sum over the buckets of the algorithm's per-tier traffic (`analytic_tiers`) at this
        process's ranks per node, in the group's rank order; None where it has no split."""
        import torch.distributed as dist

        from ddlstudy.collectives.placement import gpus_per_node

        p, r = ((dist.get_world_size(self.group), dist.get_rank(self.group))
                if dist.is_initialized() else (1, 0))
        out = dict.fromkeys(TIER_COLUMNS, 0.0)
        for bucket in self.buckets:
            nbytes = bucket.buf.numel() * bucket.buf.element_size()
            tiers = self.collectives.analytic_tiers(self.algorithm, nbytes, p, r, gpus_per_node())
            if tiers is None:
                return None
            for name, (tier, way) in TIER_COLUMNS.items():
                out[name] += tiers[tier][way]
        return out

    def _comm_loop(self) -> None:
        while True:
            bucket = self._todo.get()
            if bucket is None:
                return
            try:
                self._reduce(bucket)
                self._done.put(None)
            except BaseException as err:  # noqa: BLE001 - handed to the training thread
                self._done.put(err)

    def step(self, x: torch.Tensor, y: torch.Tensor) -> StepStats:
        self._reset_counters()
        self._next = 0
        for bucket in self.buckets:
            bucket.pending = len(bucket.params)
        self._sync()
        t0 = time.perf_counter()
        loss = self._forward_backward(self.model, x, y)
        self._sync()
        t1 = time.perf_counter()
        if self.overlap:
            self._launch_ready(force=True)
            self._await_done(len(self.buckets), "allreduce: bucket reductions")
        else:
            for bucket in self.buckets:
                self._reduce(bucket)
        t2 = time.perf_counter()
        with torch.no_grad():
            for bucket in self.buckets:
                for p, (a, b) in zip(bucket.params, bucket.offsets, strict=True):
                    if p.grad is None:
                        p.grad = torch.empty_like(p)
                    p.grad.copy_(bucket.buf[a:b].view_as(p))
        self.opt.step()
        self._sync()
        t3 = time.perf_counter()
        self._steps += 1
        comm = self._busy_s if self.overlap else t2 - t1
        return StepStats(loss=loss, compute_s=t1 - t0, comm_s=comm, comm_wait_s=t2 - t1,
                         update_s=t3 - t2, step_s=t3 - t0, bytes_sent=self._sent,
                         bytes_recv=self._recv, images=len(x), **self._tiers)

    def close(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
        if self._thread is not None:
            self._todo.put(None)
            self._thread.join(timeout=10)
            self._thread = None
