"""The public entry: `all_reduce(tensor, algorithm, op, group)` over torch.distributed.

All algorithms reduce by addition in place into a flat view of the caller's tensor; `mean`
divides by the world size afterwards (as NCCL's avg does), so every algorithm shares one
rounding step.
"""

from __future__ import annotations

from typing import Any

import torch

from ddlstudy.collectives.common import (
    DEFAULT_TIMEOUT_S,
    OPS,
    PIPELINE_SEGMENT_BYTES,
    Comm,
    Traffic,
)
from ddlstudy.collectives.registry import ALGORITHMS, analytic_traffic, get_algorithm
from ddlstudy.collectives.transports import DistTransport, _DistHandle


def _check_choice(algorithm: str, op: str) -> None:
    get_algorithm(algorithm)
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; valid: {', '.join(OPS)}")


def _local_problem(tensor: torch.Tensor) -> str:
    if not isinstance(tensor, torch.Tensor):
        return f"expected a torch.Tensor, got {type(tensor).__name__}"
    if not tensor.is_contiguous():
        return "tensor is not contiguous: pass tensor.contiguous() (and copy the result back)"
    if not tensor.is_floating_point():
        return f"tensor dtype {tensor.dtype} is not floating point: sum/mean need float32/64"
    return ""


_DTYPE_CODES = {torch.float16: 1, torch.bfloat16: 2, torch.float32: 3, torch.float64: 4}


def _check_across_ranks(tensor: torch.Tensor, problem: str, group: Any,
                        timeout_s: float) -> None:
    """One all_reduce(MAX) of 4 + p int64s so every rank raises the same error, none hangs.

    Carries (len, -len, dtype, -dtype) - max and -min tell whether all ranks agree - and a
    one-hot flag per rank with a local problem. Cost: one tiny library all-reduce (tens of us on
    loopback gloo); pass check=False to skip it in timed loops.
    """
    import torch.distributed as dist

    from ddlstudy.collectives.device import group_meta_device

    p, r = dist.get_world_size(group), dist.get_rank(group)
    n = tensor.numel() if isinstance(tensor, torch.Tensor) else -1
    code = _DTYPE_CODES.get(getattr(tensor, "dtype", None), 0)
    info = torch.zeros(4 + p, dtype=torch.int64)
    info[:4] = torch.tensor([n, -n, code, -code])
    info[4 + r] = 1 if problem else 0
    # metadata: CPU over gloo (beside NCCL on CUDA ranks), on CUDA only in a plain NCCL group
    info = info.to(group_meta_device(group))
    work = dist.all_reduce(info, op=dist.ReduceOp.MAX, group=group, async_op=True)
    _DistHandle(work, "all_reduce input check").wait(timeout_s)
    info = info.cpu()
    if problem:
        raise ValueError(f"rank {r}: {problem}")
    bad = [q for q in range(p) if info[4 + q]]
    if bad:
        raise ValueError(f"all_reduce input invalid on rank(s) {bad} (see their error)")
    lo, hi = int(-info[1]), int(info[0])
    if lo != hi:
        raise ValueError(f"tensor lengths differ across ranks (min {lo}, max {hi}; this rank {n})")
    if int(-info[3]) != int(info[2]):
        raise ValueError(f"tensor dtypes differ across ranks (this rank {tensor.dtype})")


def all_reduce(tensor: torch.Tensor, algorithm: str = "ring", op: str = "sum", group: Any = None,
               timeout_s: float | None = None, check: bool = True,
               segment_bytes: int = PIPELINE_SEGMENT_BYTES) -> Traffic:
    """All-reduce `tensor` in place over `group` with the named algorithm; returns its traffic.

    check=True validates lengths/dtypes across ranks with one extra tiny all-reduce, so a
    mismatch is a clear ValueError on every rank instead of a hang or silent garbage.
    """
    import torch.distributed as dist

    _check_choice(algorithm, op)
    timeout_s = timeout_s or DEFAULT_TIMEOUT_S
    problem = _local_problem(tensor)
    if check:
        _check_across_ranks(tensor, problem, group, timeout_s)
    elif problem:
        raise ValueError(problem)
    p = dist.get_world_size(group)
    alg = ALGORITHMS[algorithm]
    if not alg.hand_written:
        work = dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group, async_op=True)
        _DistHandle(work, "torch all_reduce").wait(timeout_s)
        nbytes = tensor.numel() * tensor.element_size()
        sent, recv = analytic_traffic(algorithm, nbytes, p, dist.get_rank(group))
        traffic = Traffic(sent, recv, counted=False)
    else:
        comm = Comm(DistTransport(group), timeout_s, segment_bytes)
        alg(comm, tensor.view(-1))
        traffic = comm.traffic
    if op == "mean" and p > 1:
        tensor.div_(p)
    return traffic
