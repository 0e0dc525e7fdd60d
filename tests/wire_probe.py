"""A stand-in for the emulated network's per-veth counters on the local test cluster: each
engine's socket writes (/proc/self/io wchar; gloo's TCP pairs write with write/writev, which
wchar counts, ipyparallel's zmq sends do not). `WcharCluster` wraps a cluster so the training
driver's own `WireBytes.mark/add` around each timed chunk call read these counters: the run's
`wire_bytes_sent_per_step` is then what each rank wrote to its sockets inside the timed chunk
calls, per timed step, exactly the window the veth counts on an emulated network."""

from __future__ import annotations

from typing import Any


def written() -> int:
    """Engine side: bytes this process has written (wchar)."""
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("wchar"))


written.__module__ = "__main__"  # shipped by value: engines cannot import tests/


class _WcharNet:
    """`counters(nodes)` as ddlstudy.network.emulated.netem's, from the engines' wchar."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster

    def counters(self, nodes: list[int]) -> list[dict[str, int]]:
        out = self.cluster.run(written, world_size=len(nodes), timeout=60)
        return [{"bytes_sent": int(w), "bytes_recv": 0} for w in out]


class WcharCluster:
    """`cluster` with wchar counters as its emulated network's (every other attribute is the
    cluster's own). Pass train() `network=NETWORK` so the records name no emulated network."""

    def __init__(self, cluster: Any, world: int) -> None:
        self._cluster = cluster
        self.emulated_network = _WcharNet(cluster)
        self.network_info = {"rank_nodes": list(range(world))}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cluster, name)


NETWORK = {"profile": "none", "scale": None, "latency_emulated": False,
           "note": "test: socket writes (wchar) stand in for the veth counters"}
