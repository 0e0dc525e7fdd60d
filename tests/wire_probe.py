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


def one_step_chunks(cluster: Any, config: Any, ratio: float, rel: float) -> Any:
    """Train `config` (3 timed steps, a checkpoint each: one step per chunk) with wchar as the
    wire counters; assert each worker's counted bytes per step are `ratio` x Psi x (p-1)/p
    (within `rel`) and that the wire saw the step alone (within 1 %, never less: nothing
    outside the step, such as a model gather, may land in a chunk). Returns the TrainResult."""
    import pytest

    from ddlstudy.train.trainer import train

    n = config.workers
    res = train(WcharCluster(cluster, n), config, progress=False, return_weights=True,
                network=NETWORK)
    assert (res.chunks["steps"] == 1).all() and len(res.chunks) == 3
    step = res.steps.loc[res.steps["role"] == "worker", "bytes_sent"].mean()
    psi = 8 * res.row["params"]  # float64
    assert step == pytest.approx(ratio * (n - 1) / n * psi, rel=rel)
    assert res.row["wire_bytes_sent_per_step"] == pytest.approx(step, rel=0.01)
    assert res.row["wire_bytes_sent_per_step"] >= step
    return res
