"""Every strategy is real data-parallel SGD: same weights as one process on the union batch,
bytes on the wire as the algorithms predict, loss falling on real data."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from ddlstudy.cluster.engines import Cluster
from ddlstudy.strategies import (
    HEADER_BYTES,
    STRATEGIES,
    Layout,
    flat_params,
    make_buckets,
    make_strategy,
    servers_for,
    shard_bounds,
)
from ddlstudy.train.trainer import TrainConfig, TrainResult, train

STEPS = 5
B = 8  # per-worker batch
# mlp on sklearn digits at their native 8x8: no BatchNorm, so N workers x b == 1 x N*b exactly.
EXACT = dict(model="mlp", dataset="digits", dtype="float64", lr=0.5, steps=STEPS,
             warmup_steps=0, seed=3, eval=False, bucket_mb=0.05)
_SINGLE: dict[int, torch.Tensor] = {}


def _run(cluster: Cluster, **kw) -> TrainResult:
    config = TrainConfig(**{**EXACT, **kw})
    return train(cluster, config, progress=False, return_weights=True)


def _single(cluster: Cluster, global_batch: int) -> torch.Tensor:
    if global_batch not in _SINGLE:
        res = _run(cluster, strategy="single", workers=1, batch_size=global_batch)
        _SINGLE[global_batch] = res.weights
    return _SINGLE[global_batch]


# ----------------------------------------------------------------------------- pure functions
def test_layout_puts_servers_after_workers() -> None:
    lay = Layout(workers=3, servers=2)
    assert lay.world_size == 5
    assert [lay.role(r) for r in range(5)] == ["worker"] * 3 + ["server"] * 2
    assert lay.server_ranks == [3, 4]
    with pytest.raises(ValueError):
        lay.role(5)


def test_servers_default_per_strategy() -> None:
    """Each spec's default; a ps_* strategy has servers, nothing else does."""
    assert {s: servers_for(s, None) for s in ("single", "ps_sync", "ps_async", "ps_sharded",
                                               "allreduce", "ddp")} == \
        {"single": 0, "ps_sync": 1, "ps_async": 1, "ps_sharded": 2, "allreduce": 0, "ddp": 0}
    for name, spec in STRATEGIES.items():
        assert servers_for(name, None) == spec.default_servers
        assert (servers_for(name, None) > 0) == (spec.family == "ps")
    assert servers_for("ps_sharded", 3) == 3
    assert servers_for("allreduce", 3) == 0


def test_shard_bounds_cover_everything_once() -> None:
    bounds = shard_bounds(10, 3)
    assert bounds == [(0, 4), (4, 7), (7, 10)]


def test_buckets_respect_size_and_reverse_order() -> None:
    model = nn.Sequential(nn.Linear(100, 100), nn.Linear(100, 10))  # 10100 + 1010 params
    params = list(reversed(list(model.parameters())))
    buckets = make_buckets(params, bucket_bytes=4 * 2000)
    assert [len(b.params) for b in buckets] == [3, 1]  # 10+1000+100 | 10000 (too big to join)
    assert buckets[0].params[0] is params[0]
    assert sum(b.buf.numel() for b in buckets) == sum(p.numel() for p in params)
    one = make_buckets(params, bucket_bytes=1 << 30)
    assert len(one) == 1


def test_bad_strategy_and_single_with_workers() -> None:
    with pytest.raises(ValueError, match="unknown strategy 'nope'"):
        make_strategy("nope", nn.Linear(2, 2))
    with pytest.raises(ValueError, match="one worker"):
        make_strategy("single", nn.Linear(2, 2), workers=2)


def test_single_strategy_is_plain_sgd() -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 3).double()
    before = flat_params(model)
    x, y = torch.randn(5, 4, dtype=torch.float64), torch.tensor([0, 1, 2, 0, 1])
    loss = nn.functional.cross_entropy(model(x), y)
    grads = torch.autograd.grad(loss, list(model.parameters()))
    expected = before - 0.1 * torch.cat([g.reshape(-1) for g in grads])
    stats = make_strategy("single", model, lr=0.1).step(x, y)
    assert torch.allclose(flat_params(model), expected, atol=1e-14, rtol=0)
    assert stats.images == 5 and stats.bytes_sent == 0
    assert stats.loss == pytest.approx(float(loss.detach()))


# ----------------------------------------------------------------------------- equivalence
@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("strategy,extra", [
    ("allreduce", {"algorithm": "ring"}),
    ("allreduce", {"algorithm": "recursive_doubling"}),
    ("allreduce", {"algorithm": "ring", "overlap": False}),
    ("ps_sync", {}),
], ids=["ring", "recursive_doubling", "ring-no-overlap", "ps_sync"])
def test_matches_single_with_union_batch(cluster: Cluster, strategy: str, extra: dict,
                                         n: int) -> None:
    res = _run(cluster, strategy=strategy, workers=n, batch_size=B, **extra)
    ref = _single(cluster, n * B)
    assert res.weights is not None and res.weights.dtype == torch.float64
    assert (res.weights - ref).abs().max().item() < 1e-10
    # ... and the comparison can fail: one worker's batch alone gives other weights.
    assert (_single(cluster, B) - ref).abs().max().item() > 1e-6
    if strategy == "allreduce":
        assert res.summary["comm_s"].iloc[0] > 0


