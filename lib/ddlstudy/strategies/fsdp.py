"""`fsdp`: PyTorch FSDP2 (`torch.distributed.fsdp.fully_shard`, Zhao et al. 2023) on the
engines' process group: the library's ZeRO-3, beside the study's own `zero3`.

Every module with parameters of its own is one FSDP unit (`fully_shard` on it), and the root is
one too (its leftovers, and it drives the reshard after backward). FSDP all-gathers a unit's
parameters before its forward, frees them after (reshard_after_forward=True), all-gathers them
again for its backward and reduce-scatters its gradients. resnet18 (41 units; the root owns no
parameter) measured per step: 82 all-gathers whose outputs total 2.000 Psi and 41
reduce-scatters whose inputs total 1.000 Psi (float32, buffers not included; dim 0 of each
parameter padded to a multiple of p: 4,104 B at p = 4), the same in every step.

Bytes are analytic (`bytes_source: analytic`, as `ddp`): FSDP's collectives go through the
backend, so the strategy counts the buffers FSDP hands to each all-gather (its output) and
reduce-scatter (its input) through FSDP's custom-collective hooks, padding included (it is on the
wire), times what the backend sends per byte of that buffer:

- all-gather: (p-1)/p (a ring, gloo's and NCCL's);
- reduce-scatter: (p-1)/p on NCCL, but 2 (p-1)/p on gloo. `ProcessGroupGloo` has no
  reduce-scatter algorithm: `reduce_scatter_tensor_coalesced`, which `reduce_scatter_single` /
  `reduce_scatter_tensor` reach, clones the input, all-reduces it whole and keeps its chunk
  (PyTorch #118911). Measured with torch 2.13 (bytes each rank's process wrote to its sockets,
  /proc/self/io wchar, for one collective over a buffer of B bytes): all_gather_single 0.500 /
  0.667 / 0.750 B at p = 2 / 3 / 4, reduce_scatter_single 1.000 / 1.334 / 1.500 B, the same as
  all_reduce.

So on gloo FSDP2 moves 2 (p-1)/p Psi of all-gather + 2 (p-1)/p Psi of "reduce-scatter" =
4 (p-1)/p Psi per step and rank, 2.0x a ring all-reduce's 2 (p-1)/p Psi; ZeRO-3's 3 (p-1)/p
(1.5x) needs a ring reduce-scatter, which the study's `zero3` has and gloo lacks. Until
2026-11-26 the strategy applied (p-1)/p to the reduce-scatter too and reported 1.5x: resnet18 at
4 workers 100,574,892 B a step, while each rank's process wrote 134,244,152 B to its sockets in
that step; it now reports 134,099,856 B (3.000 Psi; Psi = 44,695,848 B), 0.11 % under the
writes (gloo's per-message headers).

Emulated runs (netem) replace these bytes with the veth counters (`bytes_source` becomes
`counted`, as for every analytic strategy; ddlstudy.network.emulated.wire). The chapter 11
reference's fsdp figure, 178,509,736 B a step = 2.66x the ring all-reduce's 67,043,772 B (the
study's own count there, not the veth's), was measured before 2026-11-26, when the plain copy
for rank 0 (`DTensor.full_tensor`, an all-gather of 0.751 Psi per rank) was assembled in
`end_chunk`, inside the chunk call whose veth deltas are summed, and that run had one timed step
per chunk: the step's 134.24 MB + that gather's 33.58 MB = 167.82 MB, x 1.064 for TCP/IP
headers, ACKs and ipyparallel's chunk traffic (the ring all-reduce's own veth count is 1.061x
its count, ddp's 1.062x). The gather is now `sync_model`, an engine call of its own that the
driver runs after the chunk's wall time and veth counters were taken, and only before rank 0's
model is read (evaluation, checkpoint, final weights): a chunk's wall time and veth count hold
the steps alone (resnet18 x4, one step per chunk, measured 2026-11-26: each rank wrote
134,244,744 B to its sockets inside the chunk call against the step's 134,099,856 B, and
33,578,548 B in `sync_model`; the veth adds TCP/IP framing to the first only), and fsdp /
allreduce on the veth is the 2.0 it is at any p. The study's
`zero3` had the same end-of-chunk gather on its veth (142.8 MB against its 100.6 MB count) and
moved it the same way.

Memory (`mem_*_bytes`, rank 0): this rank's parameter shards, about Psi / p (resnet18 at 4
workers: 11,174,988 B against Psi / 4 = 11,173,962 B; rank 0 holds the larger chunks of an
uneven dim 0), gradient shards the same, optimizer state the shards' momentum (0 without).

Runs on CPU / gloo with torch 2.13 (measured; float32 and float64). Limits: no compute replay
(the gathers live inside forward and backward); before rank 0's model is read, `sync_model`
assembles a plain copy of the model with `DTensor.full_tensor` (an all-gather over the workers,
(p-1)/p Psi per rank, outside every step's bytes and, since it is its own engine call outside
the chunks, outside every chunk's wall time and veth count) so rank 0 can evaluate, checkpoint
and report weights alone. A restart from a checkpoint sets every rank's shards from the full
model it holds (`load_weights`); the sharded optimizer state (momentum) is not checkpointed, so
a restore needs momentum 0 and refuses otherwise (TrainConfig refuses fault injection then).
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


# What a backend sends per byte of a reduce-scatter's input, in units of the ring's (p-1)/p:
# ProcessGroupGloo has no reduce-scatter of its own (reduce_scatter_tensor_coalesced clones
# the input, all-reduces it whole and keeps its chunk: PyTorch #118911), so 2; NCCL's is a ring.
REDUCE_SCATTER_RINGS = {"gloo": 2}


def reduce_scatter_rings(backend: str, device: str = "cpu") -> int:
    """Ring factors (p-1)/p one reduce-scatter of a `device` tensor sends per byte of its input
    on `backend` ("gloo", "nccl", or a per-device "cpu:gloo,cuda:nccl")."""
    name = str(backend).lower()
    if ":" in name:
        name = dict(part.split(":", 1) for part in name.split(",")).get(device, "")
    return REDUCE_SCATTER_RINGS.get(name, 1)


class _Count:
    """Bytes FSDP handed to its collectives this step (thread-safe: hooks may run on FSDP's
    streams / threads): buffer sizes, and the bytes this rank sends for them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.gathered = 0  # all-gather outputs (padded)
        self.scattered = 0  # reduce-scatter inputs (padded)
        self.sent = 0  # on the wire: gathered (p-1)/p + scattered x rings x (p-1)/p

    def reset(self) -> None:
        with self.lock:
            self.gathered = self.scattered = self.sent = 0


