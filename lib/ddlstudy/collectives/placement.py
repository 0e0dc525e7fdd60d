"""Which ranks share a node: the one placement rule the collectives, the Comm harness's per-tier
byte counts and the emulated cluster agree on.

Ranks are placed node by node: global rank r lives on node r // k, with k = `gpus_per_node()`
(full nodes of k, the last node may hold fewer). `ddlstudy.network.emulated.nodes` starts its
engines that way and refuses a cluster where it does not hold. A leaf: torch-free, imports
nothing of ddlstudy, so `common.Comm` and `hierarchical` can both read it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

ENV = "DDLSTUDY_GPUS_PER_NODE"
TIERS = ("intra", "inter")  # the link tiers a byte can cross: inside its node, between nodes
_setting: dict[str, int | None] = {"k": None}


def gpus_per_node() -> int:
    """Ranks per node in this process: the value set by `set_gpus_per_node` (the allreduce
    strategy's `gpus_per_node` option), else the environment variable DDLSTUDY_GPUS_PER_NODE,
    else 1 (one GPU per node). Raises ValueError for a value below 1."""
    k = _setting["k"]
    if k is None:
        k = int(os.environ.get(ENV, "1") or 1)
    if k < 1:
        raise ValueError(f"gpus_per_node must be >= 1, got {k}")
    return k


def set_gpus_per_node(k: int | None) -> None:
    """Set this process's ranks per node (None: back to the environment / 1)."""
    if k is not None and (isinstance(k, bool) or int(k) != k or k < 1):
        raise ValueError(f"gpus_per_node must be an integer >= 1, got {k!r}")
    _setting["k"] = None if k is None else int(k)


def set_env(k: int | None) -> None:
    """Set (None: clear) this process's DDLSTUDY_GPUS_PER_NODE, what the emulated cluster gives
    its engines at start; for local engines in tests: `cluster.run(set_env, 2)`."""
    if k is None:
        os.environ.pop(ENV, None)
    else:
        set_gpus_per_node(k)  # validates
        set_gpus_per_node(None)
        os.environ[ENV] = str(int(k))


@contextmanager
def using_gpus_per_node(k: int | None) -> Iterator[None]:
    """`set_gpus_per_node(k)` for the duration of a block (tests, benches)."""
    old = _setting["k"]
    set_gpus_per_node(k)
    try:
        yield
    finally:
        _setting["k"] = old


def node_sizes(p: int, k: int) -> tuple[int, ...]:
    """Ranks per node: full nodes of k, the remainder on a last, smaller node."""
    return tuple([k] * (p // k) + ([p % k] if p % k else []))


def tier(rank: int, peer: int, k: int) -> str:
    """"intra" when global ranks `rank` and `peer` share a node of k ranks, else "inter"."""
    return "intra" if rank // k == peer // k else "inter"


def split(rank: int, k: int,
          exchanges: Iterable[tuple[int, int, int]]) -> dict[str, tuple[int, int]]:
    """{"intra": (sent, received), "inter": (...)} of `rank` from its (peer, sent, received)
    byte counts, at k ranks per node: the registry's analytic split of an algorithm whose
    structure lists its peers."""
    out = {t: [0, 0] for t in TIERS}
    for peer, sent, recv in exchanges:
        out[tier(rank, peer, k)][0] += sent
        out[tier(rank, peer, k)][1] += recv
    return {t: (a, b) for t, (a, b) in out.items()}
