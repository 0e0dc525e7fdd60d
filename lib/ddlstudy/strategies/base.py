"""What every strategy shares: the `Strategy` interface, per-step `StepStats`, the rank
`Layout`, and compute replay.

Rank layout (all strategies): workers are ranks 0..N-1 and parameter servers, when a strategy has
them, are the *extra* ranks N..N+S-1 of the same process group. Worker ranks then equal data-shard
indices whatever the strategy, worker 0 is always the chief (it evaluates, its weights are the
run's), and a PS run simply needs N+S engines.

Compute replay (`Strategy.set_replay`): a worker waits a reference device's forward + backward
time instead of computing, and then holds gradients of the model's real sizes (deterministic
values, see `replay_gradients`). The first 1 - BACKWARD_SHARE of the wait stands for forward;
over the rest the gradients become ready one tensor at a time in reverse parameter order, at
evenly spaced instants, each announced through `_grad_ready` - which the overlapped all-reduce
uses exactly like its autograd hook, so buckets still launch while "backward" goes on.
Everything after the wait (packing, communication, the optimizer step) is real.

Memory: every rank's replayed gradient is the same seeded draw x (1 + rank), so a worker keeps
the draw and its factor, not its own copy. Engines a local cluster started share one copy of the
draw per host (`REPLAY_SHARE_ENV`, a file in the cluster's run folder mapped by every engine:
the page cache holds it once), which is what lets 32 replaying ResNet-50 engines fit a 23 GB
host (each otherwise holds params, the draw, .grad and buckets: ~4 x the model).
"""

from __future__ import annotations

import fcntl
import hashlib
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

DEFAULT_TIMEOUT_S = 120.0
# Backward's share of a step's forward + backward (backward costs about twice forward).
BACKWARD_SHARE = 2 / 3

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
# A folder the engines of one host share (set by ddlstudy.cluster.engines for local clusters):
# replayed gradients' seeded draw is written there once and mapped by every engine.
REPLAY_SHARE_ENV = "DDLSTUDY_REPLAY_SHARE"


