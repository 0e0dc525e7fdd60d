"""Compute replay in the trainer: a replayed step waits its target, gradients still meet for
real (same bytes, the right average), and a run inside an emulated network records that network."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from ddlstudy.cluster.engines import Cluster
from ddlstudy.experiments.grid import dilation, emulated_cluster
from ddlstudy.network.emulated import netem
from ddlstudy.strategies import flat_params, replay_gradients
from ddlstudy.train.trainer import TrainConfig, conditions, train
from ddlstudy.workload.models import build_model

AVAILABLE, WHY = netem.available()
MLP_S = 0.05  # the reference step of the table below


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A replay table with one row: mlp at the MNIST shape, batch 8, 50 ms."""
    path = tmp_path_factory.mktemp("replay") / "ref.csv"
    path.write_text(f"model,shape,batch_size,compute_s_p50\nmlp,mnist,8,{MLP_S}\n")
    return str(path)


def _config(table: str, **kw: object) -> TrainConfig:
    base = dict(model="mlp", shape="mnist", dataset="synthetic", batch_size=8, steps=4,
                warmup_steps=1, compute="replay", replay_source=table)
    return TrainConfig(**{**base, **kw})


@pytest.mark.parametrize("kw,match", [
    ({"compute": "real", "time_dilation": 10.0}, "only applies to compute='replay'"),
    ({"compute": "simulated"}, "unknown compute 'simulated'"),
    ({"time_dilation": 0.0}, "time_dilation must be > 0"),
])
def test_bad_replay_config_is_one_line(kw: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match) as err:
        _config("gpu", **kw).validate()
    assert "\n" not in str(err.value)


def test_replayed_compute_lasts_its_target(cluster: Cluster, table: str) -> None:
    """Overlapped all-reduce (hooks firing, the comm thread busy) must not cut or stretch the
    wait: never shorter than the target, and its median within 5 % (single steps may overshoot
    when the loaded host schedules the engine late: that is the host, not the replay)."""
    config = _config(table, strategy="allreduce", workers=2, time_dilation=3.0)
    result = train(cluster, config, progress=False)
    target = MLP_S * 3.0
    workers = result.steps[result.steps["role"] == "worker"]
    assert len(workers) == 2 * config.steps
    assert (workers["compute_s"] >= target * (1 - 1e-3)).all()
    assert workers["compute_s"].median() == pytest.approx(target, rel=0.05)
    row = result.row
    assert row["compute_mode"] == "replay" and row["replay_s"] == MLP_S
    assert row["time_dilation"] == 3.0
    assert row["images_per_sec_cluster"] == pytest.approx(3.0 * row["images_per_sec"])
    assert set(result.steps["compute_mode"]) == {"replay"}
    assert "compute replayed from" in conditions(config)


def test_a_lone_replayed_worker_records_its_replay_lag(cluster: Cluster, table: str) -> None:
    """summary.csv's replay_lag: compute_s over the replayed step, - 1, for one worker without
    servers (analysis.validity), whatever the host's load made it; NaN at two workers."""
    one = train(cluster, _config(table, strategy="allreduce", workers=1, time_dilation=3.0),
                progress=False).row
    expect = one["compute_s"] / (one["replay_s"] * one["time_dilation"]) - 1
    assert one["replay_lag"] == pytest.approx(expect) and one["replay_lag"] > -0.01
    two = train(cluster, _config(table, strategy="allreduce", workers=2, time_dilation=3.0),
                progress=False).row
    assert math.isnan(two["replay_lag"])


@pytest.mark.parametrize("strategy", ["allreduce", "ps_sync", "ddp"])
def test_replay_moves_real_gradients_and_averages_them(cluster: Cluster, table: str,
                                                       strategy: str) -> None:
    """One timed step: weights = w0 - lr x mean of the ranks' gradients (rank r sends the seeded
    draw x (1 + r)), and each worker sends what the real mode sends. ddp replays through its
    own C++ reducer (a stand-in module's backward), so its buckets average the same gradients."""
    n, lr = 3, 0.5
    config = _config(table, strategy=strategy, algorithm="ring", workers=n, steps=1,
                     warmup_steps=0, lr=lr)
    result = train(cluster, config, progress=False, return_weights=True)
    torch.manual_seed(config.seed)
    model = build_model("mlp", "mnist")
    params = [p for p in model.parameters() if p.requires_grad]
    mean = torch.cat([g.reshape(-1) for g in replay_gradients(params, config.seed, 0)])
    mean *= sum(1 + r for r in range(n)) / n
    expected = flat_params(model) - lr * mean
    assert result.weights is not None
    torch.testing.assert_close(result.weights, expected, rtol=1e-5, atol=1e-6)
    model_bytes = sum(p.numel() for p in params) * 4
    sent = result.row["bytes_sent_per_step"]
    if strategy in ("allreduce", "ddp"):  # ring: 2(N-1)/N of every bucket, as in real mode
        assert sent == pytest.approx(2 * (n - 1) / n * model_bytes, rel=1e-3)
        real = train(cluster, TrainConfig(**{**config.to_dict(), "compute": "real"}),
                     progress=False)
        assert real.row["bytes_sent_per_step"] == sent
    else:  # PS: the whole gradient plus a 16-byte header
        assert sent == model_bytes + 16


def test_engines_of_a_host_share_one_replay_draw(cluster: Cluster) -> None:
    """Every local engine maps the same file for replay's seeded draw (one copy per host, not
    one per engine) and reads the values a private draw has."""
    from ddlstudy.strategies.base import replay_draw, replay_draw_here

    params = [torch.zeros(64, 32), torch.zeros(7), torch.zeros(3, 3, 5)]
    drawn = cluster.run(replay_draw_here, params, 11)
    private = replay_draw(params, 11)
    for got in drawn:
        for g, want in zip(got, private, strict=True):
            torch.testing.assert_close(g, want, rtol=0, atol=0)
    files = list((Path(cluster.run_dir) / "tmp" / "shared").glob("replay-draw-11-*.f32"))
    assert len(files) == 1 and files[0].stat().st_size == 4 * sum(p.numel() for p in params)


@pytest.mark.netns
@pytest.mark.skipif(not AVAILABLE, reason=f"network namespaces unavailable: {WHY}")
def test_run_inside_emulated_network_records_it(tmp_path: Path, table: str) -> None:
    with emulated_cluster("25GbE", 2, scale=0.01, collective_timeout_s=60) as cluster:
        assert cluster.emulated_network is not None
        config = _config(table, strategy="allreduce", workers=2, steps=1, warmup_steps=0,
                         time_dilation=dilation(cluster, "replay"))
        result = train(cluster, config, tmp_path / "run", progress=False)
        namespaces = list(cluster.emulated_network.namespaces)
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    net = meta["network"]
    assert net["profile"] == "25GbE" and net["scale"] == 0.01
    assert net["real_rate_bps"] == 25e9 and net["emulated_rate_bps"] == pytest.approx(25e7)
    assert net["latency_emulated"] is False and sorted(net["rank_nodes"]) == [0, 1]
    assert meta["compute_mode"] == "replay" and meta["time_dilation"] == pytest.approx(100.0)
    assert result.row["network"] == "25GbE" and result.row["network_scale"] == 0.01
    assert "links shaped to 25GbE-like x 0.01" in conditions(config, net)
    left = set(netem._netns_list())
    assert not left & set(namespaces), "namespaces left behind"
