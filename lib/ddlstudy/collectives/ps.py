"""Parameter-server shapes as all-reduce algorithms: one central server, or every rank a shard."""

from __future__ import annotations

import torch

from ddlstudy.collectives.common import Comm, _pieces
from ddlstudy.collectives.placement import split


def ps(c: Comm, x: torch.Tensor) -> None:
    """Central parameter server on rank 0: gather, reduce in rank order, broadcast.

    The server's link carries (p-1) buffers each way: the PS bottleneck the papers measure.
    """
    p, r = c.size, c.rank
    if p == 1:
        return
    if r == 0:
        tmp = torch.empty_like(x)
        for peer in range(1, p):
            c.recv(tmp, peer)
            x.add_(tmp)
        c.wait_all([c.isend(x, peer) for peer in range(1, p)])
    else:
        c.send(x, 0)
        c.recv(x, 0)


def ps_sharded(c: Comm, x: torch.Tensor) -> None:
    """Every rank serves 1/p of the parameters: push shards to their servers, pull results.

    Same bytes per rank as the ring, 2(p-1)/p n, but in 2 rounds of p-1 concurrent messages.
    """
    p, r = c.size, c.rank
    if p == 1:
        return
    shards = _pieces(x, p)
    mine = shards[r]
    peers = [q for q in range(p) if q != r]
    incoming = {q: torch.empty_like(mine) for q in peers}
    handles = [c.irecv(incoming[q], q) for q in peers]
    sends = [c.isend(shards[q], q) for q in peers]
    c.wait_all(handles + sends)
    for q in peers:
        mine.add_(incoming[q])
    handles = [c.irecv(shards[q], q, tag=1) for q in peers]
    handles += [c.isend(mine, q, tag=1) for q in peers]
    c.wait_all(handles)


def ps_traffic(nbytes: int, p: int, rank: int) -> tuple[int, int]:
    """The server moves p-1 buffers each way, a worker one."""
    return ((p - 1) * nbytes, (p - 1) * nbytes) if rank == 0 else (nbytes, nbytes)


def ps_tiers(nbytes: int, p: int, rank: int, k: int) -> dict[str, tuple[int, int]]:
    """Per tier at k ranks per node: the server (rank 0) exchanges one buffer each way with
    every worker, intra-node for the workers of its own node."""
    peers = range(1, p) if rank == 0 else [0]
    return split(rank, k, [(q, nbytes, nbytes) for q in peers])


def ps_sharded_tiers(nbytes: int, p: int, rank: int, k: int) -> dict[str, tuple[int, int]]:
    """Per tier at k ranks per node: 2 n/p to and from every other rank (push, then pull)."""
    per_peer = 2 * (nbytes // p)
    return split(rank, k, [(q, per_peer, per_peer) for q in range(p) if q != rank])


def ps_terms(n: float, p: int, segment_bytes: int) -> tuple[float, float, float]:
    """The server's link carries p-1 buffers in and p-1 out, one after another."""
    return 2 * (p - 1), 2 * (p - 1) * n, (p - 1) * n
