"""Issue 21, items 4 and 5: the hierarchical all-reduce (correct against the float64 reference on
odd sizes and uneven nodes, bytes per tier = the step model's) and the fair parameter server
(`ps_overlap` with S separate servers, `ps_colocated` with S = N): same weights as one process,
bytes counted on the wire = the analytic PS traffic. Real process groups on the local engines."""

from __future__ import annotations

import math
import os

import pytest
import torch

from ddlstudy.analysis import costmodel
from ddlstudy.cluster.engines import Cluster
from ddlstudy.collectives import hierarchical as H
from ddlstudy.collectives.simulate import run_local
from ddlstudy.strategies.ps_overlap import HEADER_BYTES, analytic_traffic
from ddlstudy.train.trainer import TrainConfig, TrainResult, train

K = 2  # ranks per node: world 3 and 5 leave a last node of one


def _tolerance(elem: int, msgs: int) -> int:
    """Analytic traffic is exact when the buffer divides evenly: else one element per message."""
    return elem * msgs


def _check(res: list[dict], p: int, count: int, elem: int) -> None:
    bad = [(r["rank"], r["wrong"], r["max_abs_err"]) for r in res if r["wrong"]]
    assert not bad, (p, count, bad)
    nbytes = count * elem
    for r in res:
        want = H.tier_traffic(nbytes, p, r["rank"], K)
        for tier in ("intra", "inter"):
            got, want_t = r["tiers"][tier], want[tier]
            assert all(abs(g - w) <= _tolerance(elem, r["msgs"]) for g, w in
                       zip(got, want_t, strict=True)), (p, count, r["rank"], tier, got, want_t)
        assert r["sent_bytes"] == r["tiers"]["intra"][0] + r["tiers"]["inter"][0]
        assert r["recv_bytes"] == r["tiers"]["intra"][1] + r["tiers"]["inter"][1]


def _world(cluster: Cluster, p: int) -> None:
    cluster.init_process_group(world_size=p)
    for count in (1, 7, 1000):
        res = cluster.run(H.selfcheck_tiers, count, K, world_size=p)
        _check(res, p, count, 4)
    # 840 divides by every node size (2, 1) and node count (2, 3): counted = analytic exactly,
    # per tier, and equal to what the step model charges
    res = cluster.run(H.selfcheck_tiers, 840, K, "float64", world_size=p)
    sizes = H.node_sizes(p, K)
    for r in res:
        assert r["wrong"] == 0
        want = costmodel.hierarchical_traffic(840 * 8, sizes, r["rank"])
        assert {t: tuple(v) for t, v in r["tiers"].items()} == want, (p, r)
    # through the registry (all_reduce(x, "hierarchical")): total bytes = analytic_traffic
    res = cluster.run(H.selfcheck_tiers, 840, K, "float64", 0, 60.0, True, world_size=p)
    for r in res:
        t = H.tier_traffic(840 * 8, p, r["rank"], K)
        assert r["wrong"] == 0
        assert (r["sent_bytes"], r["recv_bytes"]) == (t["intra"][0] + t["inter"][0],
                                                      t["intra"][1] + t["inter"][1])


@pytest.mark.parametrize("p", [3, 4])
def test_hierarchical_matches_reference_and_tiers(cluster: Cluster, p: int) -> None:
    _world(cluster, p)


@pytest.mark.slow
def test_hierarchical_world_5(cluster8: Cluster) -> None:
    _world(cluster8, 5)


def test_hierarchical_in_process_world_5_uneven() -> None:
    """The same code on threads (world 5 = nodes of 2, 2, 1; and 3, 2 with k = 3): exact sums of
    small integers, and bytes per rank = the step model's per-tier sum where n divides."""
    for k, p in ((2, 5), (3, 5), (4, 7), (1, 3)):
        with H.using_gpus_per_node(k):
            for n in (1, 7, 1000, 840):
                xs = [torch.arange(n, dtype=torch.float64) * (r + 1) for r in range(p)]
                outs, traffic = run_local("hierarchical", xs)
                want = torch.arange(n, dtype=torch.float64) * p * (p + 1) / 2
                assert all(torch.equal(o, want) for o in outs), (k, p, n)
                if n == 840:
                    for r, t in enumerate(traffic):
                        tiers = costmodel.hierarchical_traffic(n * 8, H.node_sizes(p, k), r)
                        assert (t.sent_bytes, t.recv_bytes) == tuple(
                            sum(v[i] for v in tiers.values()) for i in (0, 1)), (k, p, r)


def test_tier_traffic_is_the_step_models() -> None:
    for p in range(1, 10):
        for k in range(1, 5):
            sizes = H.node_sizes(p, k)
            assert sum(sizes) == p and costmodel.Tiers(k).nodes(p) == sizes
            if p == 1:
                continue
            for r in range(p):
                assert H.tier_traffic(5040, p, r, k) == costmodel.hierarchical_traffic(
                    5040, sizes, r)


