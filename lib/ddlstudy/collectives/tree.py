"""Binomial tree: reduce to rank 0, then broadcast; 2 ceil(lg p) full-buffer rounds."""

from __future__ import annotations

import torch

from ddlstudy.collectives.common import Comm, clg
from ddlstudy.collectives.placement import split


def tree(c: Comm, x: torch.Tensor) -> None:
    """Binomial-tree reduce to rank 0, then binomial broadcast: 2 ceil(lg p) full-buffer rounds."""
    p, r = c.size, c.rank
    if p == 1:
        return
    tmp = torch.empty_like(x)
    mask = 1
    while mask < p:  # reduce: receive from children r+mask until r's lowest set bit, then send up
        if r & mask:
            c.send(x, r - mask)
            break
        if r + mask < p:
            c.recv(tmp, r + mask)
            x.add_(tmp)
        mask <<= 1
    mask = 1
    while mask < p:  # broadcast: receive from the parent (r minus its lowest set bit) ...
        if r & mask:
            c.recv(x, r - mask)
            break
        mask <<= 1
    mask >>= 1
    while mask:  # ... then pass it on to the children, largest subtree first
        if r + mask < p:
            c.send(x, r + mask)
        mask >>= 1


def _powers_below(p: int) -> list[int]:
    out, m = [], 1
    while m < p:
        out.append(m)
        m <<= 1
    return out


def tree_traffic(nbytes: int, p: int, rank: int) -> tuple[int, int]:
    """One full buffer each way per tree edge at this rank (parent + children)."""
    children = sum(1 for m in _powers_below(p) if rank & (2 * m - 1) == 0 and rank + m < p)
    parent = 1 if rank else 0
    return (parent + children) * nbytes, (parent + children) * nbytes


def tree_tiers(nbytes: int, p: int, rank: int, k: int) -> dict[str, tuple[int, int]]:
    """`tree_traffic` per link tier: one full buffer each way with the parent (rank minus its
    lowest set bit) and with every child."""
    peers = [rank + m for m in _powers_below(p) if rank & (2 * m - 1) == 0 and rank + m < p]
    if rank:
        peers.append(rank - (rank & -rank))
    return split(rank, k, [(q, nbytes, nbytes) for q in peers])


def tree_terms(n: float, p: int, segment_bytes: int) -> tuple[float, float, float]:
    """Depth ceil(lg p) down and up, a full buffer per level."""
    d = clg(p)
    return 2 * d, 2 * d * n, d * n
