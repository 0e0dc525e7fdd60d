"""Emulated nodes of several GPUs: k engines per node namespace, and emulated per-message latency.

A node = one network namespace of an `EmulatedNetwork` with its one shaped veth (its NIC). With
`gpus_per_node` k, engines 0..k-1 live in node 0's namespace, k..2k-1 in node 1's, and so on (the
last node may hold fewer). The engines of a node:
- share the node's shaped link for everything that leaves the node (one veth, one tbf each way),
  so its counters carry the sum of the node's ranks' inter-node traffic;
- talk among themselves over the namespace's loopback: each engine's gloo binds the node's veth
  address, and a connection to one's own address is routed through `lo`, never the veth. The
  intra-node link is therefore UNSHAPED (loopback, as fast as this host's CPUs copy: it stands for
  NVLink / PCIe, which are 1-2 orders of magnitude faster than the inter-node link too) and is
  measured, not set: `pingpong_rows` within a node vs across nodes.

Ranks are grouped by node: each engine requests its ipyparallel id (`--IPEngine.id=i`), so rank
r (position in the sorted ids) is engine i = r and lives on node r // k, as the hierarchical
all-reduce assumes (DDLSTUDY_GPUS_PER_NODE is set on the engines). `start_node_cluster` checks
the mapping after start and refuses a cluster where it does not hold.

Latency: with `latency_s` > 0 every engine gets DDLSTUDY_LATENCY_S and DDLSTUDY_RANK_NODES, and the
Comm harness's transport delays each inter-node message (ddlstudy.collectives.latency).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from ddlstudy.collectives import latency as lat
from ddlstudy.network.emulated import netem

GPN_ENV = "DDLSTUDY_GPUS_PER_NODE"  # read by ddlstudy.collectives.hierarchical
INTRA_NODE = ("loopback inside the node's namespace, unshaped (engines of a node reach each "
              "other's veth address through lo); its speed is measured, not set")
MAX_GPUS_PER_NODE = 64


def nodes_for(engines: int, gpus_per_node: int) -> int:
    """Namespaces needed for `engines` engines at k per node (the last node may be smaller)."""
    if isinstance(gpus_per_node, bool) or not isinstance(gpus_per_node, int) or not (
            1 <= gpus_per_node <= MAX_GPUS_PER_NODE):
        raise ValueError(f"gpus_per_node must be an integer in 1..{MAX_GPUS_PER_NODE}, "
                         f"got {gpus_per_node!r}")
    return math.ceil(engines / gpus_per_node)


def engine_nodes(engines: int, gpus_per_node: int) -> list[int]:
    """Node index of each engine (= rank): r // k."""
    nodes_for(engines, gpus_per_node)
    return [r // gpus_per_node for r in range(engines)]


try:
    from traitlets import Dict, List

    class NodeEngineLauncher(netem.NetnsEngineLauncher):  # type: ignore[misc,valid-type]
        """An engine in its node's namespace that asks the controller for id = its index, so
        ranks (sorted ids) follow the launch order, i.e. are grouped by node."""

        def find_args(self) -> list[str]:
            return [*super().find_args(), f"--IPEngine.id={int(self.identifier)}"]

    class NodeEngineSetLauncher(netem.NetnsEngineSetLauncher):  # type: ignore[misc,valid-type]
        """Engines of `nodes` (one entry per engine; several may name one namespace)."""

        launcher_class = NodeEngineLauncher
        nodes = List(Dict(), config=True, help="per engine: {'netns': name, 'env': {...}}")

except (ImportError, TypeError, AttributeError):  # pragma: no cover - ipyparallel missing
    NodeEngineLauncher = NodeEngineSetLauncher = None  # type: ignore[assignment,misc]


def engine_env(net: netem.EmulatedNetwork, engines: int, gpus_per_node: int,
               latency_s: float = 0.0) -> list[dict[str, str]]:
    """Environment of each engine: its node's (netem.node_env), k, and the latency settings."""
    nodes = engine_nodes(engines, gpus_per_node)
    out = []
    for node in nodes:
        env = {**netem.node_env(net, node), GPN_ENV: str(gpus_per_node)}
        if latency_s > 0:
            env[lat.ENV_DELAY] = repr(float(latency_s))
            env[lat.ENV_RANK_NODES] = ",".join(map(str, nodes))
        out.append(env)
    return out


def start_node_cluster(net: netem.EmulatedNetwork, engines: int, gpus_per_node: int = 1,
                       latency_s: float = 0.0, **kwargs: Any) -> Any:
    """A started ddlstudy Cluster: engine r in namespace r // k of `net`, controller on the bridge.

    Raises netem.NetemError when the network has too few namespaces, or when the ranks did not
    come out grouped by node (a controller that refused the requested ids).
    """
    from traitlets.config import Config

    from ddlstudy.cluster.engines import Cluster

    needed = nodes_for(engines, gpus_per_node)
    if not net.is_up:
        raise netem.NetemError("the network is not up: call net.up() first")
    if needed > net.n_nodes:
        raise netem.NetemError(f"{engines} engines at {gpus_per_node} per node need {needed} "
                               f"namespaces; the network has {net.n_nodes}")
    envs = engine_env(net, engines, gpus_per_node, latency_s)
    cfg = Config()
    cfg.NodeEngineSetLauncher.nodes = [{"netns": env["DDLSTUDY_NETNS"], "env": env}
                                       for env in envs]
    cluster = Cluster(workers=engines, engine_launcher_class=NodeEngineSetLauncher,
                      controller_ip=net.bridge_ip, config=cfg, **kwargs).start()
    got = netem.rank_nodes(cluster, net)
    if got != engine_nodes(engines, gpus_per_node):
        cluster.stop()
        raise netem.NetemError(f"ranks are not grouped by node: rank -> node {got}, expected "
                               f"{engine_nodes(engines, gpus_per_node)}")
    return cluster


def describe(net: netem.EmulatedNetwork, engines: int, gpus_per_node: int,
             latency_s: float) -> dict[str, Any]:
    """The records' network fields for such a cluster (netem's describe() plus nodes, latency)."""
    info = net.describe()
    nodes = engine_nodes(engines, gpus_per_node)
    info.update({"gpus_per_node": gpus_per_node, "nodes": len(set(nodes)), "rank_nodes": nodes,
                 "intra_node_link": INTRA_NODE if gpus_per_node > 1 else None,
                 **lat.describe(latency_s, info)})
    if latency_s > 0:
        info["latency_note"] = lat.LABEL
    return info


def node_bytes(before: Sequence[dict[str, Any]], after: Sequence[dict[str, Any]]
               ) -> list[dict[str, Any]]:
    """Per node: what its shaped link carried between two `net.counters()` readings."""
    rows = []
    for b, a in zip(before, after, strict=True):
        rows.append({"node": a["node"], "netns": a["netns"],
                     **{k: a[k] - b[k] for k in ("bytes_sent", "bytes_recv", "packets_sent",
                                                 "packets_recv", "payload_sent_est",
                                                 "payload_recv_est")}})
    return rows


# ----------------------------------------------------------------------------- engine side
def pingpong_rows(pairs: Sequence[tuple[int, int]], sizes: Sequence[int], iters: int = 20,
                  warmup: int = 3, timeout_s: float = 60.0) -> list[dict[str, Any]]:
    """Ping-pong through the Comm harness's transport (DistTransport, so emulated latency
    applies): for each (a, b) and size, a sends to b, b sends back; one-way = round trip / 2.

    Runs on every rank of the process group at once; rank a returns its rows (median, min, max
    one-way seconds), the others nothing for that pair. Pairs run one after another.
    """
    import torch
    import torch.distributed as dist

    from ddlstudy.collectives.transports import DistTransport

    t = DistTransport()
    rank = dist.get_rank()
    rows = []
    for a, b in pairs:
        for size in sizes:
            buf = torch.zeros(max(1, size // 4), dtype=torch.float32)
            times = []
            for i in range(warmup + iters):
                if rank == a:
                    t0 = time.perf_counter()
                    t.isend(buf, b, 7).wait(timeout_s)
                    t.irecv(buf, b, 7).wait(timeout_s)
                    if i >= warmup:
                        times.append((time.perf_counter() - t0) / 2)
                elif rank == b:
                    t.irecv(buf, a, 7).wait(timeout_s)
                    t.isend(buf, a, 7).wait(timeout_s)
            if rank == a:
                times.sort()
                rows.append({"a": a, "b": b, "size_bytes": buf.numel() * 4,
                             "one_way_p50_s": times[len(times) // 2], "one_way_min_s": times[0],
                             "one_way_max_s": times[-1], "iters": iters})
        dist.barrier()
    return rows


def exchange(pairs: Sequence[tuple[int, int, int]], timeout_s: float = 120.0) -> dict[str, int]:
    """For each (a, b, nbytes): a and b send each other nbytes at once (DistTransport). Returns
    this rank's bytes sent to ranks of its node and of other nodes (DDLSTUDY_RANK_NODES or
    DDLSTUDY_GPUS_PER_NODE decide which is which)."""
    import os

    import torch
    import torch.distributed as dist

    from ddlstudy.collectives.transports import DistTransport

    t = DistTransport()
    rank = dist.get_rank()
    k = int(os.environ.get(GPN_ENV, "1") or 1)
    out = {"intra_bytes": 0, "inter_bytes": 0}
    for a, b, nbytes in pairs:
        if rank not in (a, b):
            continue
        peer = b if rank == a else a
        send = torch.ones(nbytes // 4, dtype=torch.float32)
        recv = torch.empty_like(send)
        handles = [t.irecv(recv, peer, 9), t.isend(send, peer, 9)]
        for h in handles:
            h.wait(timeout_s)
        out["intra_bytes" if rank // k == peer // k else "inter_bytes"] += nbytes
    dist.barrier()
    return out


def node_line(info: dict[str, Any]) -> str:
    """One line for a run's output: nodes, GPUs per node, intra-node link, latency."""
    k = int(info.get("gpus_per_node") or 1)
    nodes = len(set(info.get("rank_nodes") or [])) or info.get("n_nodes")
    intra = "; intra-node: loopback, unshaped" if k > 1 else ""
    delay = float(info.get("latency_emulated_s") or 0.0)
    latency = (f"latency {delay * 1e3:.3g} ms per inter-node message ({lat.LABEL})" if delay
               else "latency not emulated")
    return f"Nodes: {nodes} x {k} GPU(s), ranks -> nodes {info.get('rank_nodes')}{intra}; {latency}"
