"""The parameter server users would deploy today (BytePS's shape, Jiang et al. 2020), beside the
thesis's naive `ps_sync`: `ps_overlap` (S servers on their own engines) and `ps_colocated`
(S = N: every worker also serves 1/N of the parameters, no server engines).

Gradients are packed into the all-reduce strategy's buckets (`make_buckets`: reverse parameter
order, up to `bucket_mb`), each bucket cut into S near-equal shards, server s owning shard s of
every bucket. A bucket is pushed the moment backward has produced its last gradient (autograd
hooks, or replay's `_grad_ready`), on a communication thread while backward goes on; the
server sums the N pushes of that bucket, applies SGD to its shard and sends the new weights
back at once. The worker does not wait for a bucket's pull before pushing the next bucket, so
bucket b's pull (the servers' outbound direction) runs while bucket b+1 pushes (inbound). After
the last pull the worker copies the weights in; it runs no optimizer of its own.

Co-located (`ps_colocated`): worker r is server r. Its own shard never touches the wire; it
receives the N-1 other workers' shards of each bucket, reduces them in rank order with its own,
steps, sends its shard's new weights to the N-1 others and receives theirs. The communication
thread waits for a bucket's pushes before reducing it, but not for its pulls.

Every byte goes through a `ddlstudy.collectives` `Comm` (counted on the wire). Per step
(`analytic_traffic`): a separate-server worker sends the model plus a 16-byte header per server
and receives the model (2 x model); server s receives N x (its shard + header) and sends N x
its shard (N x model/S each way). Co-located: (N-1)/N of the model pushed and (N-1)/N served
out, the same received: 2(N-1)/N x model each way, the ring's bytes. At the end of a chunk a
separate-server worker sends each server a STOP header (uncounted in the step rows, as in
`ps_sync`).
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, ClassVar

import torch
from torch import nn

from ddlstudy.collectives.common import Comm, bounds, since
from ddlstudy.collectives.transports import DistTransport, Handle
from ddlstudy.strategies.allreduce import BucketHooks, _Bucket, make_buckets
from ddlstudy.strategies.base import StepStats, Strategy, chunk_over

GRAD, STOP = 1, 2
HEADER_BYTES = 2 * 8
TAG_HDR, TAG_PUSH, TAG_PULL = 201, 1_000_000, 2_000_000


def analytic_traffic(model_bytes: int, workers: int, servers: int, colocated: bool,
                     rank: int) -> tuple[int, int]:
    """(sent, received) bytes of `rank` per step from the structure (headers included): exact
    when every bucket's element count divides by S, else within one element per bucket."""
    n, s = workers, servers
    if colocated:
        if n == 1:
            return 0, 0
        own = model_bytes // n
        return (model_bytes - own) + (n - 1) * own, (n - 1) * own + (model_bytes - own)
    if rank < n:
        return model_bytes + s * HEADER_BYTES, model_bytes
    return n * model_bytes // s, n * (model_bytes // s + HEADER_BYTES)


