"""Hierarchical all-reduce (as Horovod's and NCCL's on nodes of several GPUs): ring
reduce-scatter inside each node, ring all-reduce of each rank's reduced shard across the nodes,
ring all-gather inside the node.

Nodes: ranks r // k share a node (k = `gpus_per_node()`, the last node may be smaller; on real
hosts the launcher sets k from them, and a k they contradict is refused). Inside a
node of k ranks, local rank j ends the reduce-scatter owning chunk j of `bounds(n, k)`. Across
nodes, the buffer is cut at every node's chunk boundaries (the common refinement of
`bounds(n, k_i)` over the node sizes k_i); each such segment has exactly one owner per node, and
those m owners (one per node, in node order) ring-all-reduce it. With equal node sizes the
segments are the shards and the owners are the same-index ranks of every node; with a smaller
last node a rank of that node takes part in several segments' rings. Segments run in ascending
order on every rank, so the lowest unfinished segment always has all its owners at it (no
deadlock). Per rank: 2(k-1)/k n on the intra tier and 2(m-1)/m of its 1/k shard on the inter
tier, what `ddlstudy.analysis.costmodel.hierarchical_traffic` charges (exact when n divides by
every k and m, else within one element per message).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ddlstudy.collectives.common import Comm, _pieces, bounds
from ddlstudy.collectives.placement import (  # noqa: F401 - re-exported: the placement rule
    ENV,
    check_layout,
    gpus_per_node,
    node_sizes,
    set_gpus_per_node,
    using_gpus_per_node,
)
from ddlstudy.collectives.ring import ring_terms, ring_traffic

_TAG_INTRA_RS, _TAG_INTRA_AG, _TAG_INTER = 3000, 4000, 10_000


def _segments(n: int, sizes: Sequence[int]) -> list[tuple[int, int]]:
    """The common refinement of every node's chunk boundaries: non-empty [a, b) segments."""
    cuts = sorted({c for k in set(sizes) for c in bounds(n, k)})
    return [(a, b) for a, b in zip(cuts, cuts[1:], strict=False) if b > a]


def _owner(a: int, n: int, k: int) -> int:
    """Local rank owning element a after the in-node reduce-scatter (chunk j on local rank j)."""
    b = bounds(n, k)
    return next(j for j in range(k) if b[j] <= a < b[j + 1])


def _ring(c: Comm, x: torch.Tensor, members: Sequence[int], pos: int, tag: int,
          scatter: bool, gather: bool) -> None:
    """Ring reduce-scatter and/or all-gather of x among `members` (global ranks, this rank at
    `pos`): afterwards member j holds chunk j of `bounds(len(x), len(members))` reduced (scatter)
    and every member holds every chunk (gather)."""
    k = len(members)
    if k == 1:
        return
    chunks = _pieces(x, k)
    right, left = members[(pos + 1) % k], members[(pos - 1) % k]
    if scatter:
        tmp = torch.empty_like(chunks[0])
        for t in range(k - 1):
            out, into = chunks[(pos - t - 1) % k], chunks[(pos - t - 2) % k]
            buf = tmp[: into.numel()]
            c.sendrecv(out, right, buf, left, tag=tag + t)
            into.add_(buf)
    if gather:
        for t in range(k - 1):
            c.sendrecv(chunks[(pos - t) % k], right, chunks[(pos - t - 1) % k], left,
                       tag=tag + k + t)


def _delta(c: Comm, before: tuple[int, int]) -> tuple[int, int]:
    return c.traffic.sent_bytes - before[0], c.traffic.recv_bytes - before[1]


def hierarchical_all_reduce(c: Comm, x: torch.Tensor, k: int) -> dict[str, tuple[int, int]]:
    """Sum flat `x` in place over all ranks with nodes of k ranks; returns this rank's
    (sent, received) bytes per tier, {"intra": ..., "inter": ...} (Comm counts the total)."""
    p, r, n = c.size, c.rank, x.numel()
    if k < 1:
        raise ValueError(f"gpus_per_node must be >= 1, got {k}")
    sizes = node_sizes(p, k)
    node, local = r // k, r % k
    first = [i * k for i in range(len(sizes))]
    here = list(range(first[node], first[node] + sizes[node]))
    tiers = {"intra": (0, 0), "inter": (0, 0)}
    if p == 1:
        return tiers
    start = (c.traffic.sent_bytes, c.traffic.recv_bytes)
    _ring(c, x, here, local, _TAG_INTRA_RS, scatter=True, gather=False)
    intra = _delta(c, start)
    if len(sizes) > 1:
        start = (c.traffic.sent_bytes, c.traffic.recv_bytes)
        for g, (a, b) in enumerate(_segments(n, sizes)):
            if _owner(a, n, sizes[node]) != local:
                continue
            members = [first[i] + _owner(a, n, sizes[i]) for i in range(len(sizes))]
            _ring(c, x[a:b], members, node, _TAG_INTER + 2 * len(sizes) * g, scatter=True,
                  gather=True)
        tiers["inter"] = _delta(c, start)
    start = (c.traffic.sent_bytes, c.traffic.recv_bytes)
    _ring(c, x, here, local, _TAG_INTRA_AG, scatter=False, gather=True)
    s2, r2 = _delta(c, start)
    tiers["intra"] = (intra[0] + s2, intra[1] + r2)
    return tiers


