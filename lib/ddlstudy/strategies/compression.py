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
that many warm-up steps, so its registry entry declares them (`warmup_min_steps`) and every
`TrainConfig` of it raises `warmup_steps` to at least that, whoever builds it.

`ddp_topk1`: top-k sparsification with error feedback (Stich et al. 2018, Lin et al. 2018's
deep gradient compression without its momentum correction) as a custom comm hook, `_topk_hook`:
per bucket the rank adds its residual to the flat gradient, keeps the k = ceil(`fraction` x the
bucket's elements) largest magnitudes, all-gathers their values (the bucket's dtype) and int32
indices (every rank's k is the same, its indices are not: an all-reduce of a dense vector would
send every element), scatter-adds the N sets into a dense zero bucket, divides by N, and keeps
what it did not send as its new residual. Bytes: what the rank hands to `all_gather` (k values +
k indices per bucket) x (N-1), each rank's payload reaching the N-1 others in a ring all-gather
(`bytes_source: analytic`); received: the same. The hook blocks on both gathers inside backward
(no overlap with the rest of backward on gloo).
"""

from __future__ import annotations

import math
import threading
from types import ModuleType
from typing import Any, ClassVar

import torch
from torch import nn

from ddlstudy.strategies.base import StepStats, Strategy

# torch's start_powerSGD_iter minimum with error feedback, defined beside the registry entries
# that declare it as their warm-up (`warmup_min_steps`): the hook and the warm-up cannot drift
from ddlstudy.strategies.registry import POWERSGD_PLAIN_STEPS


class _CountingDist:
    """torch.distributed, except that all_reduce adds its tensor's bytes to `nbytes` and
    all_gather adds the bytes of the tensor this rank contributes (its input, once, not the
    gathered list) to `gathered`: the caller scales them, 2(N-1)/N for a ring all-reduce and
    (N-1) for a ring all-gather."""

    def __init__(self, real: ModuleType) -> None:
        self._real = real
        self.lock = threading.Lock()
        self.nbytes = 0
        self.gathered = 0

    def all_reduce(self, tensor: torch.Tensor, *args: Any, **kw: Any) -> Any:
        with self.lock:
            self.nbytes += tensor.numel() * tensor.element_size()
        return self._real.all_reduce(tensor, *args, **kw)

    def all_gather(self, tensor_list: list[torch.Tensor], tensor: torch.Tensor, *args: Any,
                   **kw: Any) -> Any:
        with self.lock:
            self.gathered += tensor.numel() * tensor.element_size()
        return self._real.all_gather(tensor_list, tensor, *args, **kw)

    def reset(self) -> None:
        with self.lock:
            self.nbytes = self.gathered = 0

    def wire_bytes(self, world: int) -> int:
        """Bytes this rank sent since `reset`: ring all-reduce 2(N-1)/N x its tensors' bytes,
        ring all-gather (N-1) x its own contribution."""
        if world <= 1:
            return 0
        with self.lock:
            return 2 * (world - 1) * self.nbytes // world + (world - 1) * self.gathered

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def topk_count(numel: int, fraction: float) -> int:
    """Entries a top-k hook sends of a bucket of `numel` elements: ceil(fraction x numel), at
    least 1, at most numel."""
    return min(numel, max(1, math.ceil(fraction * numel)))


def topk_bytes(bucket_numels: list[int], fraction: float, world: int,
               value_bytes: int = 4, index_bytes: int = 4) -> int:
    """Bytes per step per rank of `ddp_topk*` for buckets of these sizes: per bucket k values +
    k int32 indices, to N-1 peers (ring all-gather)."""
    per_rank = sum(topk_count(n, fraction) * (value_bytes + index_bytes) for n in bucket_numels)
    return (world - 1) * per_rank


def _topk_hook(state, bucket):  # unannotated: DDP checks a hook's annotations (as objects)
    """DDP comm hook: `state` is the DDPTopK strategy; a completed Future of the bucket's
    averaged sparse gradient."""
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(state.topk_bucket(bucket.buffer(), bucket.parameters()))
    return fut


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
        if self.compression == "topk":
            return self, _topk_hook
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
        self.counter.reset()
        loss, compute_s, update_s = self._train_step(self.ddp, x, y)
        wire = self.counter.wire_bytes(self.world)
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


class DDPTopK(CompressedDDP):
    """DDP + top-k sparsification with error feedback (`_topk_hook`): `fraction` of each
    bucket's elements sent, as values + int32 indices through all_gather."""

    name, compression = "ddp_topk", "topk"
    fraction: ClassVar[float] = 0.01
    error_feedback: ClassVar[bool] = True

    def __init__(self, model: nn.Module, **kw: Any) -> None:
        # parameter -> what this rank has not sent yet (same shape), filled by the hook
        self.residual: dict[torch.Tensor, torch.Tensor] = {}
        self.bucket_numels: list[int] = []  # the sizes of the buckets of the last step
        super().__init__(model, **kw)

    def topk_bucket(self, flat: torch.Tensor, params: list[torch.Tensor]) -> torch.Tensor:
        """One bucket: flat gradient + residual, its k largest magnitudes all-gathered and
        scatter-added, / N; the rest kept as the residual (kept per parameter, so it survives
        DDP's rebuilding of its buckets after the first step)."""
        sizes = [p.numel() for p in params]
        if sum(sizes) != flat.numel():
            raise RuntimeError(f"{self.name}: bucket of {flat.numel()} elements holds "
                               f"parameters of {sum(sizes)}")
        acc = flat.detach().clone()
        if self.error_feedback and self.residual:
            acc += torch.cat([self.residual[p].reshape(-1) if p in self.residual
                              else flat.new_zeros(p.numel()) for p in params])
        k = topk_count(acc.numel(), self.fraction)
        idx = torch.topk(acc.abs(), k, sorted=False).indices
        values, idx32 = acc[idx], idx.to(torch.int32)
        if self.world > 1:
            got_v = [torch.empty_like(values) for _ in range(self.world)]
            got_i = [torch.empty_like(idx32) for _ in range(self.world)]
            self.counter.all_gather(got_v, values)
            self.counter.all_gather(got_i, idx32)
        else:
            got_v, got_i = [values], [idx32]
        out = torch.zeros_like(flat)
        out.index_add_(0, torch.cat(got_i).long(), torch.cat(got_v))
        out.div_(self.world)
        if self.error_feedback:
            acc[idx] = 0
            for p, rest in zip(params, acc.split(sizes), strict=True):
                self.residual[p] = rest.view_as(p)
        self.bucket_numels.append(flat.numel())
        return out

    def step(self, x: torch.Tensor, y: torch.Tensor) -> StepStats:
        self.bucket_numels = []
        return super().step(x, y)

    def residual_vector(self) -> torch.Tensor:
        """The residual of every parameter, flat, in parameter order (zeros before a step)."""
        return torch.cat([self.residual.get(p, torch.zeros_like(p)).reshape(-1)
                          for p in self.params])

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "topk_fraction": self.fraction,
                "topk_error_feedback": self.error_feedback}


class DDPTopK1(DDPTopK):
    """DDP + top-k, 1 % of each bucket's elements, error feedback."""

    name, fraction = "ddp_topk1", 0.01
