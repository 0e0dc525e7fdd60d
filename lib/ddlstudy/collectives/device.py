"""Where tensors live when they cross a process group, and which backend the group uses.

On CUDA ranks the study's process group is `cpu:gloo,cuda:nccl` (`backend_for`): a tensor on a
CUDA device travels over NCCL, a CPU tensor over gloo. So payloads (gradients, weights, the
collectives' buffers) are put on the rank's CUDA device (`payload_device`), while small CPU-side
metadata (the PS headers, the all-reduce input check) stays on CPU and goes over gloo, and the
async PS's receive from any source, which NCCL does not have, is a gloo receive of a CPU header.
A group of plain `nccl` (no gloo beside it) gets its metadata on CUDA too (`meta_device`) and
cannot serve an any-source receive (`any_source_ok`).

The decisions are pure functions of a backend string and the CUDA device index, so they are
tested without a GPU; `group_*` read them off an initialized group. On CUDA every timed region
is bracketed by `synchronize`: kernels and NCCL operations run asynchronously to the host.
"""

from __future__ import annotations

from typing import Any

import torch

MIXED_BACKEND = "cpu:gloo,cuda:nccl"


def backend_for(device: str | torch.device) -> str:
    """The process-group backend for ranks computing on `device`: `cpu:gloo,cuda:nccl` on CUDA
    (NCCL for device tensors, gloo for CPU-side metadata and any-source receives), else gloo."""
    return MIXED_BACKEND if torch.device(device).type == "cuda" else "gloo"


def _has(backend: str, name: str) -> bool:
    return name in str(backend).lower()


def payload_device(backend: str, cuda_index: int | None) -> torch.device:
    """Where data that crosses a group of `backend` lives: the rank's CUDA device when the
    group moves CUDA tensors over NCCL (and a CUDA device is set), else CPU."""
    if _has(backend, "nccl") and cuda_index is not None:
        return torch.device("cuda", cuda_index)
    return torch.device("cpu")


def meta_device(backend: str, cuda_index: int | None) -> torch.device:
    """Where small metadata (headers, checks) lives: CPU whenever gloo is in the group (plain
    gloo, or beside NCCL), the CUDA device only for a group of NCCL alone."""
    if _has(backend, "gloo") or not _has(backend, "nccl"):
        return torch.device("cpu")
    return payload_device(backend, cuda_index)


def any_source_ok(backend: str) -> bool:
    """Whether a receive from any source works: gloo has it, NCCL does not."""
    return _has(backend, "gloo") or not _has(backend, "nccl")


def group_backend(group: Any = None) -> str:
    """The backend string of an initialized group ("" without one): `cpu:gloo,cuda:nccl` for a
    mixed group (its backend configuration, not only the default device's backend)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return ""
    config = getattr(dist, "get_backend_config", None)
    if config is not None:
        try:
            return str(config(group))
        except (RuntimeError, ValueError, AttributeError):
            pass
    return str(dist.get_backend(group))


def _cuda_index() -> int | None:
    return torch.cuda.current_device() if torch.cuda.is_available() else None


def group_payload_device(group: Any = None) -> torch.device:
    """`payload_device` of this rank in `group` (the default group when None)."""
    return payload_device(group_backend(group), _cuda_index())


def group_meta_device(group: Any = None) -> torch.device:
    """`meta_device` of this rank in `group` (the default group when None)."""
    return meta_device(group_backend(group), _cuda_index())


def synchronize(device: str | torch.device | None) -> None:
    """Wait for every queued kernel and NCCL operation on a CUDA device (no-op on CPU): call it
    at both ends of a timed region, or the host clock times only the launches."""
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
