"""Params layer, validate, and fail with one clear line naming the key and the fix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ddlstudy.config.params import CHAPTERS, ParamsError, deep_merge, load_params, parse_size

MALFORMED = {
    "unknown_key": ("cluster:\n  wokers: 4\n", "cluster.wokers: unknown key"),
    "wrong_type": ("training:\n  batch_size: many\n", "training.batch_size"),
    "zero_workers": ("training:\n  workers: [0, 2]\n", "training.workers"),
    "no_such_model": ("training:\n  models: [resnet51]\n", "unknown model 'resnet51'"),
    "no_such_algorithm": ("collectives:\n  algorithms: [ring, hypercube]\n",
                          "unknown algorithm 'hypercube'"),
    "missing_data": ("training:\n  dataset: mnist\ndata:\n  root: /nonexistent/ddls\n",
                     "run `make data`"),
    "bad_yaml": ("cluster: [workers: 4\n", "is not valid YAML"),
    "not_a_mapping": ("- 1\n- 2\n", "top level must be a mapping"),
    "bad_size": ("collectives:\n  max_bytes: 12X\n", "collectives.max_bytes"),
    "grid_too_big": ("cluster:\n  workers: 2\ntraining:\n  workers: [4]\n",
                     "needs 5 engines but cluster.workers is 2"),
    "bad_run_id": ("run_id: 'a b/c'\n", "run_id"),
    "min_above_max": ("collectives:\n  min_bytes: 1M\n  max_bytes: 1K\n", "above max_bytes"),
}

# Hostile or careless input: each is one line naming the problem (issue 12, item 5).
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
    for p, c in zip("abcdefgh", "bcdefghi", strict=True))
HOSTILE: dict[str, tuple[str | bytes, str]] = {
    "binary_garbage": (bytes(range(256)) * 4, "binary data"),
    "nul_in_text": ("run_id: a\x00b\n", "binary data"),
    "latin1_bytes": (b"run_id: caf\xe9\n", "binary data"),
    "too_big": ("# " + "x" * (1 << 20) + "\n", "byte limit"),
    "deep_list": ("[" * 20000 + "]" * 20000 + "\n", "nested"),
    "deep_mapping": ("".join("  " * i + f"k{i}:\n" for i in range(40)) + "  " * 40 + "v\n",
                     "nested more than"),
    "alias_bomb": (BOMB, "expands to more than"),
    "recursive_alias": ("a: &a [*a]\n", "refers to itself"),
    "duplicate_top_key": ("run_id: a\nrun_id: b\n", "duplicate key 'run_id'"),
    "duplicate_nested_key": ("training:\n  steps: 3\n  steps: 4\n", "duplicate key 'steps'"),
    "run_id_dotdot": ("run_id: '..'\n", "run_id"),
    "run_id_dot": ("run_id: .\n", "run_id"),
    "run_id_slash": ("run_id: a/b\n", "run_id"),
    "run_id_absolute": ("run_id: /tmp/x\n", "run_id"),
    "run_id_too_long": (f"run_id: {'a' * 65}\n", "run_id"),
    "timeout_1e300": ("cluster:\n  collective_timeout_s: 1e300\n", "collective_timeout_s"),
    "timeout_over_a_day": ("cluster:\n  start_timeout_s: 86401\n", "start_timeout_s"),
    "timeout_negative": ("cluster:\n  collective_timeout_s: -1\n", "collective_timeout_s"),
    "timeout_nan": ("cluster:\n  collective_timeout_s: .nan\n", "collective_timeout_s"),
    "cell_timeout_huge": ("report:\n  cell_timeout_s: 99999999\n", "cell_timeout_s"),
    "lr_inf": ("training:\n  lr: .inf\n", "training.lr"),
    "lr_zero": ("training:\n  lr: 0\n", "training.lr"),
    "lr_negative": ("training:\n  lr: -0.1\n", "training.lr"),
    "lr_text": ("training:\n  lr: fast\n", "training.lr"),
    "batch_1e8": ("training:\n  batch_size: 100000000\n", "training.batch_size"),
    "batch_float": ("training:\n  batch_size: 3.5\n", "training.batch_size"),
    "steps_true": ("training:\n  steps: true\n", "training.steps: a boolean"),
    "steps_zero": ("training:\n  steps: 0\n", "training.steps"),
    "workers_bool_in_list": ("training:\n  workers: [true, 2]\n", "boolean"),
    "cluster_workers_false": ("cluster:\n  workers: false\n", "boolean"),
    "max_bytes_4096G": ("collectives:\n  max_bytes: 4096G\n", "machine's memory"),
    "max_bytes_bool": ("collectives:\n  max_bytes: true\n", "collectives.max_bytes"),
    "min_bytes_zero": ("collectives:\n  min_bytes: 0\n", "at least 1 byte"),
    "iters_huge": ("collectives:\n  iters: 1000000000\n", "collectives.iters"),
    "seed_negative": ("seed: -1\n", "seed"),
    "seed_4301_digits": ("seed: " + "9" * 4301 + "\n", "cannot be read"),
    "section_not_mapping": ("training: 5\n", "training"),
    "list_key": ("? [a, b]\n: 1\n", "plain name"),
    "long_bad_value": ("training:\n  models: [" + "x" * 5000 + "]\n", "unknown model"),
    "interval_hour_plus": ("monitor:\n  interval_s: 7200\n", "monitor.interval_s"),
    "scale_above_one": ("network:\n  scale: 2\n", "network.scale"),
    "python_tag": ("run_id: !!python/object/apply:os.system ['true']\n", "not valid YAML"),
    "tab_indent": ("training:\n\tsteps: 3\n", "not valid YAML"),
}


def _write(path: Path, content: str | bytes) -> Path:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_file_gives_one_short_line(case: str, tmp_path: Path, repo_root: Path) -> None:
    content, expected = HOSTILE[case]
    bad = _write(tmp_path / f"{case}.yaml", content)
    with pytest.raises(ParamsError) as err:
        load_params(repo_root / "params/default.yaml", bad, check_data=False)
    message = str(err.value)
    assert expected in message, message
    assert "\n" not in message and len(message) <= 320, message


def test_directory_and_empty_file(tmp_path: Path) -> None:
    with pytest.raises(ParamsError, match="not a regular file"):
        load_params(tmp_path)
    empty = _write(tmp_path / "empty.yaml", "")
    assert load_params(empty, check_data=False).run_id == "default"  # defaults validate alone
    assert load_params(check_data=False).cluster.workers == 5


# A sample through the CLI: exit 2, one line, no traceback, bounded time and memory.
CLI_SAMPLE = ["binary_garbage", "alias_bomb", "deep_list", "duplicate_top_key", "lr_inf",
              "timeout_1e300", "run_id_dotdot", "long_bad_value"]


# Runs the CLI from a small launcher and prints the CLI's own peak RSS (KB): a child forked from
# pytest inherits pytest's RSS high-water mark across exec (1.9 GB after the TF tests), so the
# CLI must be the child of a process that is small itself.
_LAUNCH = ("import os, subprocess, sys; p = subprocess.Popen(sys.argv[1:]); "
           "_, st, ru = os.wait4(p.pid, 0); print(ru.ru_utime + ru.ru_stime, ru.ru_maxrss); "
           "sys.exit(os.waitstatus_to_exitcode(st))")


def _run_measured(args: list[str]) -> tuple[int, str, float, int]:
    """Run the CLI; its exit code, stderr, its own CPU seconds (user + system: what it costs,
    whatever else the host runs) and its peak RSS in KB. A hang still fails at 120 s wall."""
    proc = subprocess.run([sys.executable, "-c", _LAUNCH, *args], capture_output=True,
                          text=True, timeout=120)
    cpu_s, peak_kb = proc.stdout.split()[-2:]
    return proc.returncode, proc.stderr, float(cpu_s), int(peak_kb)


def test_params_cli_sample_exit_2_one_line(tmp_path: Path) -> None:
    files = [_write(tmp_path / f"{c}.yaml", HOSTILE[c][0]) for c in CLI_SAMPLE] + [tmp_path]
    for path in files:
        code, stderr, took, peak_kb = _run_measured(
            [sys.executable, "-m", "ddlstudy.params", str(path)])
        lines = stderr.strip().splitlines()
        assert code == 2, (path, stderr[-500:])
        assert len(lines) == 1 and lines[0].startswith("error: "), (path, stderr[-500:])
        assert "Traceback" not in stderr and took < 10, (path, f"{took:.1f} CPU s")
        assert peak_kb < 200 * 1024, f"{path.name}: the params CLI peaked at {peak_kb} KB"


def test_defaults_validate(repo_root: Path) -> None:
    for name in ("default", "ci", "full", "thesis", "gpu-cluster"):
        files = [repo_root / "params/default.yaml"]
        if name != "default":
            files.append(repo_root / f"params/{name}.yaml")
        params = load_params(*files)
        assert params.run_id == name
    # `make report` is the quick study; `make report-full` adds every other chapter.
    quick = load_params(repo_root / "params/default.yaml").report.chapters
    full = load_params(repo_root / "params/default.yaml", repo_root / "params/full.yaml")
    assert set(full.report.chapters) == set(CHAPTERS) and set(quick) < set(CHAPTERS)
    assert quick[-1] == full.report.chapters[-1] == "99_conclusions"


def test_layering_overrides_key_by_key(repo_root: Path) -> None:
    base = load_params(repo_root / "params/default.yaml")
    ci = load_params(repo_root / "params/default.yaml", repo_root / "params/ci.yaml")
    assert ci.training.models == ["mlp"] and base.training.models != ["mlp"]
    assert ci.training.shape == "mnist" and ci.data.root == base.data.root  # untouched key kept
    assert ci.digest() != base.digest()
    assert deep_merge({"a": {"b": 1, "c": 2}}, {"a": {"b": 3}}) == {"a": {"b": 3, "c": 2}}


def test_sizes() -> None:
    assert parse_size("8") == 8 and parse_size("64M") == 64 << 20 and parse_size("1K") == 1024
    with pytest.raises(ValueError):
        parse_size("12X")


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_file_gives_one_line(case: str, tmp_path: Path, repo_root: Path) -> None:
    text, expected = MALFORMED[case]
    bad = tmp_path / f"{case}.yaml"
    bad.write_text(text)
    with pytest.raises(ParamsError) as err:
        load_params(repo_root / "params/default.yaml", bad)
    message = str(err.value)
    assert expected in message
    assert "\n" not in message


def test_report_cli_prints_one_line_no_traceback(tmp_path: Path, repo_root: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("training:\n  models: [resnet51]\n")
    proc = subprocess.run([sys.executable, "-m", "ddlstudy.report", "--params",
                           str(repo_root / "params/default.yaml"), "--params", str(bad)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "resnet51" in lines[0]
    assert "Traceback" not in proc.stderr
    missing = subprocess.run([sys.executable, "-m", "ddlstudy.report", "--params", "nope.yaml"],
                             capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert missing.returncode == 2 and "nope.yaml: params file not found" in missing.stderr


def test_launch_spec_is_built_once_per_settings(repo_root: Path) -> None:
    """The chapters' grids and cluster starts reuse the LaunchSpec validation built (validating
    one resolves ifname's address); a copy with other launch settings gets its own."""
    from ddlstudy.config.params import ClusterParams
    from ddlstudy.experiments import grid
    from ddlstudy.records.store import project_root

    kw = dict(launcher="ssh", hosts=["n1:8", "n2:8"], ifname="ib0", controller_ip="10.1.2.3",
              remote_root="/srv/a")
    cluster = ClusterParams(**kw)
    spec = cluster.launch_spec()
    assert cluster.launch_spec() is spec and cluster.cluster_kwargs()["launch"] is spec
    P = load_params(repo_root / "params/default.yaml")
    P.cluster = cluster
    built = P.cluster.launch_spec()
    configs = [grid.base_config(P, m) for m in ("mlp", "resnet50")]
    assert P.cluster.launch_spec() is built
    assert {c.data_root for c in configs} == {built.engine_path(str(P.data.path()), project_root())}
    other = cluster.model_copy(update={"remote_root": "/srv/b"})  # no validation runs
    assert other.launch_spec() is not spec and other.launch_spec().remote_root == "/srv/b"
    cluster.remote_root = "/srv/c"  # validate_assignment: the validator rebuilds it
    assert cluster.launch_spec().remote_root == "/srv/c"
