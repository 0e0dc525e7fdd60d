"""Horovod and TensorFlow strategies (ddlstudy.frameworks): real engines, 2 workers, tiny MLP.

Equivalence where the math says so: horovod, tf_allreduce and tf_ps_sync after k steps equal
single-process SGD on the global batch (float64); tf_ps_async applies stale updates. A framework
that is not installed skips its tests with the one line that names the fix (`make setup`
installs both, so CI runs them).
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import torch

from ddlstudy import frameworks
from ddlstudy.cluster.engines import Cluster
from ddlstudy.train.trainer import TrainConfig, train

TINY = dict(model="mlp", shape=(1, 4, 4), num_classes=3, dataset="synthetic", workers=2,
            batch_size=4, warmup_steps=1, steps=2, lr=0.5, dtype="float64",
            model_kwargs={"hidden": 6, "hidden1": 5})
# One Horovod setting set in the engines' environment, the rest left at Horovod's defaults:
# the records must carry both (frameworks.horovod.tuning).
HVD_ENV = {"HOROVOD_CYCLE_TIME": "2.5"}


def _needs(strategy: str) -> None:
    why = frameworks.missing(strategy)
    if why:
        pytest.skip(why)


def test_missing_framework_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.split(".")[0] in ("horovod", "tensorflow")
                        else real(name, *a))
    for strategy in frameworks.FRAMEWORK_STRATEGIES:
        line = frameworks.missing(strategy)
        assert line is not None and "make setup" in line and "\n" not in line
    assert frameworks.missing("allreduce") is None


def test_cli_missing_framework_exits_2(monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    from ddlstudy.cli import train as cli

    monkeypatch.setattr(frameworks, "missing", lambda s: f"{s}: run `make setup`")
    try:  # the config is checked before any engine starts
        code = cli.main(["--strategy", "horovod", "--model", "mlp", "--workers", "2"])
    except SystemExit as exc:
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "make setup" in err[0]


# resnet152 and vgg19 are built by the same code as resnet50 and vgg16 (more blocks, a longer
# layer list) and take most of the build time (12 s of 27 s on the loaded host): slow only.
DEEP_TWINS = ("resnet152", "vgg19")


def _check_keras_counts(names) -> None:
    from ddlstudy.frameworks.keras_models import build_keras_model, trainable_count
    from ddlstudy.workload.models import _build_meta

    for name in names:  # CIFAR shapes: MNIST differs only in stem and classifier
        torch_n = sum(p.numel() for p in _build_meta(name, "cifar").parameters()
                      if p.requires_grad)
        keras_n = trainable_count(build_keras_model(name, "cifar"))
        assert abs(keras_n / torch_n - 1) < 0.01, (name, keras_n, torch_n)


def test_keras_models_match_torch_parameter_counts() -> None:
    _needs("tf_allreduce")
    from ddlstudy.frameworks.keras_models import KERAS_MODELS, build_keras_model

    assert set(DEEP_TWINS) <= set(KERAS_MODELS)
    _check_keras_counts([m for m in KERAS_MODELS if m not in DEEP_TWINS])
    with pytest.raises(ValueError, match="TF strategies train: mlp"):
        build_keras_model("googlenet")


@pytest.mark.slow
def test_deep_keras_twins_match_torch_parameter_counts() -> None:
    _needs("tf_allreduce")
    _check_keras_counts(DEEP_TWINS)


def test_horovod_tuning_defaults_and_overrides() -> None:
    from ddlstudy.frameworks.horovod import tuning

    assert tuning({}) == {"hvd_fusion_threshold_bytes": 128 << 20, "hvd_cycle_time_ms": 1.0,
                          "hvd_cache_capacity": 1024, "hvd_autotune": 0, "hvd_tuning_set": ""}
    got = tuning({"HOROVOD_FUSION_THRESHOLD": "0", "HOROVOD_CACHE_CAPACITY": ""})
    assert got["hvd_fusion_threshold_bytes"] == 0 and got["hvd_cache_capacity"] == 1024
    assert got["hvd_tuning_set"] == "HOROVOD_FUSION_THRESHOLD"
    with pytest.raises(ValueError, match="HOROVOD_CYCLE_TIME='fast' is not a number"):
        tuning({"HOROVOD_CYCLE_TIME": "fast"})


@pytest.fixture(scope="module")
def horovod_runs():
    """Horovod and single-process SGD on one 2-engine cluster (one start for the module's
    Horovod tests): on 10GbE-like links x 0.01 where namespaces can be made, else loopback."""
    _needs("horovod")
    from dataclasses import replace

    from ddlstudy.experiments.grid import dilate, emulated_cluster
    from ddlstudy.network.emulated import netem

    # a 64-wide MLP: a gradient big enough to stand out of Horovod's control traffic on the wire
    config = TrainConfig(**{**TINY, "strategy": "horovod",
                            "model_kwargs": {"hidden": 64, "hidden1": 64}})
    single = replace(config, strategy="single", workers=1,
                     batch_size=TINY["workers"] * TINY["batch_size"])
    emulated = netem.available()[0]
    start = (emulated_cluster("10GbE", 2, 0.01, offload_off=False, collective_timeout_s=120,
                              engine_env=HVD_ENV) if emulated
             else Cluster(workers=2, collective_timeout_s=60, engine_env=HVD_ENV))
    with start as cluster:
        config, single = dilate([config, single], cluster) if emulated else (config, single)
        res = train(cluster, config, progress=False, return_weights=True)
        one = train(cluster, single, progress=False, return_weights=True)
    return res, one, emulated


def test_horovod_matches_single_process(horovod_runs) -> None:
    res, one, _ = horovod_runs
    assert res.row["images_per_sec"] > 0
    torch.testing.assert_close(res.weights, one.weights, rtol=1e-9, atol=1e-12)
    assert (res.steps["comm_wait_s"] >= 0).all() and res.row["bytes_sent_per_step"] > 0
    # the tuning in effect on the engines is on record: the one override and the defaults
    assert res.row["hvd_cycle_time_ms"] == 2.5 and res.row["hvd_tuning_set"] == \
        "HOROVOD_CYCLE_TIME"
    assert res.row["hvd_fusion_threshold_bytes"] == 128 << 20


@pytest.fixture(scope="module")
def tf_run():
    """run(strategy, **kw) on one 4-engine cluster for the module's TF tests. A TF server
    cannot restart in a process, so each run after the first gets fresh engines from
    Cluster.restart (same controller; the old engines SIGKILLed at once, where a stop waits
    a grace period that TF's SIGTERM handler uses up)."""
    _needs("tf_ps_sync")
    used = [False]
    with Cluster(workers=4, collective_timeout_s=60) as cluster:
        def run(strategy: str, **kw: object):
            if used[0]:
                cluster.restart()
            used[0] = True
            config = TrainConfig(**{**TINY, "strategy": strategy, **kw})
            return train(cluster, config, progress=False, return_weights=True)

        yield run


@pytest.mark.parametrize("strategy", ["tf_allreduce", "tf_ps_sync"])
def test_tf_synchronous_matches_single_process(strategy: str, tf_run) -> None:
    _needs(strategy)
    from ddlstudy.frameworks.tf_strategies import reference_sgd

    res = tf_run(strategy)
    config = res.config
    start = res.initial_weights.numpy()
    ref = reference_sgd(config.to_dict(), config.warmup_steps + config.steps, start)
    assert res.row["images_per_sec"] > 0
    assert not np.allclose(ref, start)  # the steps moved the weights
    np.testing.assert_allclose(res.weights.numpy(), ref, rtol=1e-9, atol=1e-12)
    if strategy == "tf_ps_sync":
        assert res.row["servers"] == 1 and res.row["staleness_max"] == 0


def test_tf_ps_async_updates_are_stale(tf_run, tmp_path) -> None:
    """Staleness is made to happen, not hoped for: each closure waits a replayed 0.6 s between
    reading the variables and applying its update, and the coordinator hands the two workers
    their closures at once, so one worker's update lands inside the other's window (on an idle
    host as on a loaded one, where a tiny model's closures could run one after another)."""
    _needs("tf_ps_async")
    from ddlstudy.cluster.engines import ClusterError

    table = tmp_path / "slow.csv"
    pd.DataFrame([{"model": "mlp", "shape": "mnist", "batch_size": 4,
                   "compute_s_p50": 0.6}]).to_csv(table, index=False)
    slow = dict(steps=3, shape="mnist", num_classes=10, compute="replay",
                replay_source=str(table))
    try:
        res = tf_run("tf_ps_async", **slow)
    except ClusterError as err:
        # Seen once in three full-suite runs: the coordinator's first remote call failed with
        # gRPC "Unable to parse request", the status a gRPC server cancels a call with when
        # the request's payload is absent or does not parse as the method's message (grpc
        # ServerInterface::PayloadAsyncRequest::FinalizeResult in grpcpp/server_interface.h, a
        # header TF compiles in). Not reproduced here, so the cause is open and the one fresh
        # retry stays (on fresh engines); the warning keeps the full error for the next look.
        if "Unable to parse request" not in str(err):
            raise
        warnings.warn(f"tf_ps_async retried on fresh engines after: {err}", stacklevel=1)
        res = tf_run("tf_ps_async", **slow)
    assert res.row["images_per_sec"] > 0 and res.row["servers"] == 1
    assert res.row["staleness_max"] > 0, res.steps["staleness"].tolist()


def _emulation() -> None:
    from ddlstudy.network.emulated import netem

    ok, why = netem.available()
    if not ok:
        pytest.skip(f"no emulated network here: {why}")


def _run_emulated(strategy: str, **kw: object):
    """One run on 10GbE-like links x 0.01 (a namespace and shaped veth per engine)."""
    from dataclasses import replace

    from ddlstudy.experiments.grid import dilate, emulated_cluster

    config = TrainConfig(**{**TINY, "strategy": strategy, "dtype": "float32",
                            "model_kwargs": {"hidden": 64, "hidden1": 64}, **kw})
    with emulated_cluster("10GbE", config.world_size, 0.01, offload_off=False,
                          collective_timeout_s=120) as cluster:
        config = dilate([replace(config)], cluster)[0]
        return train(cluster, config, progress=False)


def _payload(res) -> float:
    """Gradient bytes a worker must send per step: ring 2(N-1)/N x bP, a PS worker bP (b bytes
    per parameter)."""
    n, p = res.config.workers, res.row["params"]
    size = 8 if res.config.dtype == "float64" else 4
    ring = res.config.strategy in ("horovod", "tf_allreduce")
    return (2 * (n - 1) / n if ring else 1) * size * p


def test_horovod_on_emulated_links_counts_bytes(horovod_runs) -> None:
    """Horovod's gloo ring on shaped namespace links (its process-set context bound to the
    veth, not 127.0.0.1): bytes per worker are counted on the veth counters, at least the
    ring's payload and not wildly more (headers, ACKs, control traffic)."""
    res, _, emulated = horovod_runs
    if not emulated:
        _emulation()  # skips, naming why
    row = res.row
    assert row["network"] == "10GbE" and row["bytes_source"] == "counted"
    assert _payload(res) <= row["bytes_sent_per_step"] < 3 * _payload(res) + 200_000, row
    assert row["wire_bytes_sent_per_step"] == row["bytes_sent_per_step"]


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["tf_ps_sync", "tf_allreduce"])
def test_tf_on_emulated_links_with_replay(strategy: str) -> None:
    """TF under emulation with compute replayed: each step waits the replayed time in-graph
    and the real variables' bytes cross the shaped links, counted per node (a PS task carries
    every worker's pull and push)."""
    _needs(strategy)
    _emulation()
    res = _run_emulated(strategy, shape="mnist", compute="replay", replay_source="measured",
                        model_kwargs={})  # 'measured' times the default mlp
    row = res.row
    assert row["bytes_source"] == "counted" and row["compute_mode"] == "replay"
    assert row["images_per_sec"] > 0 and (res.steps["compute_s"].dropna() > 0).all()
    assert row["bytes_sent_per_step"] >= _payload(res), row
    if strategy == "tf_ps_sync":  # the server receives N pushes and sends N pulls per step
        assert row["wire_server_bytes_recv_per_step"] >= 2 * _payload(res), row


