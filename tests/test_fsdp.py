"""`fsdp` (torch fully_shard on the engines, gloo): the same weights as one process on the
union batch, and FSDP's own bytes are ZeRO-3's (1.5x a ring all-reduce)."""

from __future__ import annotations

import pytest
import torch

from ddlstudy.cluster.engines import Cluster
from ddlstudy.strategies import get_strategy
from ddlstudy.train.trainer import TrainConfig, TrainResult, train

EXACT = dict(model="mlp", dataset="digits", dtype="float64", lr=0.3, momentum=0.9,
             weight_decay=1e-3, steps=4, warmup_steps=0, seed=5, eval=False, batch_size=8)


def _run(cluster: Cluster, **kw) -> TrainResult:
    return train(cluster, TrainConfig(**{**EXACT, **kw}), progress=False, return_weights=True)


def test_fsdp_runs_here() -> None:
    assert get_strategy("fsdp").why_missing() == ""


def test_fsdp_matches_single_and_moves_zero3_bytes(cluster: Cluster) -> None:
    n = 2
    res = _run(cluster, strategy="fsdp", workers=n)
    ref = _run(cluster, strategy="single", workers=1, batch_size=n * 8).weights
    alone = _run(cluster, strategy="single", workers=1).weights
    assert (res.weights - ref).abs().max().item() < 1e-10
    assert (alone - ref).abs().max().item() > 1e-6  # the comparison can fail
    psi = 8 * res.row["params"]
    ratio = res.row["bytes_sent_per_step"] / (2 * (n - 1) / n * psi)
    assert ratio == pytest.approx(1.5, rel=0.10)  # padding to a multiple of N: a few bytes
    assert res.row["mem_param_bytes"] <= psi / n + 8 * 64
    assert res.row["mem_optstate_bytes"] == res.row["mem_param_bytes"]


def test_fsdp_resnet_float32(cluster: Cluster) -> None:
    res = train(cluster, TrainConfig(model="resnet18", dataset="synthetic", strategy="fsdp",
                                     workers=2, batch_size=2, steps=2, warmup_steps=0,
                                     eval=False), progress=False, return_weights=True)
    assert torch.isfinite(res.weights).all()
    assert res.row["bytes_sent_per_step"] == pytest.approx(1.5 * 4 * res.row["params"],
                                                           rel=0.02)