def test_ddp_matches_single(cluster: Cluster) -> None:
    res = _run(cluster, strategy="ddp", workers=2, batch_size=B)
    assert (res.weights - _single(cluster, 2 * B)).abs().max().item() < 1e-10


def test_ps_sharded_two_servers_matches_single(cluster: Cluster) -> None:
    res = _run(cluster, strategy="ps_sharded", workers=2, servers=2, batch_size=B)
    assert res.summary["servers"].iloc[0] == 2
    assert set(res.steps[res.steps.role == "server"]["rank"]) == {2, 3}
    assert (res.weights - _single(cluster, 2 * B)).abs().max().item() < 1e-10


def test_ps_async_one_worker_is_single(cluster: Cluster) -> None:
    res = _run(cluster, strategy="ps_async", workers=1, batch_size=B)
    assert (res.weights - _single(cluster, B)).abs().max().item() < 1e-10
    assert res.staleness == [0] * STEPS


def test_ps_async_records_staleness(cluster: Cluster) -> None:
    res = _run(cluster, strategy="ps_async", workers=2, batch_size=B, steps=8)
    stale = res.staleness
    assert len(stale) == 2 * 8  # one update per worker step, all applied
    assert all(s >= 0 for s in stale)
    servers = res.steps[res.steps.role == "server"]
    assert sorted(servers["source"].tolist()) == [0] * 8 + [1] * 8
    assert list(servers["step"]) == list(range(16))  # the server's version sequence
    # workers learn the staleness of each of their updates from the pull header
    workers = res.steps[res.steps.role == "worker"]
    assert sorted(workers["staleness"].astype(int)) == sorted(stale)
    row = res.row
    assert row["staleness_max"] == max(stale) and row["staleness_mean"] >= 0


# ----------------------------------------------------------------------------- bytes
@pytest.mark.parametrize("n", [2, 3])
def test_ring_bytes_match_analytic(cluster: Cluster, n: int) -> None:
    res = _run(cluster, strategy="allreduce", algorithm="ring", workers=n, batch_size=B,
               dtype="float32", steps=2)
    p = res.row["params"]
    w = res.steps[res.steps.role == "worker"]
    per_step_total = w.groupby("step")["bytes_sent"].sum()
    assert (per_step_total == 2 * (n - 1) * 4 * p).all()  # exact over ranks
    assert res.row["bytes_sent_per_step"] == pytest.approx(2 * (n - 1) / n * 4 * p, abs=1)
    assert res.row["bytes_recv_per_step"] == pytest.approx(2 * (n - 1) / n * 4 * p, abs=1)
    buckets = math.ceil(4 * p / (0.05 * 2**20)) + 1
    assert (w["bytes_sent"] - 2 * (n - 1) / n * 4 * p).abs().max() <= 8 * n * buckets


def test_ps_bytes_match_analytic(cluster: Cluster) -> None:
    n = 3
    res = _run(cluster, strategy="ps_sync", workers=n, batch_size=B, dtype="float32", steps=2)
    p = res.row["params"]
    msg = 4 * p + HEADER_BYTES  # gradient or weights plus the 16-byte [kind, version] header
    w = res.steps[res.steps.role == "worker"]
    assert (w["bytes_sent"] == msg).all() and (w["bytes_recv"] == msg).all()
    s = res.steps[res.steps.role == "server"]
    assert (s["bytes_recv"] == n * msg).all() and (s["bytes_sent"] == n * msg).all()
    assert res.row["server_bytes_recv_per_step"] == n * msg


def test_ps_sharded_bytes_split_across_servers(cluster: Cluster) -> None:
    res = _run(cluster, strategy="ps_sharded", workers=2, servers=2, batch_size=B,
               dtype="float32", steps=2)
    p = res.row["params"]
    w = res.steps[res.steps.role == "worker"]
    assert (w["bytes_sent"] == 4 * p + 2 * HEADER_BYTES).all()
    s = res.steps[res.steps.role == "server"]
    per_server = s.groupby("rank")["bytes_recv"].first().tolist()
    assert sum(per_server) == 2 * (4 * p + 2 * HEADER_BYTES)
    assert abs(per_server[0] - per_server[1]) <= 2 * 4


def test_ddp_bytes_are_ring_count_of_buckets(cluster: Cluster) -> None:
    res = _run(cluster, strategy="ddp", workers=2, batch_size=B, dtype="float32", steps=2)
    assert res.row["bytes_sent_per_step"] == 4 * res.row["params"]  # 2(N-1)/N = 1 for N=2


# ----------------------------------------------------------------------------- learning
@pytest.mark.parametrize("strategy", ["single", "ps_sync", "ps_async", "ps_sharded",
                                      "allreduce", "ddp"])
def test_loss_falls_on_digits(cluster: Cluster, strategy: str) -> None:
    workers = 1 if strategy == "single" else 2
    config = TrainConfig(model="mlp", dataset="digits", strategy=strategy, workers=workers,
                         batch_size=32, steps=30, warmup_steps=0, lr=0.2, seed=0,
                         model_kwargs={"activation": "relu"}, eval=True)
    res = train(cluster, config, progress=False)
    w = res.steps[res.steps.role == "worker"]
    by_step = w.groupby("step")["loss"].mean()
    assert by_step.iloc[-5:].mean() < 0.6 * by_step.iloc[:5].mean()
    assert res.row["test_accuracy"] > 0.5
