"""How gradients meet: one interface, one real implementation per data-parallel strategy.

Rank layout (all strategies): workers are ranks 0..N-1 and parameter servers, when a strategy has
them, are the *extra* ranks N..N+S-1 of the same process group. Worker ranks then equal data-shard
indices whatever the strategy, worker 0 is always the chief (it evaluates, its weights are the
run's), and a PS run simply needs N+S engines.

- `single`: one process, plain SGD; the baseline every other strategy must reproduce.
- `ps_sync`, `ps_sharded`: as in Shi 2019's Figure 2.5 - each worker pushes its gradient, the
  server(s) average the N gradients and apply SGD, each worker pulls the new weights. With S
  servers (`ps_sharded`, S >= 2) server s owns one contiguous 1/S of the flattened parameters.
- `ps_async`: the server applies each worker's gradient as soon as it arrives (receive from any
  worker), bumps its version and sends that worker the new weights. The staleness of an update
  is the server's version when it is applied minus the version the worker computed it on.
- `allreduce`: gradients packed into buckets of `bucket_mb`, each bucket all-reduced (mean) by a
  `ddlstudy.collectives` algorithm; with `overlap=True` a bucket is launched from autograd hooks
  the moment its last gradient is ready and reduced on a communication thread while backward
  goes on; `overlap=False` reduces the same buckets after backward.
- `ddp`: torch DistributedDataParallel (gloo/NCCL all-reduce, its own bucketing and overlap),
  the reference the hand-written strategies are measured against.

Compute replay (`Strategy.set_replay`): a worker waits a reference device's forward + backward
time instead of computing, and then holds gradients of the model's real sizes (deterministic
values, see `replay_gradients`). The first 1 - BACKWARD_SHARE of the wait stands for forward;
over the rest the gradients become ready one tensor at a time in reverse parameter order, at
evenly spaced instants, each announced through `_grad_ready` - which the overlapped all-reduce
uses exactly like its autograd hook, so buckets still launch while "backward" goes on.
Everything after the wait (packing, communication, the optimizer step) is real.

PS wire protocol (torch.distributed point-to-point, tags keep the streams apart): a worker sends
a header `[kind, version]` (int64) then, for a gradient, its shard; the server answers a
gradient with a header `[version, staleness]` and the shard's new weights. At the end of each
chunk of steps every worker sends a STOP header to every server, which ends the server's serve
loop; the trainer starts the next loop with the next chunk. Headers are 16 bytes each way and
are counted in the bytes like the payload (they are on the wire too).
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

STRATEGIES = ("single", "ps_sync", "ps_async", "ps_sharded", "allreduce", "ddp")
PS_STRATEGIES = ("ps_sync", "ps_async", "ps_sharded")
DEFAULT_SERVERS = {"ps_sync": 1, "ps_async": 1, "ps_sharded": 2}
# Frameworks (ddlstudy.frameworks): horovod is a Strategy (loaded lazily, see _horovod); the TF
# ones run under their own driver (trainer.train hands them over), so they have no class here.
STRATEGIES += ("horovod", "tf_ps_sync", "tf_ps_async", "tf_allreduce")
PS_STRATEGIES += ("tf_ps_sync", "tf_ps_async")
DEFAULT_SERVERS.update(tf_ps_sync=1, tf_ps_async=1)
DEFAULT_TIMEOUT_S = 120.0
# Backward's share of a step's forward + backward (backward costs about twice forward).
BACKWARD_SHARE = 2 / 3

# PS message kinds and tags.
GRAD, STOP = 1, 2
TAG_PUSH_HDR, TAG_PUSH, TAG_PULL_HDR, TAG_PULL = 101, 102, 103, 104
HEADER_BYTES = 2 * 8

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass
class StepStats:
    """One step on one rank (a server's row is one update it applied).

    compute_s: forward + backward (for ddp this includes the all-reduce wait DDP does inside
    backward); comm_s: time communicating (for overlapped all-reduce the communication thread's
    busy time, which runs *during* compute); comm_wait_s: time the worker sat waiting for
    communication after backward (the exposed part); update_s: unpacking + optimizer step;
    idle_s: a server waiting for the next push.
    """

    loss: float = math.nan
    compute_s: float = 0.0
    comm_s: float = 0.0
    comm_wait_s: float = 0.0
    update_s: float = 0.0
    idle_s: float = 0.0
    step_s: float = 0.0
    bytes_sent: int = 0
    bytes_recv: int = 0
    images: int = 0
    staleness: list[int] = field(default_factory=list)
    source: int = -1  # async server: the worker whose gradient this update applied

    def as_row(self) -> dict[str, Any]:
        row = {k: v for k, v in self.__dict__.items() if k != "staleness"}
        row["staleness"] = max(self.staleness) if self.staleness else math.nan
        return row


@dataclass(frozen=True)
class Layout:
    """Which rank does what: workers 0..N-1, servers N..N+S-1."""

    workers: int
    servers: int = 0

    @property
    def world_size(self) -> int:
        return self.workers + self.servers

    def role(self, rank: int) -> str:
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} outside world of {self.world_size}")
        return "worker" if rank < self.workers else "server"

    @property
    def server_ranks(self) -> list[int]:
        return list(range(self.workers, self.world_size))


def servers_for(strategy: str, servers: int | None) -> int:
    """Server processes a strategy runs with: 0 unless it is a PS; PS default 1 (sharded 2)."""
    if strategy not in PS_STRATEGIES:
        return 0
    return DEFAULT_SERVERS[strategy] if servers is None else int(servers)


def flat_params(model: nn.Module) -> torch.Tensor:
    """All trainable parameters as one flat vector (a copy): what a test compares."""
    with torch.no_grad():
        return torch.cat([p.detach().reshape(-1) for p in _trainable(model)])


def _trainable(model: nn.Module) -> list[nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


def _wait(works: Sequence[Any], timeout_s: float, what: str) -> None:
    import datetime as dt

    for w in works:
        try:
            w.wait(timeout=dt.timedelta(seconds=timeout_s))
        except RuntimeError as err:
            raise TimeoutError(f"{what} did not complete within {timeout_s:g} s (a peer failed or "
                               f"is stuck): {err}") from None


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def replay_gradients(params: Sequence[torch.Tensor], seed: int, rank: int) -> list[torch.Tensor]:
    """The gradients a replaying worker reports: one seeded draw shared by all ranks, times
    (1 + rank), so the N-worker mean is the draw x (N + 1) / 2 - a checkable average."""
    gen = torch.Generator().manual_seed(seed * 7919 + 17)
    return [torch.randn(p.shape, generator=gen, dtype=p.dtype).mul_(1e-3 * (1 + rank))
            .to(p.device) for p in params]


def _sleep_until(deadline: float) -> None:
    """time.sleep to a perf_counter deadline (absolute, so many short waits do not drift)."""
    while True:
        left = deadline - time.perf_counter()
        if left <= 0:
            return
        time.sleep(left)


# ----------------------------------------------------------------------------- the interface
class Strategy:
    """A rank's part in one strategy. Workers call `step` per batch and `end_chunk` after a run
    of steps; servers call `serve`, which returns when every worker has sent STOP."""

    name: ClassVar[str] = ""

    def __init__(self, model: nn.Module, *, rank: int = 0, layout: Layout | None = None,
                 lr: float = 1e-4, momentum: float = 0.0, weight_decay: float = 0.0,
                 loss_fn: LossFn = F.cross_entropy, timeout_s: float = DEFAULT_TIMEOUT_S,
                 **_: Any) -> None:
        self.model = model
        self.rank = rank
        self.layout = layout or Layout(1)
        self.role = self.layout.role(rank)
        self.lr, self.momentum, self.weight_decay = lr, momentum, weight_decay
        self.loss_fn = loss_fn
        self.timeout_s = timeout_s
        self.params = _trainable(model)
        self.n_params = sum(p.numel() for p in self.params)
        self.replay_s: float | None = None
        self._replay_grads: list[torch.Tensor] = []

    @property
    def is_worker(self) -> bool:
        return self.role == "worker"

    @property
    def module(self) -> nn.Module:
        """The plain model (for evaluation and weight comparison)."""
        return self.model

    def _optimizer(self, params: Sequence[torch.Tensor]) -> torch.optim.Optimizer:
        return torch.optim.SGD(params, lr=self.lr, momentum=self.momentum,
                               weight_decay=self.weight_decay)

    def set_replay(self, seconds: float, seed: int = 0) -> None:
        """Replay compute: every step waits `seconds` instead of running forward + backward."""
        if not seconds >= 0:
            raise ValueError(f"replay time must be >= 0 s, got {seconds!r}")
        self.replay_s = float(seconds)
        if self.is_worker and not self._replay_grads:
            self._replay_grads = replay_gradients(self.params, seed, self.rank)

    def _grad_ready(self, p: torch.Tensor) -> None:
        """Replay's stand-in for autograd's post-accumulate hook (strategies that hook override)."""

    def _replay(self) -> float:
        """Wait the reference compute time; gradients appear in reverse order over the backward
        share of it. Returns NaN: no forward pass, no loss."""
        t0 = time.perf_counter()
        total = self.replay_s or 0.0
        forward_end = t0 + total * (1 - BACKWARD_SHARE)
        _sleep_until(forward_end)
        n = len(self.params)
        pairs = zip(reversed(self.params), reversed(self._replay_grads), strict=True)
        for i, (p, g) in enumerate(pairs):
            _sleep_until(forward_end + total * BACKWARD_SHARE * (i + 1) / n)
            if p.grad is None:
                p.grad = g.clone()
            else:
                p.grad.copy_(g)
            self._grad_ready(p)
        return math.nan

    def _forward_backward(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
        if self.replay_s is not None:
            return self._replay()
        for p in self.params:
            p.grad = None
        loss = self.loss_fn(model(x), y)
        loss.backward()
        return float(loss.detach())

    def step(self, x: torch.Tensor, y: torch.Tensor) -> StepStats:
        raise NotImplementedError

    def end_chunk(self) -> None:
        """Workers: tell the servers this chunk of steps is over (no-op without servers)."""

    def serve(self) -> list[StepStats]:
        raise RuntimeError(f"{self.name}: rank {self.rank} is a {self.role}, it has no serve loop")

    def close(self) -> None:
        """Release hooks and threads."""


class Single(Strategy):
    """One process, plain SGD: the reference result for every other strategy."""

    name = "single"

    def __init__(self, model: nn.Module, **kw: Any) -> None:
        super().__init__(model, **kw)
        self.opt = self._optimizer(self.params)

    def step(self, x: torch.Tensor, y: torch.Tensor) -> StepStats:
        t0 = time.perf_counter()
        loss = self._forward_backward(self.model, x, y)
        t1 = time.perf_counter()
        self.opt.step()
        t2 = time.perf_counter()
        return StepStats(loss=loss, compute_s=t1 - t0, update_s=t2 - t1, step_s=t2 - t0,
                         images=len(x))


# ----------------------------------------------------------------------------- parameter server
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
        self.bounds = shard_bounds(self.n_params, self.layout.servers)
        dtype = self.params[0].dtype
        flat = flat_params(model)
        if self.is_worker:
            self.gbuf = torch.empty_like(flat)
            self.wbuf = torch.empty_like(flat)
            self.versions = [0] * self.layout.servers
            self.push_hdr = [torch.zeros(2, dtype=torch.int64) for _ in self.bounds]
            self.pull_hdr = [torch.zeros(2, dtype=torch.int64) for _ in self.bounds]
        else:
            self.shard_index = self.rank - self.layout.workers
            a, b = self.bounds[self.shard_index]
            # Same seed, same init on every rank: the server starts from the workers' weights.
            self.w = nn.Parameter(flat[a:b].clone())
            self.opt = self._optimizer([self.w])
            self.version = 0
            self.gbufs = [torch.empty(b - a, dtype=dtype) for _ in range(self.layout.workers)]

    # -- worker side
    def step(self, x: torch.Tensor, y: torch.Tensor) -> StepStats:
        dist, n_srv = self.dist, self.layout.server_ranks
        t0 = time.perf_counter()
        loss = self._forward_backward(self.model, x, y)
        t1 = time.perf_counter()
        torch.cat([p.grad.reshape(-1) for p in self.params], out=self.gbuf)
        works, sent, recv = [], 0, 0
        for s, (a, b) in enumerate(self.bounds):
            hdr = self.push_hdr[s]
            hdr[0], hdr[1] = GRAD, self.versions[s]
            works.append(dist.isend(hdr, n_srv[s], tag=TAG_PUSH_HDR))
            works.append(dist.isend(self.gbuf[a:b], n_srv[s], tag=TAG_PUSH))
            sent += HEADER_BYTES + _nbytes(self.gbuf[a:b])
        for s, (a, b) in enumerate(self.bounds):
            works.append(dist.irecv(self.pull_hdr[s], n_srv[s], tag=TAG_PULL_HDR))
            works.append(dist.irecv(self.wbuf[a:b], n_srv[s], tag=TAG_PULL))
            recv += HEADER_BYTES + _nbytes(self.wbuf[a:b])
        _wait(works, self.timeout_s, f"{self.name} push/pull on worker {self.rank}")
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
        t3 = time.perf_counter()
        # Push/pull blocks the worker: all of its communication time is exposed.
        return StepStats(loss=loss, compute_s=t1 - t0, comm_s=t2 - t1, comm_wait_s=t2 - t1,
                         update_s=t3 - t2, step_s=t3 - t0, bytes_sent=sent, bytes_recv=recv,
                         images=len(x), staleness=staleness if not self.sync else [])

    def end_chunk(self) -> None:
        works = []
        for s, srv in enumerate(self.layout.server_ranks):
            hdr = self.push_hdr[s]
            hdr[0], hdr[1] = STOP, self.versions[s]
            works.append(self.dist.isend(hdr, srv, tag=TAG_PUSH_HDR))
        _wait(works, self.timeout_s, f"{self.name} stop from worker {self.rank}")

    # -- server side
    def _apply(self, grad: torch.Tensor) -> None:
        self.w.grad = grad
        self.opt.step()
        self.version += 1

    def _reply(self, worker: int, staleness: int) -> list[Any]:
        hdr = torch.tensor([self.version, staleness], dtype=torch.int64)
        return [self.dist.isend(hdr, worker, tag=TAG_PULL_HDR),
                self.dist.isend(self.w.detach(), worker, tag=TAG_PULL)]

    def serve(self) -> list[StepStats]:
        if self.is_worker:
            return super().serve()
        return self._serve_sync() if self.sync else self._serve_async()

    def _serve_sync(self) -> list[StepStats]:
        dist, n = self.dist, self.layout.workers
        rows: list[StepStats] = []
        hdrs = [torch.zeros(2, dtype=torch.int64) for _ in range(n)]
        shard_bytes = _nbytes(self.w)
        while True:
            t0 = time.perf_counter()
            _wait([dist.irecv(hdrs[w], w, tag=TAG_PUSH_HDR) for w in range(n)], self.timeout_s,
                  f"server {self.rank} waiting for pushes")
            kinds = [int(h[0]) for h in hdrs]
            if all(k == STOP for k in kinds):
                return rows
            if any(k == STOP for k in kinds):
                raise RuntimeError(f"server {self.rank}: workers out of step (kinds {kinds}): "
                                   "every worker must run the same number of steps")
            t1 = time.perf_counter()
            _wait([dist.irecv(self.gbufs[w], w, tag=TAG_PUSH) for w in range(n)], self.timeout_s,
                  f"server {self.rank} receiving gradients")
            t2 = time.perf_counter()
            with torch.no_grad():
                grad = self.gbufs[0].clone()
                for g in self.gbufs[1:]:
                    grad.add_(g)
                grad.div_(n)
            self._apply(grad)
            t3 = time.perf_counter()
            works = []
            for w in range(n):
                works += self._reply(w, 0)
            _wait(works, self.timeout_s, f"server {self.rank} sending weights")
            t4 = time.perf_counter()
            rows.append(StepStats(comm_s=(t2 - t1) + (t4 - t3), update_s=t3 - t2, idle_s=t1 - t0,
                                  step_s=t4 - t1, bytes_recv=n * (HEADER_BYTES + shard_bytes),
                                  bytes_sent=n * (HEADER_BYTES + shard_bytes)))

    def _serve_async(self) -> list[StepStats]:
        dist, n = self.dist, self.layout.workers
        rows: list[StepStats] = []
        hdr = torch.zeros(2, dtype=torch.int64)
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
            t2 = time.perf_counter()
            staleness = self.version - version
            self._apply(grad)
            t3 = time.perf_counter()
            # Wait for the send: the next update must not change weights still on the wire.
            _wait(self._reply(src, staleness), self.timeout_s,
                  f"server {self.rank} sending weights to worker {src}")
            t4 = time.perf_counter()
            rows.append(StepStats(comm_s=(t2 - t1) + (t4 - t3), update_s=t3 - t2, idle_s=t1 - t0,
                                  step_s=t4 - t1, bytes_recv=HEADER_BYTES + shard_bytes,
                                  bytes_sent=HEADER_BYTES + shard_bytes, staleness=[staleness],
                                  source=src))
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


# ----------------------------------------------------------------------------- all-reduce
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


class AllReduce(Strategy):
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

    def _reduce(self, bucket: _Bucket) -> None:
        t = time.perf_counter()
        traffic = self.collectives.all_reduce(bucket.buf, self.algorithm, op="mean",
                                              group=self.group, timeout_s=self.timeout_s,
                                              check=self._steps == 0)
        dt = time.perf_counter() - t
        with self._lock:
            self._busy_s += dt
            self._sent += traffic.sent_bytes
            self._recv += traffic.recv_bytes

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

    def _on_grad(self, p: torch.Tensor) -> None:
        """Autograd hook: pack this gradient; launch every bucket that is now complete, in
        bucket order so all ranks issue the same collectives in the same sequence."""
        bucket, i = self._where[id(p)]
        a, b = bucket.offsets[i]
        bucket.buf[a:b].copy_(p.grad.reshape(-1))
        bucket.pending -= 1
        if self.overlap:
            self._launch_ready()

    def _grad_ready(self, p: torch.Tensor) -> None:
        self._on_grad(p)

    def _launch_ready(self, force: bool = False) -> None:
        while self._next < len(self.buckets):
            bucket = self.buckets[self._next]
            if bucket.pending > 0 and not force:
                return
            if bucket.pending > 0:  # parameters unused this step: their gradient is zero
                for p, (a, b) in zip(bucket.params, bucket.offsets, strict=True):
                    if p.grad is None:
                        bucket.buf[a:b].zero_()
            self._todo.put(bucket)
            self._next += 1

    def step(self, x: torch.Tensor, y: torch.Tensor) -> StepStats:
        self._reset_counters()
        self._next = 0
        for bucket in self.buckets:
            bucket.pending = len(bucket.params)
        t0 = time.perf_counter()
        loss = self._forward_backward(self.model, x, y)
        t1 = time.perf_counter()
        if self.overlap:
            self._launch_ready(force=True)
            for _ in self.buckets:
                try:
                    err = self._done.get(timeout=self.timeout_s + 30)
                except queue.Empty:
                    raise TimeoutError(f"allreduce: buckets not reduced within "
                                       f"{self.timeout_s + 30:g} s") from None
                if err is not None:
                    raise err
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
        t3 = time.perf_counter()
        self._steps += 1
        comm = self._busy_s if self.overlap else t2 - t1
        return StepStats(loss=loss, compute_s=t1 - t0, comm_s=comm, comm_wait_s=t2 - t1,
                         update_s=t3 - t2, step_s=t3 - t0, bytes_sent=self._sent,
                         bytes_recv=self._recv, images=len(x))

    def close(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
        if self._thread is not None:
            self._todo.put(None)
            self._thread.join(timeout=10)
            self._thread = None


# ----------------------------------------------------------------------------- torch DDP
class _DDPCommState:
    """What the DDP comm hook counts: bytes handed to all-reduce and its busy time."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.nbytes = 0
        self.busy_s = 0.0
        self.last_done = 0.0


def _ddp_allreduce_hook(state: _DDPCommState, bucket: Any) -> torch.futures.Future:
    """torch's default allreduce hook (sum, then divide) plus counting.

    Busy time: each bucket from max(its launch, the previous bucket's completion) to its
    completion, since the backend runs them one after another.
    """
    import torch.distributed as dist

    buf = bucket.buffer()
    launched = time.perf_counter()
    with state.lock:
        state.nbytes += _nbytes(buf)
    fut = dist.all_reduce(buf, async_op=True).get_future()

    def done(f: torch.futures.Future) -> torch.Tensor:
        now = time.perf_counter()
        with state.lock:
            state.busy_s += now - max(launched, state.last_done)
            state.last_done = now
        return f.value()[0].div_(state.world_size)

    return fut.then(done)


def _real_hook_annotations() -> None:
    """DDP compares the hook's annotations with the real classes; `from __future__ import
    annotations` made them strings, so put the objects back."""
    import torch.distributed as dist

    if dist.is_available():
        _ddp_allreduce_hook.__annotations__.update(
            bucket=dist.GradBucket, state=_DDPCommState,
            **{"return": torch.futures.Future[torch.Tensor]})


class _ReplayClock:
    """The instants a replayed backward hands out gradients: n evenly spaced over `span`."""

    def __init__(self, n: int) -> None:
        self.n, self.t0, self.span, self.i = n, 0.0, 0.0, 0

    def start(self, t0: float, span: float) -> None:
        self.t0, self.span, self.i = t0, span, 0

    def wait_next(self) -> None:
        self.i += 1
        _sleep_until(self.t0 + self.span * min(self.i, self.n) / self.n)


class _ReplayGrad(torch.autograd.Function):
    """Forward: a zero scalar tied to parameter p; backward: waits the clock, returns p's
    replayed gradient (so DDP's post-accumulate hooks see it as a real one)."""

    @staticmethod
    def forward(ctx: Any, p: torch.Tensor, grad: torch.Tensor, clock: _ReplayClock
                ) -> torch.Tensor:
        ctx.grad, ctx.clock = grad, clock
        return p.new_zeros(())

    @staticmethod
    def backward(ctx: Any, _out: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        ctx.clock.wait_next()
        return ctx.grad.clone(), None, None


class _DDPReplayModule(nn.Module):
    """The model's parameters, and a forward that costs nothing: one _ReplayGrad per parameter,
    in parameter order, so autograd runs their backwards in reverse order as a real one would."""

    def __init__(self, model: nn.Module, params: Sequence[torch.Tensor],
                 grads: Sequence[torch.Tensor], clock: _ReplayClock) -> None:
        super().__init__()
        self.model, self._params, self._grads, self._clock = model, list(params), list(grads), clock

    def forward(self, _x: torch.Tensor) -> torch.Tensor:
        total = torch.zeros(())
        for p, g in zip(self._params, self._grads, strict=True):
            total = total + _ReplayGrad.apply(p, g, self._clock)
        return total


class DDP(Strategy):
    """torch DistributedDataParallel: the library reference (bucketing + overlap in C++).

    Bytes are those of the gradient buckets DDP hands to all-reduce, counted in a comm hook,
    times the ring factor 2(N-1)/N (the backend's own algorithm is not observable from here).
    forward_sync_buffers=False: like the hand-written all-reduce (and Horovod), BatchNorm running
    statistics stay local, so both move only gradients.
    """

    name = "ddp"

    def __init__(self, model: nn.Module, *, bucket_mb: float = 25.0, **kw: Any) -> None:
        super().__init__(model, **kw)
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        self.world = dist.get_world_size() if dist.is_initialized() else 1
        if not dist.is_initialized():
            raise RuntimeError("ddp needs a torch.distributed process group")
        self.ddp = DistributedDataParallel(model, bucket_cap_mb=bucket_mb,
                                           forward_sync_buffers=False)
        self.state = _DDPCommState(self.world)
        _real_hook_annotations()
        self.ddp.register_comm_hook(self.state, _ddp_allreduce_hook)
        self.opt = self._optimizer(self.params)

    def set_replay(self, seconds: float, seed: int = 0) -> None:
        """Replay through DDP's own reducer: DDP is rebuilt around a stand-in module whose
        backward hands each parameter its replayed gradient at the `_replay` instants, so DDP's
        C++ buckets and hooks fire as they would after a real backward (collective: every rank)."""
        from torch.nn.parallel import DistributedDataParallel

        super().set_replay(seconds, seed)
        self._clock = _ReplayClock(len(self.params))
        stand_in = _DDPReplayModule(self.model, self.params, self._replay_grads, self._clock)
        bucket_mb = self.ddp.bucket_bytes_cap / (1024 * 1024)
        del self.ddp  # its reducer unhooks the parameters
        self.ddp = DistributedDataParallel(stand_in, bucket_cap_mb=bucket_mb,
                                           forward_sync_buffers=False)
        self.ddp.register_comm_hook(self.state, _ddp_allreduce_hook)

    def _forward_backward(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
        if self.replay_s is None:
            return super()._forward_backward(model, x, y)
        total = self.replay_s
        forward_end = time.perf_counter() + total * (1 - BACKWARD_SHARE)
        _sleep_until(forward_end)
        self._clock.start(forward_end, total * BACKWARD_SHARE)
        self.ddp(x).backward()
        return math.nan

    def step(self, x: torch.Tensor, y: torch.Tensor) -> StepStats:
        self.state.reset()
        t0 = time.perf_counter()
        loss = self._forward_backward(self.ddp, x, y)
        t1 = time.perf_counter()
        self.opt.step()
        t2 = time.perf_counter()
        n = self.world
        wire = 2 * (n - 1) * self.state.nbytes // n if n > 1 else 0
        return StepStats(loss=loss, compute_s=t1 - t0, comm_s=self.state.busy_s,
                         comm_wait_s=math.nan, update_s=t2 - t1, step_s=t2 - t0,
                         bytes_sent=wire, bytes_recv=wire, images=len(x))


# ----------------------------------------------------------------------------- factory
def _horovod(model: nn.Module, **kw: Any) -> Strategy:
    """ddlstudy.frameworks.horovod.Horovod, imported on use (it subclasses Strategy)."""
    from ddlstudy.frameworks.horovod import Horovod

    return Horovod(model, **kw)


_CLASSES: dict[str, Any] = {
    "single": Single,
    "ps_sync": PSSync,
    "ps_async": PSAsync,
    "ps_sharded": PSSharded,
    "allreduce": AllReduce,
    "ddp": DDP,
    "horovod": _horovod,
}


def make_strategy(name: str, model: nn.Module, *, rank: int = 0, workers: int = 1,
                  servers: int | None = None, **kw: Any) -> Strategy:
    """The strategy object for this rank (worker or server), with the model already on device.

    Keywords: lr, momentum, weight_decay, loss_fn, timeout_s; allreduce: algorithm, bucket_mb,
    overlap; ddp: bucket_mb. Unused keywords are ignored so one config serves every strategy.
    """
    if name not in _CLASSES:
        raise ValueError(f"unknown strategy {name!r}; valid: {', '.join(STRATEGIES)}")
    layout = Layout(workers, servers_for(name, servers))
    if name == "single" and workers != 1:
        raise ValueError(f"strategy single runs on one worker, got workers={workers}")
    cls = _CLASSES[name]
    if cls is not AllReduce:
        kw = {k: v for k, v in kw.items() if k not in ("algorithm", "overlap", "group")}
    if cls not in (AllReduce, DDP):
        kw.pop("bucket_mb", None)
    return cls(model, rank=rank, layout=layout, **kw)
