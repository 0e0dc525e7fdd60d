"""Engine-side correctness checks (the bench's verification): deterministic inputs, a float64
reference any rank computes alone, a rounding bound, and provoked bad inputs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ddlstudy.collectives.api import all_reduce
from ddlstudy.collectives.common import Traffic
from ddlstudy.collectives.device import group_payload_device

_REF_CACHE: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}


def rank_data(seed: int, rank: int, count: int, dtype: torch.dtype) -> torch.Tensor:
    """Deterministic input of `rank`: any rank can regenerate any other's without communicating."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + rank)
    return (torch.rand(count, generator=gen, dtype=torch.float64) * 2 - 1).to(dtype)


def _reference(seed: int, p: int, count: int, dtype: torch.dtype) -> tuple[torch.Tensor,
                                                                            torch.Tensor]:
    """float64 sum and sum of |x| over all ranks' inputs; cached since every algorithm uses it."""
    key = (seed, p, count, dtype)
    if key not in _REF_CACHE:
        _REF_CACHE.clear()  # keep one: at 256 MiB a reference is 512 MB
        total = torch.zeros(count, dtype=torch.float64)
        absum = torch.zeros(count, dtype=torch.float64)
        for q in range(p):
            xq = rank_data(seed, q, count, dtype).double()
            total += xq
            absum += xq.abs()
        _REF_CACHE[key] = (total, absum)
    return _REF_CACHE[key]


def _dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    try:
        out = getattr(torch, dtype)
    except AttributeError:
        out = None
    if not isinstance(out, torch.dtype):
        raise ValueError(f"unknown dtype {dtype!r}; use float32 or float64")
    return out


def count_wrong(result: torch.Tensor, seed: int, p: int, op: str) -> tuple[int, float]:
    """Elements beyond the worst-case rounding of a p-term sum: (#wrong, max abs error).

    Bound: (p-1) eps sum|x| for any bracketing (Higham 2002, sec. 4.2) plus one rounding of the
    result (and of the division for mean). An algorithm that drops or doubles a term is off by
    about one input, far above it.
    """
    result = result.detach().cpu()  # the float64 reference is computed on CPU
    ref, absum = _reference(seed, p, result.numel(), result.dtype)
    eps = torch.finfo(result.dtype).eps
    if op == "mean":
        ref, absum = ref / p, absum / p
    tol = (p + 1) * eps * absum + eps * ref.abs() + torch.finfo(result.dtype).tiny
    err = (result.double() - ref).abs()
    return int((err > tol).sum()), float(err.max()) if err.numel() else 0.0


def selfcheck(algorithm: str, count: int, dtype: str = "float32", op: str = "sum",
              seed: int = 0, iters: int = 1, timeout_s: float | None = None) -> dict[str, Any]:
    """Engine side: all-reduce deterministic data, compare with a locally computed float64 sum.

    Runs `iters` times on fresh inputs (catches state leaking between calls); wrong is summed.
    """
    import torch.distributed as dist

    p, r = dist.get_world_size(), dist.get_rank()
    dt_ = _dtype(dtype)
    wrong, max_err, traffic = 0, 0.0, Traffic()
    for _ in range(iters):
        x = rank_data(seed, r, count, dt_).to(group_payload_device())
        traffic = all_reduce(x, algorithm, op, timeout_s=timeout_s)
        w, e = count_wrong(x, seed, p, op)
        wrong, max_err = wrong + w, max(max_err, e)
    return {"algorithm": algorithm, "ranks": p, "rank": r, "count": count, "dtype": dtype,
            "op": op, "wrong": wrong, "max_abs_err": max_err, **traffic.as_dict()}


def selfcheck_many(cases: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Many selfchecks in one engine call (each engine call costs ms of ipyparallel overhead)."""
    return [selfcheck(**case) for case in cases]


def probe_error(kind: str, algorithm: str = "ring", bad_rank: int = 0,
                timeout_s: float = 30.0) -> str:
    """Engine side: provoke a bad input on `bad_rank`, return the ValueError text ('' if none).

    kind: 'length' (bad rank's tensor is one longer), 'noncontiguous' (a strided view),
    'dtype' (float64 on the bad rank), 'none' (valid input).
    """
    import torch.distributed as dist

    r = dist.get_rank()
    x = torch.ones(8)
    if r == bad_rank:
        if kind == "length":
            x = torch.ones(9)
        elif kind == "noncontiguous":
            x = torch.ones(16)[::2]
        elif kind == "dtype":
            x = torch.ones(8, dtype=torch.float64)
    try:
        all_reduce(x.to(group_payload_device()), algorithm, timeout_s=timeout_s)
    except ValueError as err:
        return str(err)
    return ""