@dataclass
class StepStats:
    """One step on one rank (a server's row is one update it applied).

    compute_s: forward + backward (for ddp this includes the all-reduce wait DDP does inside
    backward); comm_s: time communicating (for overlapped all-reduce the communication thread's
    busy time, which runs *during* compute); comm_wait_s: time the worker sat waiting for
    communication after backward (the exposed part); update_s: unpacking + optimizer step;
    idle_s: a server waiting for the next push; bytes_*_intra / _inter: the same bytes split
    by link tier (to / from a rank of this node or of another, `collectives.placement`), NaN
    where the strategy does not count them per peer.
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
    bytes_sent_intra: float = math.nan
    bytes_sent_inter: float = math.nan
    bytes_recv_intra: float = math.nan
    bytes_recv_inter: float = math.nan
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


def chunk_over(kinds: Sequence[int], stop: int, rank: int) -> bool:
    """A parameter server's view of one round of worker headers: True when every worker sent
    `stop` (the chunk ended), False when none did; RuntimeError when only some did (workers
    ran different numbers of steps)."""
    if all(k == stop for k in kinds):
        return True
    if any(k == stop for k in kinds):
        raise RuntimeError(f"server {rank}: workers out of step (kinds {list(kinds)}): "
                           "every worker must run the same number of steps")
    return False


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def replay_gradients(params: Sequence[torch.Tensor], seed: int, rank: int) -> list[torch.Tensor]:
    """The gradients a replaying worker reports: one seeded draw shared by all ranks, times
    (1 + rank), so the N-worker mean is the draw x (N + 1) / 2 - a checkable average."""
    return [g.mul(1 + rank) for g in replay_draw(params, seed)]


def replay_draw_here(params: Sequence[torch.Tensor], seed: int) -> list[torch.Tensor]:
    """`replay_draw`, shared with the engines of this host where the cluster set a folder for
    it (REPLAY_SHARE_ENV), else private."""
    return replay_draw(params, seed, os.environ.get(REPLAY_SHARE_ENV))


def _draws(params: Sequence[torch.Tensor], seed: int) -> Iterator[torch.Tensor]:
    """The seeded draw (x 1e-3), one CPU tensor per parameter, in parameter order."""
    gen = torch.Generator().manual_seed(seed * 7919 + 17)
    for p in params:
        yield torch.randn(p.shape, generator=gen, dtype=p.dtype).mul_(1e-3)


def replay_draw(params: Sequence[torch.Tensor], seed: int,
                share: str | None = None) -> list[torch.Tensor]:
    """Rank 0's replayed gradients (the seeded draw x 1e-3), one tensor per parameter, on the
    parameters' device. `share`: a folder the engines of this host share; float32 CPU
    parameters then get read-only views of one file there, written by the first engine (under a
    lock) and mapped by all (see the module docstring). Do not write into what it returns."""
    if (not share or not params or any(p.device.type != "cpu" or p.dtype != torch.float32
                                       for p in params)):
        return [g.to(p.device) for p, g in zip(params, _draws(params, seed), strict=True)]
    shapes = repr([tuple(p.shape) for p in params]).encode()
    path = Path(share) / f"replay-draw-{seed}-{hashlib.sha1(shapes).hexdigest()[:16]}.f32"
    n = sum(p.numel() for p in params)
    Path(share).mkdir(parents=True, exist_ok=True)
    with open(f"{path}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists() or path.stat().st_size != 4 * n:
            tmp = path.with_name(f".{path.name}.{os.getpid()}")
            with open(tmp, "wb") as f:
                for g in _draws(params, seed):
                    f.write(g.numpy().tobytes())
            os.replace(tmp, path)
    flat = torch.from_file(str(path), shared=True, size=n, dtype=torch.float32)
    out, at = [], 0
    for p in params:
        out.append(flat[at:at + p.numel()].view(p.shape))
        at += p.numel()
    return out


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
    of steps; servers call `serve`, which returns when every worker has sent STOP. Before rank
    0's `module` is read (evaluation, checkpoint, final weights) every rank calls `sync_model`,
    outside the timed chunks."""

    name: ClassVar[str] = ""
    # True where `module` is only current after `sync_model` (the model is sharded over the
    # workers: fsdp, zero3); the driver then runs `sync_model` before it reads rank 0's model
    syncs_model: ClassVar[bool] = False
    # True where each worker's optimizer holds the state of its own shard only (zero1-3, fsdp):
    # a checkpoint (worker 0's optimizer) cannot carry it: their restore needs momentum 0 (plain
    # SGD keeps no state) and refuses otherwise (ddlstudy.train.rank._engine_restore)
    shards_optimizer: ClassVar[bool] = False

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
        # where this rank computes; on CUDA, `_sync` brackets every timed region
        self.device = self.params[0].device if self.params else torch.device("cpu")
        self.replay_s: float | None = None
        # the seeded draw (shared, read-only) and this rank's factor: its gradient = draw x factor
        self._replay_grads: list[torch.Tensor] = []
        self._replay_factor = 1.0 + rank

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
            self._replay_grads = replay_draw_here(self.params, seed)

    def _sync(self) -> None:
        """On CUDA, wait for queued kernels and NCCL operations before reading the clock
        (ddlstudy.collectives.device.synchronize); a no-op on CPU."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

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
                p.grad = g.mul(self._replay_factor)
            else:
                torch.mul(g, self._replay_factor, out=p.grad)
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

    def _train_step(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor,
                    ) -> tuple[float, float, float]:
        """Forward + backward through `model` (the strategy's wrapper), then `self.opt.step()`,
        with device syncs at both ends: (loss, compute_s, update_s). For strategies whose
        communication happens inside backward (DDP hooks, FSDP) or not at all (single)."""
        self._sync()
        t0 = time.perf_counter()
        loss = self._forward_backward(model, x, y)
        self._sync()
        t1 = time.perf_counter()
        self.opt.step()
        self._sync()
        return loss, t1 - t0, time.perf_counter() - t1

    def step(self, x: torch.Tensor, y: torch.Tensor) -> StepStats:
        raise NotImplementedError

    def end_chunk(self) -> None:
        """Workers: tell the servers this chunk of steps is over (no-op without servers). It runs
        inside the chunk's timed window and wire count: only what training needs belongs here."""

    def sync_model(self) -> None:
        """Make `module` the current full model (on every worker, rank 0's is the one read), for
        evaluation, a checkpoint or the final weights. A collective over all ranks where the
        model is sharded (`syncs_model`); the driver runs it on every rank as an engine call of
        its own, after a chunk's wall time and wire counters were taken, and only before rank
        0's model is read: its time and bytes are in no chunk. No-op by default."""

    def load_weights(self, state: dict[str, torch.Tensor]) -> None:
        """Load a full model state dict (a checkpoint's, rank 0's `module.state_dict()`) into
        what this rank trains, so the next step goes on from it. Default: `module` (the model);
        sharded strategies set their shards from the full tensors (no collective)."""
        self.module.load_state_dict(state)

    def serve(self) -> list[StepStats]:
        raise RuntimeError(f"{self.name}: rank {self.rank} is a {self.role}, it has no serve loop")

    def analytic_tiers(self) -> dict[str, float] | None:
        """This rank's bytes per step by link tier from the algorithm's structure
        ({"bytes_sent_intra": ..., "bytes_sent_inter": ..., "bytes_recv_intra": ...,
        "bytes_recv_inter": ...}), for the records beside the counted ones; None (default):
        the strategy has no such split."""
        return None

    def settings(self) -> dict[str, Any]:
        """The framework's tuning in effect on this rank (summary columns + meta.json), so a
        record says how the framework ran; ddlstudy's own strategies: their config says it."""
        return {}

    def close(self) -> None:
        """Release hooks and threads."""
