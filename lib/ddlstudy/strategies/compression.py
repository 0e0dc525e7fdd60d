"""Compressed gradients through torch's DDP communication hooks
(`torch.distributed.algorithms.ddp_comm_hooks`): `ddp_fp16` and `ddp_bf16` (each bucket cast to
16 bits, all-reduced, cast back) and `ddp_powersgd1/2/4` (PowerSGD, Vogels et al. 2019: per
layer a rank-r P Q^T approximation by one power-iteration step, error feedback and warm start
on, `powerSGD_hook`).

Bytes are what the hooks hand to all-reduce, counted by a stand-in for the hooks' module-level
`torch.distributed` (every `all_reduce` call, whatever thread runs it), times the ring factor
2(N-1)/N (`bytes_source: analytic`, as `ddp`): for PowerSGD the P and Q matrices and the
tensors it leaves uncompressed (1-D ones, and those the rank would not shrink by 2x).
PowerSGD all-reduces plain gradients for its first `start_powerSGD_iter` = 2 steps (torch's
minimum with error feedback, `POWERSGD_PLAIN_STEPS`): a measurement of its bytes needs at least
that many warm-up steps (chapter 11 raises its cells' warm-up to it).
"""

from __future__ import annotations

import math
import threading
from types import ModuleType
from typing import Any, ClassVar

import torch
from torch import nn

from ddlstudy.strategies.base import StepStats, Strategy

POWERSGD_PLAIN_STEPS = 2  # torch's start_powerSGD_iter minimum with error feedback


