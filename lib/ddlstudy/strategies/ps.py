"""Parameter servers: `ps_sync`, `ps_sharded` (synchronous) and `ps_async`.

As in Shi 2019's Figure 2.5 - each worker pushes its gradient, the server(s) average the N
gradients and apply SGD, each worker pulls the new weights. With S servers (`ps_sharded`,
S >= 2) server s owns one contiguous 1/S of the flattened parameters. `ps_async`: the server
applies each worker's gradient as soon as it arrives (receive from any worker), bumps its
version and sends that worker the new weights. The staleness of an update is the server's
version when it is applied minus the version the worker computed it on.

Wire protocol (torch.distributed point-to-point, tags keep the streams apart): a worker sends
a header `[kind, version]` (int64) then, for a gradient, its shard; the server answers a
gradient with a header `[version, staleness]` and the shard's new weights. At the end of each
chunk of steps every worker sends a STOP header to every server, which ends the server's serve
loop; the trainer starts the next loop with the next chunk. Headers are 16 bytes each way and
are counted in the bytes like the payload (they are on the wire too), and split by link tier by
the peer's node (`collectives.placement`: the same rule as the Comm harness's counts).

Devices (ddlstudy.collectives.device): payloads (gradients, weights, the server's buffers) live
on the ranks' compute device, so on CUDA ranks they travel over NCCL; headers live on the
group's metadata device, CPU over gloo in the study's `cpu:gloo,cuda:nccl` group. The async
server's receive from any worker is such a gloo receive: NCCL alone has none, and `ps_async`
refuses a plain NCCL group with one line.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import torch
from torch import nn

from ddlstudy.collectives.device import any_source_ok, group_backend, group_meta_device
from ddlstudy.collectives.placement import gpus_per_node, split
from ddlstudy.strategies.allreduce import TIER_COLUMNS
from ddlstudy.strategies.base import (
    StepStats,
    Strategy,
    _nbytes,
    _wait,
    chunk_over,
    flat_params,
)

# PS message kinds and tags.
GRAD, STOP = 1, 2
TAG_PUSH_HDR, TAG_PUSH, TAG_PULL_HDR, TAG_PULL = 101, 102, 103, 104
HEADER_BYTES = 2 * 8


def tier_fields(rank: int, exchanges: list[tuple[int, int, int]]) -> dict[str, float]:
    """`StepStats`' per-tier byte fields of global `rank` from its (peer, sent, received) bytes
    of one step (`placement.split` at this process's nodes)."""
    t = split(rank, gpus_per_node(), exchanges)
    return {name: t[tier][way] for name, (tier, way) in TIER_COLUMNS.items()}


def shard_bounds(n: int, shards: int) -> list[tuple[int, int]]:
    """Contiguous near-equal [start, end) ranges of the flat parameter vector, one per server."""
    base, extra = divmod(n, shards)
    out, start = [], 0
    for s in range(shards):
        end = start + base + (1 if s < extra else 0)
        out.append((start, end))
        start = end
    return out


class ParameterServer(Strategy):
    """Push gradients, server(s) apply SGD, pull weights; sync or async, 1..S servers."""

    name = "ps"
    sync: ClassVar[bool] = True

    def __init__(self, model: nn.Module, **kw: Any) -> None:
        super().__init__(model, **kw)
        import torch.distributed as dist

        self.dist = dist
        if self.layout.servers < 1:
            raise ValueError(f"{self.name} needs at least 1 server, got {self.layout.servers}")
        if self.layout.servers > self.n_params:
            raise ValueError(f"{self.layout.servers} servers for {self.n_params} parameters")
        if not self.sync and not any_source_ok(group_backend()):
            raise ValueError(f"{self.name}: the server receives from any worker, which NCCL "
                             f"cannot; use the backend 'cpu:gloo,cuda:nccl' (gloo carries the "
                             f"headers), not {group_backend()!r}")
        self.bounds = shard_bounds(self.n_params, self.layout.servers)
        dtype = self.params[0].dtype
        flat = flat_params(model)  # on the model's device: payloads go where it computes
        self.meta = group_meta_device()  # headers: CPU over gloo beside NCCL
        if self.is_worker:
            self.gbuf = torch.empty_like(flat)
            self.wbuf = torch.empty_like(flat)
            self.versions = [0] * self.layout.servers
            self.push_hdr = [self._header() for _ in self.bounds]
            self.pull_hdr = [self._header() for _ in self.bounds]
        else:
            self.shard_index = self.rank - self.layout.workers
            a, b = self.bounds[self.shard_index]
            # Same seed, same init on every rank: the server starts from the workers' weights.
            self.w = nn.Parameter(flat[a:b].clone())
            self.opt = self._optimizer([self.w])
            self.version = 0
            self.gbufs = [torch.empty(b - a, dtype=dtype, device=flat.device)
                          for _ in range(self.layout.workers)]

    def _header(self, *values: int) -> torch.Tensor:
        """A 2 x int64 header on the metadata device (zeros, or the given values)."""
        return torch.tensor(values or (0, 0), dtype=torch.int64, device=self.meta)

    # -- worker side
    def step(self, x: torch.Tensor, y: torch.Tensor) -> StepStats:
        dist, n_srv = self.dist, self.layout.server_ranks
        self._sync()
        t0 = time.perf_counter()
        loss = self._forward_backward(self.model, x, y)
        self._sync()
        t1 = time.perf_counter()
        torch.cat([p.grad.reshape(-1) for p in self.params], out=self.gbuf)
        works, moved = [], []
        for s, (a, b) in enumerate(self.bounds):
            hdr = self.push_hdr[s]
            hdr[0], hdr[1] = GRAD, self.versions[s]
            works.append(dist.isend(hdr, n_srv[s], tag=TAG_PUSH_HDR))
            works.append(dist.isend(self.gbuf[a:b], n_srv[s], tag=TAG_PUSH))
            moved.append((n_srv[s], HEADER_BYTES + _nbytes(self.gbuf[a:b]),
                          HEADER_BYTES + _nbytes(self.wbuf[a:b])))
        for s, (a, b) in enumerate(self.bounds):
            works.append(dist.irecv(self.pull_hdr[s], n_srv[s], tag=TAG_PULL_HDR))
            works.append(dist.irecv(self.wbuf[a:b], n_srv[s], tag=TAG_PULL))
        sent, recv = sum(m[1] for m in moved), sum(m[2] for m in moved)
        _wait(works, self.timeout_s, f"{self.name} push/pull on worker {self.rank}")
        self._sync()
        t2 = time.perf_counter()
        staleness = []
        for s, hdr in enumerate(self.pull_hdr):
            self.versions[s] = int(hdr[0])
            staleness.append(int(hdr[1]))
        with torch.no_grad():
            offset = 0
            for p in self.params:
                n = p.numel()
                p.copy_(self.wbuf[offset:offset + n].view_as(p))
                offset += n
        self._sync()
        t3 = time.perf_counter()
        # Push/pull blocks the worker: all of its communication time is exposed.
        return StepStats(loss=loss, compute_s=t1 - t0, comm_s=t2 - t1, comm_wait_s=t2 - t1,
                         update_s=t3 - t2, step_s=t3 - t0, bytes_sent=sent, bytes_recv=recv,
                         images=len(x), staleness=staleness if not self.sync else [],
                         **tier_fields(self.rank, moved))

    def end_chunk(self) -> None:
        works = []
        for s, srv in enumerate(self.layout.server_ranks):
            hdr = self.push_hdr[s]
            hdr[0], hdr[1] = STOP, self.versions[s]
            works.append(self.dist.isend(hdr, srv, tag=TAG_PUSH_HDR))
        _wait(works, self.timeout_s, f"{self.name} stop from worker {self.rank}")

    def stop_for_dead(self, count: int) -> None:
        """A live worker sends each server `count` STOPs on behalf of workers that died before
        their chunk's STOP (the server counts STOPs, not senders), so its serve loop ends
        (async PS going on without them: ddlstudy.train.trainer)."""
        hdrs = [self._header(STOP, v) for v in self.versions]
        works = [self.dist.isend(hdrs[s], srv, tag=TAG_PUSH_HDR)
                 for s, srv in enumerate(self.layout.server_ranks) for _ in range(count)]
        _wait(works, self.timeout_s, f"{self.name} stop for dead workers from {self.rank}")

    # -- server side
    def _apply(self, grad: torch.Tensor) -> None:
        self.w.grad = grad
        self.opt.step()
        self.version += 1

    def _reply(self, worker: int, staleness: int) -> list[Any]:
        hdr = self._header(self.version, staleness)
        return [self.dist.isend(hdr, worker, tag=TAG_PULL_HDR),
                self.dist.isend(self.w.detach(), worker, tag=TAG_PULL)]

    def serve(self) -> list[StepStats]:
        if self.is_worker:
            return super().serve()
        return self._serve_sync() if self.sync else self._serve_async()

    def _serve_sync(self) -> list[StepStats]:
        dist, n = self.dist, self.layout.workers
        rows: list[StepStats] = []
        hdrs = [self._header() for _ in range(n)]
        shard_bytes = _nbytes(self.w)
        while True:
            t0 = time.perf_counter()
            _wait([dist.irecv(hdrs[w], w, tag=TAG_PUSH_HDR) for w in range(n)], self.timeout_s,
                  f"server {self.rank} waiting for pushes")
            kinds = [int(h[0]) for h in hdrs]
            if chunk_over(kinds, STOP, self.rank):
                return rows
            t1 = time.perf_counter()
            _wait([dist.irecv(self.gbufs[w], w, tag=TAG_PUSH) for w in range(n)], self.timeout_s,
                  f"server {self.rank} receiving gradients")
            self._sync()
            t2 = time.perf_counter()
            with torch.no_grad():
                grad = self.gbufs[0].clone()
                for g in self.gbufs[1:]:
                    grad.add_(g)
                grad.div_(n)
            self._apply(grad)
            self._sync()
            t3 = time.perf_counter()
            works = []
            for w in range(n):
                works += self._reply(w, 0)
            _wait(works, self.timeout_s, f"server {self.rank} sending weights")
            self._sync()
            t4 = time.perf_counter()
            rows.append(StepStats(comm_s=(t2 - t1) + (t4 - t3), update_s=t3 - t2, idle_s=t1 - t0,
                                  step_s=t4 - t1, bytes_recv=n * (HEADER_BYTES + shard_bytes),
                                  bytes_sent=n * (HEADER_BYTES + shard_bytes),
                                  **tier_fields(self.rank, [(w, HEADER_BYTES + shard_bytes,
                                                             HEADER_BYTES + shard_bytes)
                                                            for w in range(n)])))

    def _serve_async(self) -> list[StepStats]:
        dist, n = self.dist, self.layout.workers
        rows: list[StepStats] = []
        hdr = self._header()
        shard_bytes = _nbytes(self.w)
        active = n
        while active:
            t0 = time.perf_counter()
            # Blocking receive from *any* worker: whoever pushes first is served first, and the
            # server sleeps in gloo instead of spinning on the cores the workers need.
            src = dist.recv(hdr, src=None, tag=TAG_PUSH_HDR)
            kind, version = int(hdr[0]), int(hdr[1])
            if kind == STOP:
                active -= 1
                continue
            t1 = time.perf_counter()
            grad = self.gbufs[src]
            _wait([dist.irecv(grad, src, tag=TAG_PUSH)], self.timeout_s,
                  f"server {self.rank} receiving a gradient from worker {src}")
            self._sync()
            t2 = time.perf_counter()
            staleness = self.version - version
            self._apply(grad)
            self._sync()
            t3 = time.perf_counter()
            # Wait for the send: the next update must not change weights still on the wire.
            _wait(self._reply(src, staleness), self.timeout_s,
                  f"server {self.rank} sending weights to worker {src}")
            self._sync()
            t4 = time.perf_counter()
            rows.append(StepStats(comm_s=(t2 - t1) + (t4 - t3), update_s=t3 - t2, idle_s=t1 - t0,
                                  step_s=t4 - t1, bytes_recv=HEADER_BYTES + shard_bytes,
                                  bytes_sent=HEADER_BYTES + shard_bytes, staleness=[staleness],
                                  source=src,
                                  **tier_fields(self.rank, [(src, HEADER_BYTES + shard_bytes,
                                                             HEADER_BYTES + shard_bytes)])))
        return rows


class PSSync(ParameterServer):
    name = "ps_sync"
    sync = True


class PSAsync(ParameterServer):
    name = "ps_async"
    sync = False


class PSSharded(ParameterServer):
    name = "ps_sharded"
    sync = True
