"""Bounds on everything a user can type (issue 23): params keys and CLI flags, table-driven.

Every bad value is refused in one line, exit 2, before a cluster starts (these tests never start
one: the train-flag refusals run with `Cluster.start` made to fail the test). Time is bounded as
CPU seconds of the refusing thread, which hold on a loaded host where wall seconds do not."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pytest
import yaml

from cli_refusal import assert_refused, exit_code
from ddlstudy.config.params import ParamsError, load_params

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "params" / "default.yaml"

# (override, the words the one-line refusal must contain)
BAD_PARAMS = [
    ({"seed": -1}, "seed"),
    ({"seed": 2**64 + 1}, "seed"),
    ({"convergence": {"seeds": [0, 2**33]}}, "seeds"),
    ({"batch_sweep": {"seeds": [-1]}}, "seeds"),
    ({"training": {"lr": float("nan")}}, "training.lr"),
    ({"training": {"lr": 0}}, "training.lr"),
    ({"training": {"strategies": []}}, "training.strategies"),
    ({"training": {"models": [], "strategies": ["allreduce"]},
      "network": {"chapter03_models": []}}, "chapter 03"),
    ({"training": {"replay_source": "/no/such/table.csv"}}, "replay table"),
    ({"network": {"replay_source": "nope"}}, "replay table"),
    ({"collectives": {"max_bytes": "20G"}}, "max_bytes"),
    ({"collectives": {"max_bytes": "4096G"}}, "max_bytes"),
    ({"network": {"scale": 1e-300}}, "network.scale"),
    ({"network": {"scale": 0}}, "network.scale"),
    ({"monitor": {"interval_s": 1e-300}}, "monitor.interval_s"),
    ({"monitor": {"interval_s": 0.001}}, "monitor.interval_s"),
    ({"monitor": {"models": []}}, "monitor.models"),
    ({"projection": {"compute_scale": 1e308}}, "projection.compute_scale"),
    ({"projection": {"servers": [10**18]}}, "projection.servers"),
    ({"projection": {"batch_size": 10**12}}, "projection.batch_size"),
    ({"projection": {"scaling_batch_size": 10**12}}, "projection.scaling_batch_size"),
    ({"projection": {"latency_s": 1e9}}, "projection.latency_s"),
    ({"projection": {"bucket_mb": [1e300]}}, "projection.bucket_mb"),
    ({"projection": {"records": ["/etc"]}}, "projection.records"),
    ({"projection": {"models": []}}, "projection.models"),
    ({"convergence": {"models": []}}, "convergence.models"),
    ({"batch_sweep": {"models": []}}, "batch_sweep.models"),
]

GOOD_PARAMS = [
    {"seed": 2**32 - 1},
    {"network": {"scale": 0.001}},
    {"monitor": {"interval_s": 0.01}},
    {"projection": {"records": ["results/reference", "no/such/folder/yet"]}},
    {"training": {"replay_source": "gpu"}},
]


def _layer(tmp_path: Path, override: dict) -> list[str]:
    path = tmp_path / "override.yaml"
    path.write_text(yaml.safe_dump(override))
    return [str(DEFAULT), str(path)]


@pytest.mark.parametrize(("override", "words"), BAD_PARAMS, ids=[w for _, w in BAD_PARAMS])
def test_bad_params_are_refused_in_one_line(tmp_path: Path, override: dict, words: str) -> None:
    with pytest.raises(ParamsError) as err:
        load_params(*_layer(tmp_path, override), check_data=False)
    line = str(err.value)
    assert "\n" not in line and words in line, line


@pytest.mark.parametrize("override", GOOD_PARAMS)
def test_valid_edges_are_accepted(tmp_path: Path, override: dict) -> None:
    load_params(*_layer(tmp_path, override), check_data=False)


def test_a_key_with_terminal_escapes_is_not_echoed_raw(tmp_path: Path) -> None:
    path = tmp_path / "esc.yaml"
    path.write_text('training:\n  "\\e]0;owned\\a\\e[2J": 1\n')
    with pytest.raises(ParamsError) as err:
        load_params(str(DEFAULT), str(path), check_data=False)
    line = str(err.value)
    assert "\x1b" not in line and "\x07" not in line and "\\x1b" in line, repr(line)


def test_many_keys_are_refused_by_size_before_parsing(tmp_path: Path) -> None:
    import tracemalloc

    path = tmp_path / "keys.yaml"
    path.write_text("".join(f"k{i}: {i}\n" for i in range(60_000)))
    tracemalloc.start()
    t0 = time.thread_time()  # CPU seconds: parsing the 60,000 keys takes ~6 (pure-Python YAML)
    with pytest.raises(ParamsError, match="byte limit"):
        load_params(str(path), check_data=False)
    cpu = time.thread_time() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert cpu < 2 and peak < 20e6, (cpu, peak)


# ----------------------------------------------------------------------------- train flags
BAD_TRAIN_FLAGS = [
    (["--momentum", "nan"], "momentum"),
    (["--momentum", "1"], "momentum"),
    (["--momentum", "-0.1"], "momentum"),
    (["--lr", "nan"], "lr"),
    (["--lr", "inf"], "lr"),
    (["--lr", "-1"], "lr"),
    (["--seed", "-1"], "seed"),
    (["--seed", str(2**64 + 1)], "seed"),
    (["--workers", "0"], "workers"),
    (["--batch-size", "0"], "batch_size"),
    (["--steps", "-5"], "steps"),
    (["--timeout", "nan"], "timeout"),
    (["--timeout", "0"], "timeout"),
    (["--bucket-mb", "inf"], "bucket_mb"),
    (["--network", "10GbE", "--scale", "1e-300"], "--scale"),
    (["--scale", "0.5"], "--scale"),
    (["--network", "nope"], "--network"),
    (["--compute", "replay", "--replay-source", "/no/such.csv"], "replay table"),
    (["--model", "resnet50", "--shape", "cifar", "--compute", "replay", "--replay-source",
      "testbed-wang_nchc_10gbe"], "it has resnet50 at imagenet"),  # a testbed's paper shape
    (["--checkpoint-every", "0"], "checkpoint_every"),
    (["--fail-worker", "5", "--fail-at-step", "3"], "fail_worker"),
    (["--out", "/etc/passwd"], "not a folder"),
    (["--out", "/etc/passwd/x"], "Not a directory"),
    (["--out", "/proc/ddlstudy-x"], "cannot write"),
]


@pytest.fixture(scope="module", autouse=True)
def _trainer_loaded() -> None:
    """torch loads once (seconds on a busy host): the time bound is on the checks alone."""
    import ddlstudy.train.trainer  # noqa: F401
    import ddlstudy.workload.data  # noqa: F401


@pytest.mark.parametrize(("flags", "words"), BAD_TRAIN_FLAGS,
                         ids=[" ".join(f) for f, _ in BAD_TRAIN_FLAGS])
def test_bad_train_flags_exit_2_in_one_line_before_a_cluster(
        flags: list[str], words: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from ddlstudy.cli.train import main
    from ddlstudy.cluster.engines import Cluster

    def no_cluster(self: Cluster) -> Cluster:
        raise AssertionError(f"a cluster started before {flags} was refused")

    monkeypatch.setattr(Cluster, "start", no_cluster)
    t0 = time.thread_time()  # CPU seconds of the checks (wall time is the scheduler's)
    code = exit_code(main, ["--model", "mlp", "--dataset", "synthetic", *flags])
    took = time.thread_time() - t0
    assert_refused(code, capsys.readouterr().err, words)
    assert took < 10, f"{took:.1f} CPU s to refuse {flags}"


def test_a_refused_flag_leaves_no_empty_out_folder(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from ddlstudy.cli.train import main

    out = tmp_path / "new"
    with pytest.raises(SystemExit) as exit_:
        main(["--model", "mlp", "--seed", "-1", "--out", str(out)])
    assert_refused(exit_.value.code, capsys.readouterr().err, "seed", out)


def test_a_bad_label_in_a_data_file_is_one_line_before_a_cluster(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With --no-verify-data (own files), a label of 250 is refused on the driver."""
    import numpy as np

    from ddlstudy.cli.train import main
    from ddlstudy.workload.data import write_idx

    root = tmp_path / "data" / "mnist"
    root.mkdir(parents=True)
    for split, n in (("train", 64), ("t10k", 16)):
        write_idx(root / f"{split}-images-idx3-ubyte", np.zeros((n, 28, 28), np.uint8))
        labels = np.arange(n, dtype=np.uint8) % 10
        labels[7] = 250
        write_idx(root / f"{split}-labels-idx1-ubyte", labels)
    with pytest.raises(SystemExit) as exit_:
        main(["--model", "mlp", "--dataset", "mnist", "--data-root", str(tmp_path / "data"),
              "--no-verify-data"])
    assert_refused(exit_.value.code, capsys.readouterr().err, "label 250 at index 7")


# ----------------------------------------------------------------------------- bench flags
BAD_BENCH_FLAGS = [
    (["-e", "4096G"], "memory"),
    (["-n", "-1"], "--iters"),
    (["-n", "0"], "--iters"),
    (["-w", "-1"], "--warmup_iters"),
    (["-f", "nan"], "stepfactor"),
    (["--timeout", "inf"], "--timeout"),
    (["--ranks", "2,100"], "--ranks"),
]


@pytest.mark.parametrize(("flags", "words"), BAD_BENCH_FLAGS,
                         ids=[" ".join(f) for f, _ in BAD_BENCH_FLAGS])
def test_bad_bench_flags_exit_2_in_one_line(flags: list[str], words: str, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    from ddlstudy.bench import collectives

    parser = argparse.ArgumentParser()
    collectives.add_arguments(parser)
    out = tmp_path / "bench"
    code = collectives.main(parser.parse_args([*flags, "--out", str(out)]))
    assert_refused(code, capsys.readouterr().err, words, out)  # refused before writing