def test_horovod_timeline_comes_back_from_the_engines(tmp_path) -> None:
    """Chapter 07's timeline: rank 0 writes it in its own temporary folder (no driver path
    reaches an engine) and the driver gets its events back through the engines; the engines'
    files are gone afterwards."""
    _needs("horovod")
    _emulation()
    import glob
    import tempfile

    from ddlstudy.experiments import timeline

    config = TrainConfig(**{**TINY, "strategy": "horovod", "dtype": "float32"})
    before = set(glob.glob(f"{tempfile.gettempdir()}/ddlstudy-hvd-timeline-*"))
    events = timeline.record(config, "10GbE", tmp_path, scale=0.01, collective_timeout_s=120)
    assert not events.empty and set(timeline.COLUMNS) <= set(events)
    assert (events["phase"] == "ALLREDUCE").any(), events["phase"].unique()
    assert (tmp_path / "horovod_timeline.json").stat().st_size > 0
    assert set(glob.glob(f"{tempfile.gettempdir()}/ddlstudy-hvd-timeline-*")) <= before


def test_timeline_taken_by_another_engine_of_the_host_is_not_an_error(tmp_path, monkeypatch
                                                                      ) -> None:
    """Engines of one host share /tmp and take the timeline at once: the file can vanish
    between another engine's check and open (a fresh-clone CI failed on it). Made to happen:
    the file is seen as present, then is gone; the engine returns '' and unsets the variable;
    setting one twice over a vanished file is no error either."""
    from ddlstudy.experiments import timeline

    gone = tmp_path / "ddlstudy-hvd-timeline-x.json"
    monkeypatch.setenv("HOROVOD_TIMELINE", str(gone))
    monkeypatch.setattr(timeline.os.path, "exists", lambda p: True)
    assert timeline._take_timeline() == ""
    assert "HOROVOD_TIMELINE" not in timeline.os.environ
    monkeypatch.setattr(timeline.tempfile if hasattr(timeline, "tempfile") else __import__(
        "tempfile"), "gettempdir", lambda: str(tmp_path))
    assert timeline._set_timeline(gone.name) == str(gone)
    gone.write_text('[{"name": "x"}]')
    assert timeline._take_timeline() == '[{"name": "x"}]' and not gone.exists()
