"""`zero1`, `zero2`, `zero3`: sharded data parallelism (ZeRO, Rajbhandari et al. 2020) on the
study's own counting harness (`ddlstudy.collectives.shard`: ring reduce-scatter and all-gather).

Every rank is the "server" of one shard: the parameter server's idea made symmetric. Shards are
per unit (a gradient bucket for stages 1 and 2, a module's own parameters for stage 3); rank r
owns piece r of every unit and keeps the optimizer state (SGD momentum) of those pieces only.

- stage 1 (optimizer state): backward as usual (full gradients held), then a reduce-scatter per
  bucket, the SGD step on the rank's pieces, an all-gather of the updated parameters;
- stage 2 (+ gradients): each bucket is reduce-scattered as soon as backward has filled it and
  the parameters' gradients are freed when packed, so a rank holds one bucket plus its shard of
  gradients; the rest as stage 1;
- stage 3 (+ parameters): a module's parameters are all-gathered right before its forward and
  freed after it (storage resized to 0), gathered again when the gradient of its output arrives
  (before its backward), and its gradients reduce-scattered and parameters freed when its
  backward is done. No all-gather after the step: the next forward gathers.

Bytes on the link per rank and step, ring halves of (p-1)/p Psi each: stages 1 and 2 move a
reduce-scatter and an all-gather (2 (p-1)/p Psi, as a ring all-reduce), stage 3 adds the
backward all-gather (3 (p-1)/p Psi, 1.5x). Memory per rank (`settings()`, columns of the summary
row) is what the strategy holds during a step: parameters, gradients, optimizer state bytes.

Limits: stage 3 computes for real (no compute replay); before rank 0's model is read
(evaluation, checkpoint, final weights) stage 3 gathers the whole model (`sync_model`, an
all-gather of (p-1)/p Psi per rank) so rank 0 can evaluate and report weights alone. The driver
runs it as an engine call of its own, after the chunk's wall time and wire counters were taken:
it is outside every step's bytes and every chunk's wall time and veth count (until 2026-11-26 it
ran in `end_chunk`, inside the chunk: with one timed step per chunk the veth counted 142.8 MB a
step for resnet18 x4 against the step's 100.6 MB; now each rank writes 100,619,380 B to its
sockets inside the chunk call against the step's 100,565,652 B, and 33,539,596 B in
`sync_model`). Checkpoints hold rank 0's full model, which `load_weights` sets each rank's
shards from on a restart (until 2026-11-26 only the model was loaded and the shards kept their
initial weights); they do not hold the sharded optimizer state (each rank's momentum), so a
restore needs momentum 0 and refuses otherwise (TrainConfig refuses fault injection then; plain
SGD has no state, and the study's runs use momentum 0).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ddlstudy.collectives.common import Comm
from ddlstudy.collectives.shard import all_gather, reduce_scatter, shard_range
from ddlstudy.strategies.allreduce import make_buckets
from ddlstudy.strategies.base import StepStats, Strategy


@dataclass
class _Unit:
    """A group of parameters sharded together: this rank owns elements [lo, hi) of their flat
    concatenation; `shard` is that piece (fp master copy, the optimizer's parameter)."""

    params: list[nn.Parameter]
    numel: int
    lo: int
    hi: int
    shard: nn.Parameter
    pending: int = 0
    buf: torch.Tensor | None = None
    gathered: bool = True
    module: nn.Module | None = None
    hooks: list[Any] = field(default_factory=list)


def _flat(params: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in params])