class _CountingDist:
    """torch.distributed, except that all_reduce adds its tensor's bytes to `nbytes`."""

    def __init__(self, real: ModuleType) -> None:
        self._real = real
        self.lock = threading.Lock()
        self.nbytes = 0

    def all_reduce(self, tensor: torch.Tensor, *args: Any, **kw: Any) -> Any:
        with self.lock:
            self.nbytes += tensor.numel() * tensor.element_size()
        return self._real.all_reduce(tensor, *args, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def powersgd_elements(shapes: list[tuple[int, ...]], rank: int,
                      min_compression_rate: float = 2.0) -> int:
    """Elements torch's powerSGD_hook all-reduces per step (after its plain warm-up steps) for
    gradients of these `shapes`: per tensor viewed as (shape[0], rest), P and Q of
    (rows + cols) x min(rows, cols, rank) when that is under 1 / `min_compression_rate` of
    rows x cols, else the tensor itself (biases always). Why: the counted bytes can be checked
    against the algorithm's own arithmetic (Vogels 2019, Sec. 3), layer by layer."""
    total = 0
    for shape in shapes:
        rows = shape[0] if shape else 1
        cols = math.prod(shape[1:]) if len(shape) > 1 else 1
        r = min(rows, cols, rank)
        compressed = (rows + cols) * r
        total += compressed if compressed * min_compression_rate < rows * cols else rows * cols
    return total


BF16_REFUSAL = ("BF16 all reduce communication hook required CUDA 11+ and NCCL 2.10+ or XPU and "
                "XCCL")


def bf16_missing() -> str | None:
    """torch's bf16_compress_hook runs only on CUDA + NCCL >= 2.10 (or XPU + XCCL); on the
    engines' CPU / gloo it raises TypeError(BF16_REFUSAL) at registration (torch 2.13)."""
    import torch.distributed as dist

    if torch.cuda.is_available() and dist.is_nccl_available():
        return None
    return (f"ddp_bf16 needs CUDA + NCCL 2.10+: on CPU/gloo torch's bf16_compress_hook raises "
            f"TypeError: {BF16_REFUSAL}")


def _no_buffer_sync() -> dict[str, bool]:
    """Keep BatchNorm statistics local (as `ddp`): forward_sync_buffers=False where torch has
    it, else broadcast_buffers=False."""
    import inspect

    from torch.nn.parallel import DistributedDataParallel

    names = inspect.signature(DistributedDataParallel.__init__).parameters
    if "forward_sync_buffers" in names:
        return {"forward_sync_buffers": False}
    return {"broadcast_buffers": False}


def _hook_modules() -> list[ModuleType]:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    return [default_hooks, powerSGD_hook]


class CompressedDDP(Strategy):
    """torch DDP with a compression comm hook; subclasses name the hook."""

    name = "ddp_compressed"
    compression: ClassVar[str] = ""
    rank_r: ClassVar[int] = 0

    def __init__(self, model: nn.Module, *, bucket_mb: float = 25.0, **kw: Any) -> None:
        super().__init__(model, **kw)
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        if not dist.is_initialized():
            raise RuntimeError(f"{self.name} needs a torch.distributed process group")
        self.world = dist.get_world_size()
        self.ddp = DistributedDataParallel(model, bucket_cap_mb=bucket_mb, **_no_buffer_sync())
        self.counter = _CountingDist(dist)
        self._patched = []
        for mod in _hook_modules():
            self._patched.append((mod, mod.dist))
            mod.dist = self.counter  # type: ignore[attr-defined]
        state, hook = self._hook()
        self.ddp.register_comm_hook(state, hook)
        self.opt = self._optimizer(self.params)

    def _hook(self) -> tuple[Any, Any]:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

        if self.compression == "fp16":
            return None, default_hooks.fp16_compress_hook
        if self.compression == "bf16":
            return None, default_hooks.bf16_compress_hook
        if self.compression == "powersgd":
            state = powerSGD_hook.PowerSGDState(
                process_group=None, matrix_approximation_rank=self.rank_r,
                start_powerSGD_iter=POWERSGD_PLAIN_STEPS, use_error_feedback=True, warm_start=True,
                random_seed=0)
            return state, powerSGD_hook.powerSGD_hook
        raise ValueError(f"unknown compression {self.compression!r}")

    def set_replay(self, seconds: float, seed: int = 0) -> None:
        raise ValueError(f"{self.name}: compute replay is not wired for hooked DDP here "
                         "(use compute: real)")

    def step(self, x: torch.Tensor, y: torch.Tensor) -> StepStats:
        with self.counter.lock:
            self.counter.nbytes = 0
        loss, compute_s, update_s = self._train_step(self.ddp, x, y)
        n = self.world
        wire = 2 * (n - 1) * self.counter.nbytes // n if n > 1 else 0
        return StepStats(loss=loss, compute_s=compute_s, comm_s=float("nan"),
                         comm_wait_s=float("nan"), update_s=update_s,
                         step_s=compute_s + update_s,
                         bytes_sent=wire, bytes_recv=wire, images=len(x))

    def settings(self) -> dict[str, Any]:
        return {"compression": self.compression, "powersgd_rank": self.rank_r}

    def close(self) -> None:
        for mod, real in self._patched:
            mod.dist = real  # type: ignore[attr-defined]
        self._patched = []


class DDPFp16(CompressedDDP):
    """DDP, buckets all-reduced in float16 (torch's fp16_compress_hook)."""

    name, compression = "ddp_fp16", "fp16"


class DDPBf16(CompressedDDP):
    """DDP, buckets all-reduced in bfloat16 (torch's bf16_compress_hook)."""

    name, compression = "ddp_bf16", "bf16"


class DDPPowerSGD1(CompressedDDP):
    """DDP + PowerSGD rank 1, error feedback."""

    name, compression, rank_r = "ddp_powersgd1", "powersgd", 1


class DDPPowerSGD2(CompressedDDP):
    """DDP + PowerSGD rank 2, error feedback."""

    name, compression, rank_r = "ddp_powersgd2", "powersgd", 2


class DDPPowerSGD4(CompressedDDP):
    """DDP + PowerSGD rank 4, error feedback."""

    name, compression, rank_r = "ddp_powersgd4", "powersgd", 4
