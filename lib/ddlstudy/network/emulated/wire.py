"""Bytes per node counted on the emulated links: the per-veth counters of
ddlstudy.network.emulated.netem.

Under emulation every engine sits in its own namespace behind one veth, so that veth's counters
are the node's traffic, whatever library moved it (gloo, Horovod's gloo, TF's gRPC). The driver
reads them (from outside the namespaces) before and after each timed chunk call; the deltas,
summed over the timed chunks and divided by the timed steps, are each node's bytes per step.

What they include, as the records say (`bytes_counter`): Ethernet frames as the veth counts
them (TCP/IP headers and ACKs included; with segmentation offload on, one header per merged
segment) and the engine's own ipyparallel traffic to the controller (the chunk call and its
reply rows: kilobytes per chunk, against megabytes of gradients). With several ranks per node
(`gpus_per_node` k > 1) the node's veth carries what its k ranks sent to other nodes together
(their intra-node bytes go over the namespace's loopback, unseen): `wire_bytes_*_per_step` is
then each rank's share, the node's bytes / its ranks, comparable with the per-rank
`bytes_sent_inter_per_step` the Comm harness counts; `wire_node_bytes_*_per_step` is the node's
whole (mean over nodes). Before 2026-11-28 records of k > 1 held the node's whole in
`wire_bytes_*` (`python -m ddlstudy.records.migrate wire-per-rank` converted the reference).
On loopback there are no per-node counters: strategies keep their own count (ddlstudy's Comm
harness) or the analytic estimate, labelled by `bytes_source`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

COUNTER = ("veth counters: Ethernet frames incl. TCP/IP headers and ACKs, plus the engine's "
           "ipyparallel control traffic (KB per chunk)")


class WireBytes:
    """Accumulates each rank's sent / received bytes over the timed chunk calls."""

    def __init__(self, cluster: Any, world: int) -> None:
        self.net = getattr(cluster, "emulated_network", None)
        info = getattr(cluster, "network_info", None) or {}
        self.nodes: list[int] = list(info.get("rank_nodes") or [])[:world]
        if self.net is not None and len(self.nodes) < world:
            from ddlstudy.network.emulated.netem import rank_nodes

            self.nodes = rank_nodes(cluster, self.net)[:world]
        self.sent = [0] * world
        self.recv = [0] * world
        self._before: list[dict[str, Any]] | None = None

    @property
    def counting(self) -> bool:
        """True when the engines sit behind emulated links (else nothing is counted)."""
        return self.net is not None

    def _read(self) -> list[dict[str, Any]]:
        """Per rank, its node's counters: each node read once, so ranks of one node agree."""
        nodes = list(dict.fromkeys(self.nodes))
        by_node = dict(zip(nodes, self.net.counters(nodes), strict=True))
        return [by_node[n] for n in self.nodes]

    def mark(self, timed: bool = True) -> None:
        """Read the counters now: the start of a (timed) chunk call."""
        self._before = self._read() if self.counting and timed else None

    def add(self) -> None:
        """Add the deltas since `mark` (a timed chunk's traffic) to the totals."""
        if self._before is None:
            return
        for r, (a, b) in enumerate(zip(self._before, self._read(), strict=True)):
            self.sent[r] += b["bytes_sent"] - a["bytes_sent"]
            self.recv[r] += b["bytes_recv"] - a["bytes_recv"]
        self._before = None

    def per_step(self, steps: int) -> pd.DataFrame:
        """One row per rank: its node's bytes sent / received per timed step
        (`node_bytes_*_per_step`), and its share of them (`bytes_*_per_step`: the node's /
        the ranks on that node; the whole node's where each rank has a node of its own)."""
        steps = max(1, steps)
        world = len(self.sent)
        nodes = self.nodes if len(self.nodes) == world else list(range(world))
        share = [nodes.count(n) for n in nodes]
        return pd.DataFrame({"rank": range(world), "node": nodes, "ranks_on_node": share,
                             "node_bytes_sent_per_step": [s / steps for s in self.sent],
                             "node_bytes_recv_per_step": [r / steps for r in self.recv],
                             "bytes_sent_per_step": [s / steps / k
                                                     for s, k in zip(self.sent, share,
                                                                     strict=True)],
                             "bytes_recv_per_step": [r / steps / k
                                                     for r, k in zip(self.recv, share,
                                                                     strict=True)]})

    def apply_to_run(self, summary: pd.DataFrame, config: Any, steps: int) -> None:
        """`apply` for a torch-trainer run: roles from its layout; a strategy whose own bytes
        are analytic (its registry spec says so: ddp, horovod) gets the counted ones."""
        from ddlstudy.strategies import Layout
        from ddlstudy.strategies.registry import get_strategy

        layout = Layout(config.workers, config.n_servers)
        roles = [layout.role(r) for r in range(len(self.sent))]
        self.apply(summary, roles, steps,
                   replace=get_strategy(config.strategy).bytes_source == "analytic")

    def apply(self, summary: pd.DataFrame, roles: Sequence[str], steps: int,
              replace: bool) -> None:
        """Write the counted bytes into the run's summary row (in place).

        Always: wire_* columns (mean over workers of each rank's share of its node's link;
        servers summed), wire_node_* (mean over the workers' nodes) and `bytes_counter`.
        replace: the strategy's own figure was analytic (ddp, Horovod, TF), so the counted one
        becomes bytes_*_per_step and bytes_source "counted"; not where ranks share a node (the
        veth does not see their intra-node bytes, so it cannot stand for their total).
        """
        if not self.counting:
            return
        df = self.per_step(steps).assign(role=list(roles)[:len(self.sent)])
        workers, servers = df[df["role"] == "worker"], df[df["role"] == "server"]
        cols = {
            "wire_bytes_sent_per_step": float(workers["bytes_sent_per_step"].mean()),
            "wire_bytes_recv_per_step": float(workers["bytes_recv_per_step"].mean()),
            "wire_server_bytes_sent_per_step": (float(servers["bytes_sent_per_step"].sum())
                                                if len(servers) else float("nan")),
            "wire_server_bytes_recv_per_step": (float(servers["bytes_recv_per_step"].sum())
                                                if len(servers) else float("nan")),
            "bytes_counter": COUNTER,
        }
        shared = bool((df["ranks_on_node"] > 1).any())
        nodes = workers.drop_duplicates("node")
        cols["wire_node_bytes_sent_per_step"] = float(nodes["node_bytes_sent_per_step"].mean())
        cols["wire_node_bytes_recv_per_step"] = float(nodes["node_bytes_recv_per_step"].mean())
        for k, v in cols.items():
            summary[k] = v
        if replace and not shared:
            summary["bytes_sent_per_step"] = cols["wire_bytes_sent_per_step"]
            summary["bytes_recv_per_step"] = cols["wire_bytes_recv_per_step"]
            if len(servers):
                summary["server_bytes_sent_per_step"] = cols["wire_server_bytes_sent_per_step"]
                summary["server_bytes_recv_per_step"] = cols["wire_server_bytes_recv_per_step"]
            summary["bytes_source"] = "counted"
