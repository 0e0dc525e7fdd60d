"""Ring reduce-scatter and all-gather on the counting harness: the two halves of the ring
all-reduce, apart, as sharded data parallelism (ZeRO, FSDP) uses them.

Shard r of a flat tensor of n elements is `bounds(n, p)[r]:bounds(n, p)[r + 1]` (the ring's own
chunking), so rank r owns shard r. Each half sends (p-1)/p of the tensor per rank in p-1 steps;
together they move exactly what `ring` moves (2(p-1)/p n), which is why ZeRO stages 1 and 2
cost what data parallelism costs and stage 3 (one more all-gather) 1.5x.
"""

from __future__ import annotations

import torch

from ddlstudy.collectives.common import Comm, _pieces, bounds


def shard_range(n: int, p: int, r: int) -> tuple[int, int]:
    """(start, stop) of rank r's shard of n elements over p ranks."""
    b = bounds(n, p)
    return b[r], b[r + 1]


def reduce_scatter(c: Comm, x: torch.Tensor, tag: int = 0) -> torch.Tensor:
    """Sum `x` (flat, in place) over ranks so that shard `c.rank` holds the total; returns that
    shard (a view of x). Other shards hold partial sums afterwards. Step k sends the chunk
    accumulated in step k-1 to the right and adds the left's into chunk r-k-2, so after p-1
    steps chunk r has every rank's term."""
    p, r = c.size, c.rank
    chunks = _pieces(x, p)
    if p == 1:
        return chunks[0]
    right, left = (r + 1) % p, (r - 1) % p
    tmp = torch.empty_like(chunks[0])
    for k in range(p - 1):
        out, into = chunks[(r - k - 1) % p], chunks[(r - k - 2) % p]
        buf = tmp[: into.numel()]
        c.sendrecv(out, right, buf, left, tag=tag + k)
        into.add_(buf)
    return chunks[r]


def all_gather(c: Comm, x: torch.Tensor, tag: int = 0) -> None:
    """Every rank's shard r of `x` (flat) to every rank, in place, around the ring (p-1 steps)."""
    p, r = c.size, c.rank
    if p == 1:
        return
    chunks = _pieces(x, p)
    right, left = (r + 1) % p, (r - 1) % p
    for k in range(p - 1):
        c.sendrecv(chunks[(r - k) % p], right, chunks[(r - k - 1) % p], left, tag=tag + k)