def test_gpus_per_node_setting() -> None:
    with H.using_gpus_per_node(3):
        assert H.gpus_per_node() == 3
    with pytest.raises(ValueError):
        H.set_gpus_per_node(0)


# ----------------------------------------------------------------------------- fair PS
STEPS = 4
B = 8
EXACT = dict(model="mlp", dataset="digits", dtype="float64", lr=0.5, steps=STEPS,
             warmup_steps=0, seed=3, eval=False, bucket_mb=0.05, momentum=0.9)
_SINGLE: dict[int, torch.Tensor] = {}


def _run(cluster: Cluster, **kw) -> TrainResult:
    return train(cluster, TrainConfig(**{**EXACT, **kw}), progress=False, return_weights=True)


def _single(cluster: Cluster, batch: int) -> torch.Tensor:
    if batch not in _SINGLE:
        _SINGLE[batch] = _run(cluster, strategy="single", workers=1, batch_size=batch).weights
    return _SINGLE[batch]


@pytest.mark.parametrize("strategy,n,servers", [
    ("ps_overlap", 3, 1), ("ps_overlap", 2, 2), ("ps_colocated", 3, None),
    ("ps_colocated", 4, None)], ids=["S=1", "S=N-separate", "S=N-colocated-3",
                                     "S=N-colocated-4"])
def test_fair_ps_matches_single(cluster: Cluster, strategy: str, n: int,
                                servers: int | None) -> None:
    res = _run(cluster, strategy=strategy, workers=n, servers=servers, batch_size=B)
    ref = _single(cluster, n * B)
    assert res.weights is not None
    assert (res.weights - ref).abs().max().item() < 1e-10
    assert (_single(cluster, B) - ref).abs().max().item() > 1e-6  # the check can fail


@pytest.mark.parametrize("strategy,n,servers", [
    ("ps_overlap", 3, 1), ("ps_overlap", 2, 2), ("ps_colocated", 4, None)],
    ids=["S=1", "S=N-separate", "S=N-colocated"])
def test_fair_ps_counted_bytes_are_analytic(cluster: Cluster, strategy: str, n: int,
                                            servers: int | None) -> None:
    res = _run(cluster, strategy=strategy, workers=n, servers=servers, batch_size=B,
               dtype="float32", steps=2, momentum=0.0)
    m = 4 * int(res.row["params"])
    colocated = strategy == "ps_colocated"
    s = n if colocated else servers
    buckets = math.ceil(m / (0.05 * 2**20)) + 1
    slack = 4 * buckets * n  # one element per bucket shard message
    for row in res.steps.itertuples():
        want = analytic_traffic(m, n, s, colocated, row.rank)
        assert abs(row.bytes_sent - want[0]) <= slack and abs(row.bytes_recv - want[1]) <= slack
    w = res.steps[res.steps.role == "worker"]
    if not colocated:
        # a worker: the model each way (2 x model) plus a header per server, exactly
        assert (w["bytes_sent"] == m + s * HEADER_BYTES).all() and (w["bytes_recv"] == m).all()
        srv = res.steps[res.steps.role == "server"]
        # each server link: N x model / S each way; all servers together N x model exactly
        per_step = srv.groupby("step")[["bytes_sent", "bytes_recv"]].sum()
        assert (per_step["bytes_sent"] == n * m).all()
        assert (per_step["bytes_recv"] == n * (m + s * HEADER_BYTES)).all()
    else:
        # S = N: each link 2(N-1)/N x model each way, all ranks together 2(N-1) x model exactly
        per_step = w.groupby("step")[["bytes_sent", "bytes_recv"]].sum()
        assert (per_step["bytes_sent"] == 2 * (n - 1) * m).all()
        assert (per_step["bytes_recv"] == 2 * (n - 1) * m).all()


def test_allreduce_gpus_per_node_option_reaches_the_collective() -> None:
    """`make_strategy("allreduce", ..., algorithm="hierarchical", gpus_per_node=k)` sets the
    process's ranks per node; without the option it falls back (env / 1), never a stale k."""
    from torch import nn

    from ddlstudy.strategies import make_strategy

    model = nn.Linear(4, 2)
    try:
        s = make_strategy("allreduce", model, algorithm="hierarchical", gpus_per_node=3,
                          overlap=False)
        assert H.gpus_per_node() == 3
        s.close()
        s = make_strategy("allreduce", model, algorithm="ring", overlap=False)
        assert H.gpus_per_node() == int(os.environ.get(H.ENV, "1"))
        s.close()
    finally:
        H.set_gpus_per_node(None)