def hierarchical(c: Comm, x: torch.Tensor) -> None:
    """The registered `hierarchical`: nodes of `gpus_per_node()` ranks. ValueError where the
    hosts' map (DDLSTUDY_RANK_NODES, set on real hosts) places the ranks otherwise."""
    k = gpus_per_node()
    check_layout(c.size, k)
    hierarchical_all_reduce(c, x, k)


def tier_traffic(nbytes: int, p: int, rank: int, k: int) -> dict[str, tuple[int, int]]:
    """(sent, received) bytes of `rank` per tier, from the structure: the ring's 2(k_i-1)/k_i n
    inside its node of k_i ranks, 2(m-1)/m of its n/k_i shard across the m nodes (the step
    model's `hierarchical_traffic`, ranks numbered node by node)."""
    sizes = node_sizes(p, k)
    ki, m = sizes[rank // k], len(sizes)
    intra = ring_traffic(nbytes, ki, rank % k) if ki > 1 else (0, 0)
    inter = ring_traffic(nbytes // ki, m, rank // k) if m > 1 else (0, 0)
    return {"intra": tuple(intra), "inter": tuple(inter)}  # type: ignore[dict-item]


def hierarchical_traffic(nbytes: int, p: int, rank: int) -> tuple[int, int]:
    """Both tiers together, at this process's `gpus_per_node()` (the registry's traffic)."""
    t = tier_traffic(nbytes, p, rank, gpus_per_node())
    return t["intra"][0] + t["inter"][0], t["intra"][1] + t["inter"][1]


def hierarchical_terms(n: float, p: int, segment_bytes: int) -> tuple[float, float, float]:
    """Critical path on one flat link (alpha, beta, gamma): the two in-node ring phases of the
    largest node (k-1 messages, (k-1)/k n each) plus the ring across m nodes, whose k shards
    share the node's link (2(m-1)/m n through it). The step model's tiered version
    (`costmodel.step._hierarchical`) charges each tier on its own link."""
    k = min(gpus_per_node(), p)
    m = len(node_sizes(p, k))
    a, b, g = (0.0, 0.0, 0.0) if m == 1 else ring_terms(n, m, segment_bytes)
    frac = (k - 1) / k
    return 2 * (k - 1) + a, 2 * frac * n + b, frac * n + g / k


def selfcheck_tiers(count: int, k: int, dtype: str = "float32", seed: int = 0,
                    timeout_s: float = 60.0, registered: bool = False) -> dict[str, Any]:
    """Engine-side check (tests): one hierarchical all-reduce of `rank_data` over the default
    process group with nodes of k; #wrong against the float64 reference, bytes per tier
    (registered=True: through `all_reduce(x, "hierarchical")` with k set for the call, total
    bytes only)."""
    import torch.distributed as dist

    from ddlstudy.collectives.api import all_reduce
    from ddlstudy.collectives.transports import DistTransport
    from ddlstudy.collectives.verify import _dtype, count_wrong, rank_data

    r, p = dist.get_rank(), dist.get_world_size()
    x = rank_data(seed, r, count, _dtype(dtype))
    if registered:
        with using_gpus_per_node(k):
            traffic = all_reduce(x, "hierarchical", timeout_s=timeout_s)
        tiers: dict[str, tuple[int, int]] = {}
        sent, recv, msgs = traffic.sent_bytes, traffic.recv_bytes, traffic.sent_msgs
    else:
        c = Comm(DistTransport(), timeout_s)
        tiers = hierarchical_all_reduce(c, x, k)
        sent, recv, msgs = c.traffic.sent_bytes, c.traffic.recv_bytes, c.traffic.sent_msgs
    wrong, err = count_wrong(x, seed, p, "sum")
    return {"rank": r, "wrong": wrong, "max_abs_err": err, "tiers": tiers,
            "sent_bytes": sent, "recv_bytes": recv, "msgs": msgs}