class PSOverlap(BucketHooks, Strategy):
    """Per-bucket push during backward, pull pipelined with the next push; S servers."""

    name = "ps_overlap"
    colocated: ClassVar[bool] = False

    def __init__(self, model: nn.Module, *, bucket_mb: float = 25.0, **kw: Any) -> None:
        super().__init__(model, **kw)
        if bucket_mb <= 0:
            raise ValueError(f"bucket_mb must be > 0, got {bucket_mb}")
        n = self.layout.workers
        if self.colocated:
            self.server_ranks = list(range(n))
        else:
            if self.layout.servers < 1:
                raise ValueError(f"{self.name} needs at least 1 server, got "
                                 f"{self.layout.servers}")
            self.server_ranks = self.layout.server_ranks
        self.comm = Comm(DistTransport(), self.timeout_s)
        self.buckets = make_buckets(list(reversed(self.params)), int(bucket_mb * 2**20))
        nsrv = len(self.server_ranks)
        if any(b.buf.numel() < nsrv for b in self.buckets):
            raise ValueError(f"{self.name}: a bucket has fewer elements than the {nsrv} "
                             "servers; raise bucket_mb")
        self.shards = [bounds(b.buf.numel(), nsrv) for b in self.buckets]
        # this rank's server index (None: not a server)
        self.me = (self.server_ranks.index(self.rank) if self.rank in self.server_ranks
                   else None)
        if self.me is not None:
            self._init_server()
        if self.is_worker:
            self._init_worker()

    # ------------------------------------------------------------------ setup
    def _flat(self, bucket: _Bucket) -> torch.Tensor:
        with torch.no_grad():
            return torch.cat([p.detach().reshape(-1) for p in bucket.params])

    def _init_server(self) -> None:
        """This server's shard of every bucket (same seed, same init: the workers' weights),
        one SGD per bucket, and receive buffers for the workers' pushes."""
        n, s = self.layout.workers, self.me
        assert s is not None
        self.w: list[nn.Parameter] = []
        self.opts: list[torch.optim.Optimizer] = []
        self.rbufs: list[list[torch.Tensor]] = []
        for bucket, cuts in zip(self.buckets, self.shards, strict=True):
            a, b = cuts[s], cuts[s + 1]
            w = nn.Parameter(self._flat(bucket)[a:b].clone())
            self.w.append(w)
            self.opts.append(self._optimizer([w]))
            self.rbufs.append([torch.empty_like(w.data) for _ in range(n)])

    def _init_worker(self) -> None:
        self.wbufs = [torch.empty_like(b.buf) for b in self.buckets]
        self._where = {id(p): (b, i) for b in self.buckets for i, p in enumerate(b.params)}
        self._hooks = [p.register_post_accumulate_grad_hook(self._on_grad) for p in self.params]
        self._hdr = torch.zeros(2, dtype=torch.int64)
        self._next = 0
        self._steps = 0
        self._busy_s = 0.0
        self._pending: list[Handle] = []
        self._todo: queue.Queue[_Bucket | None] = queue.Queue()
        self._done: queue.Queue[BaseException | None] = queue.Queue()
        self._thread: threading.Thread | None = threading.Thread(
            target=self._comm_loop, name=f"ddlstudy-{self.name}", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ worker
    def _comm_loop(self) -> None:
        while True:
            bucket = self._todo.get()
            if bucket is None:
                return
            try:
                t = time.perf_counter()
                self._push_pull(bucket)
                if bucket.index == len(self.buckets) - 1:  # the step's last: pulls finish
                    self.comm.wait_all(self._pending)
                    self._pending = []
                self._busy_s += time.perf_counter() - t
                if bucket.index == len(self.buckets) - 1:
                    self._done.put(None)
            except BaseException as err:  # noqa: BLE001 - handed to the training thread
                self._pending = []
                self._done.put(err)

    def _push_pull(self, bucket: _Bucket) -> None:
        """Push bucket's shards, post its pulls; co-located: also serve this rank's shard."""
        c, i, cuts = self.comm, bucket.index, self.shards[bucket.index]
        wbuf = self.wbufs[i]
        if not self.colocated:
            if i == 0:  # one header per server per step: GRAD (a chunk ends with STOP)
                self._hdr[0], self._hdr[1] = GRAD, self._steps
                self._pending += [c.isend(self._hdr, q, tag=TAG_HDR) for q in self.server_ranks]
            for s, q in enumerate(self.server_ranks):
                self._pending.append(c.isend(bucket.buf[cuts[s]:cuts[s + 1]], q,
                                             tag=TAG_PUSH + i))
                self._pending.append(c.irecv(wbuf[cuts[s]:cuts[s + 1]], q, tag=TAG_PULL + i))
            return
        me, n = self.rank, self.layout.workers
        peers = [q for q in range(n) if q != me]
        rbufs = self.rbufs[i]
        recvs = [c.irecv(rbufs[q], q, tag=TAG_PUSH + i) for q in peers]
        self._pending += [c.isend(bucket.buf[cuts[q]:cuts[q + 1]], q, tag=TAG_PUSH + i)
                          for q in peers]
        c.wait_all(recvs)
        rbufs[me].copy_(bucket.buf[cuts[me]:cuts[me + 1]])
        self._apply(i)
        mine = wbuf[cuts[me]:cuts[me + 1]]
        mine.copy_(self.w[i].detach())
        self._pending += [c.irecv(wbuf[cuts[q]:cuts[q + 1]], q, tag=TAG_PULL + i)
                          for q in peers]
        self._pending += [c.isend(mine, q, tag=TAG_PULL + i) for q in peers]

    def _apply(self, i: int) -> None:
        """Server: mean of the N pushes of bucket i (rank order), SGD on this shard."""
        with torch.no_grad():
            grad = self.rbufs[i][0].clone()
            for g in self.rbufs[i][1:]:
                grad.add_(g)
            grad.div_(self.layout.workers)
        self.w[i].grad = grad
        self.opts[i].step()

    def step(self, x: torch.Tensor, y: torch.Tensor) -> StepStats:
        self._next, self._busy_s = 0, 0.0
        for bucket in self.buckets:
            bucket.pending = len(bucket.params)
        before = self.comm.traffic.step_fields()
        t0 = time.perf_counter()
        loss = self._forward_backward(self.model, x, y)
        t1 = time.perf_counter()
        self._launch_ready(force=True)
        self._await_done(1, f"{self.name}: pushes/pulls")
        t2 = time.perf_counter()
        with torch.no_grad():
            for bucket, wbuf in zip(self.buckets, self.wbufs, strict=True):
                for p, (a, b) in zip(bucket.params, bucket.offsets, strict=True):
                    p.copy_(wbuf[a:b].view_as(p))
        t3 = time.perf_counter()
        self._steps += 1
        return StepStats(loss=loss, compute_s=t1 - t0, comm_s=self._busy_s, comm_wait_s=t2 - t1,
                         update_s=t3 - t2, step_s=t3 - t0, images=len(x),
                         **since(before, self.comm.traffic))

    def end_chunk(self) -> None:
        if self.colocated:
            return
        hdr = torch.tensor([STOP, self._steps], dtype=torch.int64)
        self.comm.wait_all([self.comm.isend(hdr, q, tag=TAG_HDR) for q in self.server_ranks])

    # ------------------------------------------------------------------ separate server
    def serve(self) -> list[StepStats]:
        if self.is_worker:
            return super().serve()
        c, n = self.comm, self.layout.workers
        rows: list[StepStats] = []
        hdrs = [torch.zeros(2, dtype=torch.int64) for _ in range(n)]
        while True:
            t0 = time.perf_counter()
            before = c.traffic.step_fields()
            c.wait_all([c.irecv(hdrs[w], w, tag=TAG_HDR) for w in range(n)])
            kinds = [int(h[0]) for h in hdrs]
            if chunk_over(kinds, STOP, self.rank):
                return rows
            t1 = time.perf_counter()
            recvs = [[c.irecv(self.rbufs[i][w], w, tag=TAG_PUSH + i) for w in range(n)]
                     for i in range(len(self.buckets))]
            sends: list[Handle] = []
            update = 0.0
            for i, handles in enumerate(recvs):
                c.wait_all(handles)
                tu = time.perf_counter()
                self._apply(i)
                update += time.perf_counter() - tu
                sends += [c.isend(self.w[i].detach(), w, tag=TAG_PULL + i) for w in range(n)]
            c.wait_all(sends)
            t2 = time.perf_counter()
            rows.append(StepStats(comm_s=t2 - t1 - update, update_s=update, idle_s=t1 - t0,
                                  step_s=t2 - t1, **since(before, c.traffic)))

    def close(self) -> None:
        if not self.is_worker:
            return
        for h in self._hooks:
            h.remove()
        self._hooks = []
        if self._thread is not None:
            self._todo.put(None)
            self._thread.join(timeout=10)
            self._thread = None


class PSColocated(PSOverlap):
    """`ps_overlap` with S = N servers co-located with the workers (BytePS's arrangement)."""

    name = "ps_colocated"
    colocated = True
