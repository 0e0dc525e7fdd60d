"""Which ranks share a node: the one placement rule the collectives, the Comm harness's per-tier
byte counts and the emulated cluster agree on.

Ranks are placed node by node: global rank r lives on node r // k, with k = `gpus_per_node()`
(full nodes of k, the last node may hold fewer). `ddlstudy.network.emulated.nodes` starts its
engines that way and refuses a cluster where it does not hold.

Where the hosts are real (a launcher's `--hosts h0:2,h1:2`), the node of each rank is a fact,
not a setting: the driver's Cluster gives every engine DDLSTUDY_RANK_NODES (node of each global
rank, ranks grouped by host) and, where the hosts hold full nodes of one size k (the last may
hold fewer), DDLSTUDY_GPUS_PER_NODE=k (`host_env`). The map then decides each byte's tier
(`node_of`, `tier`), and an algorithm that places by k (hierarchical) refuses a k the map
contradicts (`check_layout`). A leaf: torch-free, imports nothing of ddlstudy, so `common.Comm`
and `hierarchical` can both read it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

ENV = "DDLSTUDY_GPUS_PER_NODE"
ENV_RANK_NODES = "DDLSTUDY_RANK_NODES"  # node of each global rank, e.g. "0,0,1,1"
TIERS = ("intra", "inter")  # the link tiers a byte can cross: inside its node, between nodes
_setting: dict[str, int | None] = {"k": None}
_maps: dict[str, tuple[int, ...]] = {}


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


def set_rank_nodes(nodes: Sequence[int] | None) -> None:
    """Set (None: clear) this process's DDLSTUDY_RANK_NODES, what the Cluster gives engines on
    several hosts; for local engines in tests: `cluster.run(set_rank_nodes, [0, 0, 1, 2])`."""
    if nodes is None:
        os.environ.pop(ENV_RANK_NODES, None)
    else:
        os.environ[ENV_RANK_NODES] = format_rank_nodes(nodes)


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


def parse_rank_nodes(text: str) -> tuple[int, ...]:
    """"0,0,1,1" -> (0, 0, 1, 1); "" -> (). ValueError (naming DDLSTUDY_RANK_NODES) for anything
    but node indices >= 0 that start at 0 and never go back (ranks are grouped by node)."""
    try:
        nodes = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"{ENV_RANK_NODES} must be comma-separated node indices, "
                         f"got {text!r}") from None
    steps = zip(nodes, nodes[1:], strict=False)
    if nodes and (nodes[0] != 0 or any(b not in (a, a + 1) for a, b in steps)):
        raise ValueError(f"{ENV_RANK_NODES} must group ranks node by node (0,0,1,1,2...), "
                         f"got {text!r}")
    return nodes


def format_rank_nodes(nodes: Sequence[int]) -> str:
    """(0, 0, 1) -> "0,0,1", the variable's form; ValueError as `parse_rank_nodes` for a map
    that does not group ranks node by node."""
    text = ",".join(map(str, nodes))
    parse_rank_nodes(text)
    return text


def rank_nodes() -> tuple[int, ...]:
    """This process's DDLSTUDY_RANK_NODES (node of each global rank), () when unset."""
    text = os.environ.get(ENV_RANK_NODES, "")
    if text not in _maps:
        _maps[text] = parse_rank_nodes(text)
    return _maps[text]


def node_of(rank: int, k: int) -> int:
    """Node of global `rank`: the launcher's map (DDLSTUDY_RANK_NODES) where it names the rank,
    else rank // k."""
    nodes = rank_nodes()
    return nodes[rank] if rank < len(nodes) else rank // k


def tier(rank: int, peer: int, k: int) -> str:
    """"intra" when global ranks `rank` and `peer` share a node (the map's, else nodes of k
    ranks), else "inter"."""
    return "intra" if node_of(rank, k) == node_of(peer, k) else "inter"


def sizes_of(nodes: Sequence[int]) -> tuple[int, ...]:
    """Ranks per node of a rank -> node map grouped node by node: (0, 0, 1) -> (2, 1)."""
    return tuple(list(nodes).count(i) for i in range(max(nodes) + 1)) if nodes else ()


def k_of(nodes: Sequence[int]) -> int | None:
    """The k for which `nodes` is rank // k (full nodes of k, a smaller last one), else None:
    (0, 0, 1, 1) -> 2, (0, 0, 1) -> 2, (0, 1, 1) -> None."""
    sizes = sizes_of(nodes)
    if not sizes:
        return None
    return sizes[0] if node_sizes(len(nodes), sizes[0]) == sizes else None


def check_layout(p: int, k: int) -> None:
    """Raise ValueError when the launcher's map (DDLSTUDY_RANK_NODES) places the first p ranks
    otherwise than nodes of k: an algorithm that groups ranks by k would cross nodes it thinks
    it stays in. Silent without a map."""
    nodes = rank_nodes()[:p]
    if not nodes or list(nodes) == [r // k for r in range(len(nodes))]:
        return
    fit = k_of(nodes)
    fix = (f"set gpus_per_node {fit} or leave it out" if fit is not None else
           "give every host the same number of engines (the last may have fewer), largest first")
    raise ValueError(f"gpus_per_node {k} does not match the hosts: ranks sit on nodes "
                     f"{','.join(map(str, nodes))} ({'+'.join(map(str, sizes_of(nodes)))} per "
                     f"node): {fix}")


def host_env(hosts: Sequence[str]) -> dict[str, str]:
    """Environment for engines whose ranks (in order) run on `hosts` (hostnames, grouped by
    host): {} on one host; else DDLSTUDY_RANK_NODES, plus DDLSTUDY_GPUS_PER_NODE where the
    hosts hold full nodes of one size. ValueError when the ranks are not grouped by host."""
    if len(set(hosts)) < 2:
        return {}
    order: list[str] = []
    for h in hosts:
        if h not in order:
            order.append(h)
    nodes = [order.index(h) for h in hosts]
    env = {ENV_RANK_NODES: format_rank_nodes(nodes)}
    if (k := k_of(nodes)) is not None:
        env[ENV] = str(k)
    return env


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
