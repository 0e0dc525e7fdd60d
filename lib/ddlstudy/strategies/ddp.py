"""`ddp`: torch DistributedDataParallel (gloo/NCCL all-reduce, its own bucketing and overlap),
the reference the hand-written strategies are measured against."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from ddlstudy.strategies.base import BACKWARD_SHARE, StepStats, Strategy, _nbytes, _sleep_until


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
    def forward(ctx: Any, p: torch.Tensor, grad: torch.Tensor, clock: _ReplayClock,
                factor: float) -> torch.Tensor:
        ctx.grad, ctx.clock, ctx.factor = grad, clock, factor
        return p.new_zeros(())

    @staticmethod
    def backward(ctx: Any, _out: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        ctx.clock.wait_next()
        return ctx.grad.mul(ctx.factor), None, None, None


class _DDPReplayModule(nn.Module):
    """The model's parameters, and a forward that costs nothing: one _ReplayGrad per parameter,
    in parameter order, so autograd runs their backwards in reverse order as a real one would."""

    def __init__(self, model: nn.Module, params: Sequence[torch.Tensor],
                 grads: Sequence[torch.Tensor], clock: _ReplayClock, factor: float) -> None:
        super().__init__()
        self.model, self._params, self._grads, self._clock = model, list(params), list(grads), clock
        self._factor = factor

    def forward(self, _x: torch.Tensor) -> torch.Tensor:
        total = torch.zeros(())
        for p, g in zip(self._params, self._grads, strict=True):
            total = total + _ReplayGrad.apply(p, g, self._clock, self._factor)
        return total


def _no_buffer_sync() -> dict[str, bool]:
    """DDP's switch for keeping buffers local: forward_sync_buffers=False where torch has it
    (2.13), broadcast_buffers=False on older torch (the GPU machine's 2.11 has only that one)."""
    import inspect

    from torch.nn.parallel import DistributedDataParallel

    names = inspect.signature(DistributedDataParallel.__init__).parameters
    if "forward_sync_buffers" in names:
        return {"forward_sync_buffers": False}
    return {"broadcast_buffers": False}


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
        self.ddp = DistributedDataParallel(model, bucket_cap_mb=bucket_mb, **_no_buffer_sync())
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
        stand_in = _DDPReplayModule(self.model, self.params, self._replay_grads, self._clock,
                                    self._replay_factor)
        bucket_mb = self.ddp.bucket_bytes_cap / (1024 * 1024)
        del self.ddp  # its reducer unhooks the parameters
        self.ddp = DistributedDataParallel(stand_in, bucket_cap_mb=bucket_mb,
                                           **_no_buffer_sync())
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
        loss, compute_s, update_s = self._train_step(self.ddp, x, y)
        n = self.world
        wire = 2 * (n - 1) * self.state.nbytes // n if n > 1 else 0
        return StepStats(loss=loss, compute_s=compute_s, comm_s=self.state.busy_s,
                         comm_wait_s=math.nan, update_s=update_s, step_s=compute_s + update_s,
                         bytes_sent=wire, bytes_recv=wire, images=len(x))