class Zero(Strategy):
    """ZeRO stage 1, 2 or 3 over ddlstudy's ring reduce-scatter / all-gather."""

    name = "zero"
    stage = 0
    shards_optimizer = True

    def __init__(self, model: nn.Module, *, bucket_mb: float = 25.0, **kw: Any) -> None:
        super().__init__(model, **kw)
        import torch.distributed as dist

        from ddlstudy.collectives.transports import DistTransport

        if self.stage not in (1, 2, 3):
            raise ValueError(f"ZeRO stage must be 1, 2 or 3, got {self.stage}")
        if bucket_mb <= 0:
            raise ValueError(f"bucket_mb must be > 0, got {bucket_mb}")
        if dist.is_initialized():
            self.comm = Comm(DistTransport(None), self.timeout_s)
            self.p, self.r = self.comm.size, self.comm.rank
        else:  # one process: shards are the whole model, nothing moves
            self.comm, self.p, self.r = None, 1, 0
        self.bucket_bytes = int(bucket_mb * 2**20)
        self.units = self._make_units()
        self.opt = self._optimizer([u.shard for u in self.units])
        self._hooks: list[Any] = []
        self._full = True  # stage 3: every unit gathered (sync_model, for eval/weights)
        self._steps = 0
        self._tag = 0
        if self.stage >= 2:
            self._where = {id(p): u for u in self.units for p in u.params}
            self._hooks += [p.register_post_accumulate_grad_hook(self._on_grad)
                            for p in self.params]
        if self.stage == 3:  # the model stays whole until the first step frees it
            self._install_module_hooks()

    # ------------------------------------------------------------------ layout
    def _make_units(self) -> list[_Unit]:
        if self.stage == 3:
            groups = [(m, [p for p in m.parameters(recurse=False) if p.requires_grad])
                      for m in self.model.modules()]
            groups = [(m, ps) for m, ps in groups if ps]
        else:
            groups = [(None, b.params) for b in
                      make_buckets(list(reversed(self.params)), self.bucket_bytes)]
        units = []
        for module, params in groups:
            numel = sum(p.numel() for p in params)
            lo, hi = shard_range(numel, self.p, self.r)
            shard = nn.Parameter(_flat(params)[lo:hi].clone())
            units.append(_Unit(params, numel, lo, hi, shard, module=module))
        return units

    def _next_tag(self) -> int:
        """Every collective gets its own tag range; all ranks issue them in the same order."""
        self._tag = (self._tag + self.p) % (1 << 20)
        return self._tag

    def _reduce_scatter(self, unit: _Unit, flat: torch.Tensor) -> None:
        """Sum the unit's flat gradient over ranks; this rank's piece / p is its shard's grad."""
        if self.comm is not None:
            mine = reduce_scatter(self.comm, flat, tag=self._next_tag())
        else:
            mine = flat
        g = mine.div(self.p)
        if unit.shard.grad is None:
            unit.shard.grad = g
        else:
            unit.shard.grad.add_(g)

    def _gather(self, unit: _Unit) -> torch.Tensor:
        """The unit's full flat parameters: this rank's shard, everyone else's by all-gather."""
        flat = torch.empty(unit.numel, dtype=unit.shard.dtype, device=unit.shard.device)
        flat[unit.lo:unit.hi].copy_(unit.shard.detach())
        if self.comm is not None:
            all_gather(self.comm, flat, tag=self._next_tag())
        return flat

    @staticmethod
    def _unpack(params: Sequence[torch.Tensor], flat: torch.Tensor) -> None:
        offset = 0
        for p in params:
            n = p.numel()
            p.data.copy_(flat[offset:offset + n].view_as(p))  # .data: no version bump
            offset += n

    # ------------------------------------------------------------------ stage 2 and 3 backward
    def _on_grad(self, p: torch.Tensor) -> None:
        """A gradient is ready: pack it into its unit's buffer and free it; a full unit is
        reduce-scattered at once (stage 3 then frees its parameters too)."""
        if self.stage == 3 and self._full:
            return  # outside a step (no grad flows there in the study; be safe)
        unit = self._where[id(p)]
        if unit.buf is None:
            unit.buf = torch.zeros(unit.numel, dtype=p.dtype, device=p.device)
        offset = 0
        for q in unit.params:
            if q is p:
                break
            offset += q.numel()
        unit.buf[offset:offset + p.numel()].copy_(p.grad.reshape(-1))
        p.grad = None  # ZeRO-2: only the shard of the gradient outlives backward
        unit.pending -= 1
        if unit.pending == 0:
            self._finish_unit(unit)

    def _grad_ready(self, p: torch.Tensor) -> None:
        if self.stage >= 2:
            self._on_grad(p)

    def _finish_unit(self, unit: _Unit) -> None:
        assert unit.buf is not None
        self._reduce_scatter(unit, unit.buf)
        unit.buf = None
        unit.pending = -1  # done this step
        if self.stage == 3:
            self._free(unit)

    # ------------------------------------------------------------------ stage 3 parameters
    def _install_module_hooks(self) -> None:
        for unit in self.units:
            assert unit.module is not None
            self._hooks.append(unit.module.register_forward_pre_hook(
                lambda _m, _a, u=unit: self._ensure(u)))
            self._hooks.append(unit.module.register_forward_hook(
                lambda _m, _a, out, u=unit: self._after_forward(u, out)))

    def _ensure(self, unit: _Unit) -> None:
        """Gather the unit's parameters into their (re-grown) storage, once."""
        if unit.gathered:
            return
        flat = self._gather(unit)
        for p in unit.params:
            p.data.untyped_storage().resize_(p.numel() * p.element_size())
        self._unpack(unit.params, flat)
        unit.gathered = True

    def _free(self, unit: _Unit) -> None:
        for p in unit.params:
            p.data.untyped_storage().resize_(0)
        unit.gathered = False

    def _free_all(self) -> None:
        for unit in self.units:
            self._free(unit)
        self._full = False

    def _after_forward(self, unit: _Unit, out: Any) -> None:
        """Free after forward; gather again when the gradient of an output arrives (before this
        module's backward, which needs the weights it saved)."""
        if self._full or not torch.is_grad_enabled():
            return
        self._free(unit)
        outs = out if isinstance(out, tuple | list) else (out,)
        for t in outs:
            if isinstance(t, torch.Tensor) and t.requires_grad:
                t.register_hook(lambda g, u=unit: (self._ensure(u), g)[1])

    # ------------------------------------------------------------------ the step
    def step(self, x: torch.Tensor, y: torch.Tensor) -> StepStats:
        if self.comm is not None:
            self.comm.traffic.sent_bytes = self.comm.traffic.recv_bytes = 0
        if self.stage == 3 and self._full:
            self._free_all()
        for unit in self.units:
            unit.pending = len(unit.params)
            unit.shard.grad = None
        self._sync()
        t0 = time.perf_counter()
        loss = self._forward_backward(self.model, x, y)
        self._sync()
        t1 = time.perf_counter()
        for unit in self.units:  # stage 1 (all units), or units with unused parameters
            if unit.pending < 0:
                continue
            if self.stage == 3:
                self._ensure(unit)  # keep the collective sequence equal on every rank
            flat = unit.buf if unit.buf is not None else torch.zeros(
                unit.numel, dtype=unit.shard.dtype, device=unit.shard.device)
            offset = 0
            for p in unit.params:
                if p.grad is not None:
                    flat[offset:offset + p.numel()].copy_(p.grad.reshape(-1))
                    if self.stage >= 2:
                        p.grad = None
                offset += p.numel()
            unit.buf = flat
            self._finish_unit(unit)
        t2 = time.perf_counter()
        self.opt.step()
        t3 = time.perf_counter()
        if self.stage < 3:
            for unit in self.units:
                self._unpack(unit.params, self._gather(unit))
        self._sync()
        t4 = time.perf_counter()
        self._steps += 1
        sent = self.comm.traffic.sent_bytes if self.comm is not None else 0
        recv = self.comm.traffic.recv_bytes if self.comm is not None else 0
        return StepStats(loss=loss, compute_s=t1 - t0, comm_s=(t2 - t1) + (t4 - t3),
                         comm_wait_s=(t2 - t1) + (t4 - t3), update_s=t3 - t2, step_s=t4 - t0,
                         bytes_sent=sent, bytes_recv=recv, images=len(x))

    def sync_model(self) -> None:
        """Stage 3: gather the whole model (collective over the workers) so rank 0 can evaluate
        and hand out weights on its own; the next step frees it again. The driver calls it
        outside the chunks (Strategy.sync_model)."""
        if self.stage == 3 and not self._full:
            for unit in self.units:
                self._ensure(unit)
            self._full = True

    def load_weights(self, state: dict[str, torch.Tensor]) -> None:
        """A checkpoint's full state dict into the model and into this rank's shards, which the
        optimizer steps (stages 1 and 2 rebuild the model from them after every step): loading
        the model alone left every shard at its initial weights, so a restarted run went on from
        those. Stage 3 regrows any freed parameters first (whole model, as after `sync_model`;
        the next step frees it). Every rank holds the full tensors: no collective."""
        if self.stage == 3:
            for unit in self.units:
                if not unit.gathered:
                    for p in unit.params:
                        p.data.untyped_storage().resize_(p.numel() * p.element_size())
                    unit.gathered = True
            self._full = True
        self.model.load_state_dict(state)
        with torch.no_grad():
            for unit in self.units:
                unit.shard.copy_(_flat(unit.params)[unit.lo:unit.hi])

    def set_replay(self, seconds: float, seed: int = 0) -> None:
        if self.stage == 3:
            raise ValueError("zero3 gathers parameters inside forward and backward: it has no "
                             "compute replay (use compute: real)")
        super().set_replay(seconds, seed)

    # ------------------------------------------------------------------ memory
    def memory(self) -> dict[str, int]:
        """Bytes this rank holds during a step (the peak set, by construction): parameters,
        gradients, optimizer state. Parameters: the model (stage 3: its largest unit, gathered
        for use) plus the shard masters; gradients: full (stage 1), largest unit buffer + shard
        (2, 3); optimizer state: SGD momentum of the shard only (0 without momentum)."""
        el = self.units[0].shard.element_size() if self.units else 0
        full = self.n_params * el
        shard = sum(u.hi - u.lo for u in self.units) * el
        largest = max((u.numel for u in self.units), default=0) * el
        params = (largest if self.stage == 3 else full) + shard
        grads = full + shard if self.stage == 1 else largest + shard
        state = shard if self.momentum else 0
        return {"zero_stage": self.stage, "mem_param_bytes": params, "mem_grad_bytes": grads,
                "mem_optstate_bytes": state, "mem_total_bytes": params + grads + state,
                "mem_dp_total_bytes": 2 * full + (full if self.momentum else 0)}

    def settings(self) -> dict[str, Any]:
        """Memory per rank, as summary columns (rank 0's; ranks differ by < 1 element/unit)."""
        return self.memory()

    def close(self) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks = []


class Zero1(Zero):
    """ZeRO stage 1: optimizer state sharded."""

    name, stage = "zero1", 1


class Zero2(Zero):
    """ZeRO stage 2: optimizer state and gradients sharded."""

    name, stage = "zero2", 2


class Zero3(Zero):
    """ZeRO stage 3: optimizer state, gradients and parameters sharded."""

    name, stage = "zero3", 3
    syncs_model = True
