"""The training loop's records: files, columns, throughput arithmetic, evaluation, the CLI."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from ddlstudy.cluster.engines import Cluster
from ddlstudy.records.store import cpu_stall_s
from ddlstudy.train.trainer import TrainConfig, train

SUMMARY_REQUIRED = ["strategy", "algorithm", "model", "dataset", "workers", "batch_size",
                    "images_per_sec", "step_time_p50_s", "compute_s", "comm_s",
                    "bytes_sent_per_step", "images_per_sec_per_worker", "update_s",
                    "server_bytes_sent_per_step", "server_bytes_recv_per_step"]
STEPS_REQUIRED = ["step", "rank", "role", "compute_s", "comm_s", "update_s", "step_s",
                  "bytes_sent", "bytes_recv", "loss", "images"]
TINY = dict(model="mlp", dataset="digits", batch_size=8, steps=4, warmup_steps=2, eval=False)


def _env(repo_root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("IPYTHONDIR", str(repo_root / ".ipython"))
    return env


# ----------------------------------------------------------------------------- config
@pytest.mark.parametrize("kw,match", [
    ({"model": "resnet9000"}, "unknown model 'resnet9000'"),
    ({"strategy": "gossip"}, "unknown strategy 'gossip'"),
    ({"workers": 0}, "workers must be an integer >= 1"),
    ({"strategy": "allreduce", "algorithm": "bogus"}, "unknown algorithm 'bogus'"),
    ({"dataset": "imagenet21k"}, "unknown dataset"),
    ({"strategy": "single", "workers": 2}, "single runs on 1 worker"),
    ({"strategy": "allreduce", "servers": 2}, "servers=2 only applies"),
    ({"dtype": "float16"}, "unknown dtype"),
])
def test_bad_config_is_one_line_value_error(kw: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match) as err:
        TrainConfig(**kw).validate()
    assert "\n" not in str(err.value)


def test_world_size_counts_servers() -> None:
    assert TrainConfig(strategy="ps_sync", workers=3).world_size == 4
    assert TrainConfig(strategy="ps_sharded", workers=2).world_size == 4
    assert TrainConfig(strategy="ps_sharded", workers=2, servers=3).world_size == 5
    assert TrainConfig(strategy="allreduce", workers=3).world_size == 3


def test_too_small_cluster_is_a_clear_error(cluster: Cluster) -> None:
    with pytest.raises(ValueError, match="needs 5 engines; the cluster has 4"):
        train(cluster, TrainConfig(strategy="ps_sync", workers=4, **TINY), progress=False)


# ----------------------------------------------------------------------------- records
def test_train_writes_steps_summary_meta(cluster: Cluster, tmp_path: Path) -> None:
    res = train(cluster, TrainConfig(strategy="ps_sync", workers=2, **TINY), out_dir=tmp_path,
                progress=False)
    steps = pd.read_csv(tmp_path / "steps.csv")
    summary = pd.read_csv(tmp_path / "summary.csv")
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert set(STEPS_REQUIRED) <= set(steps.columns)
    assert set(SUMMARY_REQUIRED) <= set(summary.columns)
    assert meta["params"]["strategy"] == "ps_sync" and meta["params"]["workers"] == 2
    assert meta["status"] == "ok" and meta["git_sha"]
    assert len(meta["host"]["load_avg"]) == 3 and min(meta["host"]["load_avg"]) >= 0
    # only the timed steps are recorded, for every rank: 2 workers + the server (rank 2)
    assert sorted(steps["step"].unique()) == [2, 3, 4, 5]
    assert steps.groupby("role")["rank"].unique().map(sorted).to_dict() == {
        "server": [2], "worker": [0, 1]}
    assert len(res.steps) == len(steps) == 3 * 4


def test_throughput_is_all_images_over_synchronized_wall_time(cluster: Cluster) -> None:
    res = train(cluster, TrainConfig(strategy="allreduce", workers=3, **TINY), progress=False)
    row = res.row
    assert row["images"] == 3 * 8 * 4  # every worker's images, warm-up excluded
    assert row["wall_s"] == pytest.approx(res.chunks["wall_s"].sum())
    assert row["images_per_sec"] == pytest.approx(row["images"] / row["wall_s"])
    assert row["images_per_sec_per_worker"] == pytest.approx(row["images_per_sec"] / 3)
    # each timed chunk carries the host's CPU pressure over its window; the run's is their
    # length-weighted mean (NaN only on a kernel without pressure information)
    pressure = res.chunks["host_cpu_pressure"]
    assert pressure.notna().all() == (cpu_stall_s() is not None)
    if pressure.notna().all():
        assert ((pressure >= 0) & (pressure <= 1)).all()
        assert row["host_cpu_pressure"] == pytest.approx(
            (pressure * res.chunks["wall_s"]).sum() / res.chunks["wall_s"].sum())
    # the window is barrier to barrier, so it covers every worker's steps
    w = res.steps[res.steps.role == "worker"]
    assert row["wall_s"] >= w.groupby("rank")["step_s"].sum().max()
    lines = res.horovod_lines()
    assert lines[0].startswith("Img/sec per worker: ")
    assert lines[1].startswith("Total img/sec on 3 worker(s): ")


def test_epochs_evaluate_test_accuracy_on_real_data(cluster: Cluster, tmp_path: Path) -> None:
    # digits: 1,438 training images, global batch 2 x 64 -> 11 steps per epoch
    config = TrainConfig(model="mlp", dataset="digits", strategy="allreduce", workers=2,
                         batch_size=64, epochs=2, warmup_steps=1, lr=0.2,
                         model_kwargs={"activation": "relu"})
    res = train(cluster, config, out_dir=tmp_path, progress=False)
    assert res.evals["epoch"].tolist() == [1.0, 2.0]
    assert res.evals["test_size"].tolist() == [359, 359]
    assert res.row["steps"] == 2 * 11 - 1
    assert res.evals["test_accuracy"].iloc[-1] > 0.5
    assert res.row["test_accuracy"] == res.evals["test_accuracy"].iloc[-1]
    assert (tmp_path / "eval.csv").exists()


def test_synthetic_data_has_no_evaluation(cluster: Cluster) -> None:
    res = train(cluster, TrainConfig(model="mlp", dataset="synthetic", shape="mnist",
                                     strategy="ddp", workers=2, batch_size=4, steps=2,
                                     warmup_steps=0), progress=False)
    assert res.evals.empty and pd.isna(res.row["test_accuracy"])
    assert res.row["shape"] == "mnist"


# ----------------------------------------------------------------------------- CLI
@pytest.mark.parametrize("args,match", [
    (["--model", "resnet9000"], "unknown model 'resnet9000'"),
    (["--strategy", "gossip"], "unknown strategy 'gossip'"),
    (["--workers", "0"], "workers must be an integer >= 1"),
    (["--workers", "two"], "invalid int value"),
    (["--frobnicate"], "unrecognized arguments"),
])
def test_cli_bad_flags_one_line_exit_2(args: list[str], match: str,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    from ddlstudy.cli.train import main

    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and match in err


def test_cli_bad_flag_in_a_real_process_has_no_traceback(repo_root: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "ddlstudy.train", "--model", "resnet9000"],
                          capture_output=True, text=True, timeout=120, cwd=repo_root,
                          env=_env(repo_root))
    assert proc.returncode == 2
    from ddlstudy.workload.catalog import MODELS

    assert proc.stderr.strip() == ("python -m ddlstudy.train: error: argument --model: unknown "
                                   f"model 'resnet9000'; valid: {', '.join(MODELS)} (see --help)")
    assert "Traceback" not in proc.stdout


def test_cli_end_to_end(repo_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "ddlstudy.train", "--model", "mlp", "--dataset", "digits",
         "--strategy", "allreduce", "--algorithm", "ring", "--workers", "2", "--batch-size", "8",
         "--steps", "3", "--warmup-steps", "1", "--no-eval", "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=repo_root, env=_env(repo_root))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Iter #0:" in proc.stdout and "img/sec per worker" in proc.stdout
    assert "Total img/sec on 2 worker(s):" in proc.stdout
    summary = pd.read_csv(out / "summary.csv")
    assert set(SUMMARY_REQUIRED) <= set(summary.columns)
    assert summary["strategy"].iloc[0] == "allreduce" and summary["workers"].iloc[0] == 2
    assert set(STEPS_REQUIRED) <= set(pd.read_csv(out / "steps.csv").columns)
    assert json.loads((out / "meta.json").read_text())["params"]["algorithm"] == "ring"


# ----------------------------------------------------------------------------- bench
def test_bench_train_defaults_are_the_issue_benchmark() -> None:
    from ddlstudy.bench import train as bench

    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args([])
    assert (args.model, args.shape, args.dataset, args.workers, args.batch_size) == (
        "resnet18", "cifar", "synthetic", 2, 32)
    assert args.variants.split(",") == ["allreduce", "allreduce_no_overlap", "ddp"]
    assert args.algorithm == "ring" and args.overlap is True


def test_bench_ratios() -> None:
    from ddlstudy.bench.train import ratios

    table = pd.DataFrame({"variant": ["allreduce", "allreduce_no_overlap", "ddp"],
                          "images_per_sec": [9.0, 8.0, 10.0]})
    assert ratios(table) == {"allreduce/ddp": 0.9, "allreduce_no_overlap/ddp": 0.8}


def test_bench_pools_repeats() -> None:
    from ddlstudy.bench.train import TABLE_COLUMNS, pooled_table

    results = pd.DataFrame({"variant": ["ddp", "ddp"], "images": [100, 300],
                            "wall_s": [1.0, 1.0], **{c: [1.0, 3.0] for c in TABLE_COLUMNS[4:]}})
    chunks = pd.DataFrame({"variant": ["ddp"] * 2, "images_per_sec": [100.0, 300.0]})
    row = pooled_table(results, chunks, {"ddp": 2}).iloc[0]
    assert row["images_per_sec"] == 200.0 and row["images_per_sec_per_worker"] == 100.0
    assert row["images_per_sec_conf"] == pytest.approx(1.96 * 50.0)
    assert row["compute_s"] == 2.0 and row["repeats"] == 2