def _counting_collectives(count: _Count) -> tuple[Any, Any]:
    import torch.distributed as dist
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import (
        DefaultAllGather,
        DefaultReduceScatter,
    )

    class CountingAllGather(DefaultAllGather):
        def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor,
                     group: Any, async_op: bool = False) -> Any:
            n = output_tensor.numel() * output_tensor.element_size()
            p = dist.get_world_size(group)
            with count.lock:
                count.gathered += n
                count.sent += n * (p - 1) // p
            return super().__call__(output_tensor, input_tensor, group, async_op)

    class CountingReduceScatter(DefaultReduceScatter):
        def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor,
                     group: Any, op: Any, async_op: bool = False) -> Any:
            n = input_tensor.numel() * input_tensor.element_size()
            p = dist.get_world_size(group)
            rings = reduce_scatter_rings(dist.get_backend(group), input_tensor.device.type)
            with count.lock:
                count.scattered += n
                count.sent += rings * n * (p - 1) // p
            return super().__call__(output_tensor, input_tensor, group, op, async_op)

    return CountingAllGather(), CountingReduceScatter()


class FSDP(Strategy):
    """torch FSDP2 (`fully_shard`) per module with parameters, plus the root."""

    name = "fsdp"
    syncs_model = True
    shards_optimizer = True

    def __init__(self, model: nn.Module, **kw: Any) -> None:
        super().__init__(model, **kw)
        import torch.distributed as dist
        from torch.distributed.fsdp import FSDPModule, fully_shard

        if not dist.is_initialized():
            raise RuntimeError("fsdp needs a torch.distributed process group")
        self.world = dist.get_world_size()
        self.plain = copy.deepcopy(model)  # what rank 0 reads (sync_model fills it)
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
        wire = self.count.sent
        return StepStats(loss=loss, compute_s=compute_s, comm_s=math.nan, comm_wait_s=math.nan,
                         update_s=update_s, step_s=compute_s + update_s, bytes_sent=wire,
                         bytes_recv=wire, images=len(x))

    def sync_model(self) -> None:
        """Assemble the plain copy (all workers: full_tensor is an all-gather), once after the
        last step; the driver calls it outside the chunks (Strategy.sync_model)."""
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

    def load_weights(self, state: dict[str, torch.Tensor]) -> None:
        """A checkpoint's full state dict into the plain copy and into the sharded model that
        training steps: each rank copies its chunk of every full tensor into its DTensor's local
        shard (`distribute_tensor(..., src_data_rank=None)` splits locally, as FSDP shards: no
        collective). Until 2026-11-26 only the plain copy was loaded, so a restarted fsdp run
        trained on from its initial weights."""
        from torch.distributed.tensor import DTensor, distribute_tensor

        self.plain.load_state_dict(state)
        with torch.no_grad():
            for name, p in self.model.named_parameters():
                full = state[name].to(dtype=p.dtype, device=p.device)
                if isinstance(p, DTensor):
                    mine = distribute_tensor(full, p.device_mesh, p.placements,
                                             src_data_rank=None)
                    p.to_local().copy_(mine.to_local())
                else:
                    p.copy_(full)
            for name, b in self.model.named_buffers():
                if name in state:  # persistent buffers (a state dict has no others)
                    b.copy_(state[name])
        self._stale = False

    def memory(self) -> dict[str, int]:
        """Bytes this rank holds between steps: its parameter shards, gradient shards (same
        size), optimizer state (SGD momentum of the shards, 0 without momentum)."""
        shard = sum(p.to_local().numel() * p.element_size() for p in self.params)
        return {"mem_param_bytes": shard, "mem_grad_bytes": shard,
                "mem_optstate_bytes": shard if self.momentum else 0}

    def settings(self) -> dict[str, Any]:
        return self.memory()
