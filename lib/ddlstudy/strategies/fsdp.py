"""`fsdp`: PyTorch FSDP2 (`torch.distributed.fsdp.fully_shard`, Zhao et al. 2023) on the
engines' process group: the library's ZeRO-3, beside the study's own `zero3`.

Every module with parameters of its own is one FSDP unit (`fully_shard` on it), and the root is
one too (its leftovers, and it drives the reshard after backward). FSDP all-gathers a unit's
parameters before its forward, frees them after (reshard_after_forward=True), all-gathers them
again for its backward and reduce-scatters (mean) its gradients: 3 (p-1)/p Psi per step and rank
on a ring, like ZeRO-3.

Bytes are analytic (`bytes_source: analytic`, as `ddp`): FSDP's collectives go through the
backend (gloo here), so the strategy counts the bytes FSDP hands to each all-gather
(its output) and reduce-scatter (its input) through FSDP's custom-collective hooks and applies
the ring factor (p-1)/p; padding to a multiple of p is included (it is on the wire).

Runs on CPU / gloo with torch 2.13 (measured; float32 and float64). Limits: no compute replay
(the gathers live inside forward and backward); between chunks the strategy assembles a plain
copy of the model with `DTensor.full_tensor` (a collective over the workers, outside every
step's bytes) so rank 0 can evaluate and report weights alone.
"""

from __future__ import annotations

import copy
import math
import threading
from typing import Any

import torch
from torch import nn

from ddlstudy.strategies.base import StepStats, Strategy, _trainable


def missing() -> str | None:
    """'' where fully_shard imports (torch >= 2.6), else the reason in one line."""
    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401
        from torch.distributed.fsdp._fully_shard._fsdp_collectives import (  # noqa: F401
            DefaultAllGather,
            DefaultReduceScatter,
        )
    except ImportError as err:
        return f"fsdp needs torch.distributed.fsdp.fully_shard (torch >= 2.6): {err}"
    return None


class _Count:
    """Bytes FSDP handed to its collectives this step (thread-safe: hooks may run on FSDP's
    streams / threads)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.gathered = 0
        self.scattered = 0

    def reset(self) -> None:
        with self.lock:
            self.gathered = self.scattered = 0


def _counting_collectives(count: _Count) -> tuple[Any, Any]:
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import (
        DefaultAllGather,
        DefaultReduceScatter,
    )

    class CountingAllGather(DefaultAllGather):
        def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor,
                     group: Any, async_op: bool = False) -> Any:
            with count.lock:
                count.gathered += output_tensor.numel() * output_tensor.element_size()
            return super().__call__(output_tensor, input_tensor, group, async_op)

    class CountingReduceScatter(DefaultReduceScatter):
        def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor,
                     group: Any, op: Any, async_op: bool = False) -> Any:
            with count.lock:
                count.scattered += input_tensor.numel() * input_tensor.element_size()
            return super().__call__(output_tensor, input_tensor, group, op, async_op)

    return CountingAllGather(), CountingReduceScatter()


class FSDP(Strategy):
    """torch FSDP2 (`fully_shard`) per module with parameters, plus the root."""

    name = "fsdp"

    def __init__(self, model: nn.Module, **kw: Any) -> None:
        super().__init__(model, **kw)
        import torch.distributed as dist
        from torch.distributed.fsdp import FSDPModule, fully_shard

        if not dist.is_initialized():
            raise RuntimeError("fsdp needs a torch.distributed process group")
        self.world = dist.get_world_size()
        self.plain = copy.deepcopy(model)  # what rank 0 evaluates between chunks
        units = [m for m in model.modules()
                 if m is not model and any(True for _ in m.parameters(recurse=False))]
        for m in units:
            fully_shard(m)
        fully_shard(model)
        self.count = _Count()
        gather, scatter = _counting_collectives(self.count)
        for m in model.modules():
            if isinstance(m, FSDPModule):
                m.set_custom_all_gather(gather)
                m.set_custom_reduce_scatter(scatter)
        self.params = _trainable(model)  # now DTensors, this rank's shards
        self.opt = self._optimizer(self.params)
        self._stale = False

    @property
    def module(self) -> nn.Module:
        return self.plain

    def set_replay(self, seconds: float, seed: int = 0) -> None:
        raise ValueError("fsdp gathers parameters inside forward and backward: it has no "
                         "compute replay (use compute: real)")

    def step(self, x: torch.Tensor, y: torch.Tensor) -> StepStats:
        self.count.reset()
        loss, compute_s, update_s = self._train_step(self.model, x, y)
        self._stale = True
        frac = (self.world - 1) / self.world
        wire = int(frac * (self.count.gathered + self.count.scattered))
        return StepStats(loss=loss, compute_s=compute_s, comm_s=math.nan, comm_wait_s=math.nan,
                         update_s=update_s, step_s=compute_s + update_s, bytes_sent=wire,
                         bytes_recv=wire, images=len(x))

    def end_chunk(self) -> None:
        """Assemble the plain copy (all workers: full_tensor is an all-gather)."""
        if not self._stale:
            return
        with torch.no_grad():
            sharded = dict(self.model.named_parameters())
            for name, p in self.plain.named_parameters():
                p.copy_(sharded[name].full_tensor())
            for (_, b), (_, src) in zip(self.plain.named_buffers(), self.model.named_buffers(),
                                        strict=True):
                b.copy_(src)
        self._stale = False

    def memory(self) -> dict[str, int]:
        """Bytes this rank holds between steps: its parameter shards, gradient shards (same
        size), optimizer state (SGD momentum of the shards, 0 without momentum)."""
        shard = sum(p.to_local().numel() * p.element_size() for p in self.params)
        return {"mem_param_bytes": shard, "mem_grad_bytes": shard,
                "mem_optstate_bytes": shard if self.momentum else 0}

    def settings(self) -> dict[str, Any]:
        return self.memory()
