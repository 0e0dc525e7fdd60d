"""Engine-side timing of one algorithm (what `ddlstudy.bench.collectives` runs on each rank)."""

from __future__ import annotations

import time
from typing import Any

from ddlstudy.collectives.api import all_reduce
from ddlstudy.collectives.common import Traffic
from ddlstudy.collectives.device import group_payload_device, synchronize
from ddlstudy.collectives.verify import _dtype, rank_data


def time_algorithm(algorithm: str, count: int, dtype: str = "float32", op: str = "sum",
                   iters: int = 20, warmup: int = 5, timeout_s: float | None = None
                   ) -> dict[str, Any]:
    """Engine side: per-iteration wall time of one all-reduce on this rank.

    Each iteration restores the input (outside the timed region), aligns ranks with a barrier,
    then times one unchecked all-reduce; the driver takes the max over ranks per iteration (an
    all-reduce is done when its last rank is). The input lives where the group moves data (the
    rank's CUDA device under NCCL); on CUDA the timed region starts and ends with a
    synchronize, so it times the transfers, not their launch.
    """
    import torch.distributed as dist

    dt_ = _dtype(dtype)
    device = group_payload_device()
    src = rank_data(0, dist.get_rank(), count, dt_).to(device)
    x = src.clone()
    all_reduce(x, algorithm, op, timeout_s=timeout_s)  # validate inputs once, checked
    times, traffic = [], Traffic()
    for i in range(warmup + iters):
        x.copy_(src)
        synchronize(device)
        dist.barrier()
        t0 = time.perf_counter()
        traffic = all_reduce(x, algorithm, op, timeout_s=timeout_s, check=False)
        synchronize(device)
        elapsed = time.perf_counter() - t0
        if i >= warmup:
            times.append(elapsed)
    return {"rank": dist.get_rank(), "times_s": times, **traffic.as_dict()}
