"""Params layer, validate, and fail with one clear line naming the key and the fix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ddlstudy.config.params import CHAPTERS, ParamsError, deep_merge, load_params, parse_size
from hostile_cases import FILES, LAUNCH, write

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

# Hostile or careless input: each is one line naming the problem (issue 12, item 5); the files
# are issue 23's (tests/hostile_cases.py), read here layered over params/default.yaml.
HOSTILE = {case: FILES[case] for case in (
    "binary_garbage", "nul_in_text", "latin1_bytes", "too_big", "deep_list", "deep_mapping",
    "alias_bomb", "recursive_alias", "duplicate_top_key", "duplicate_nested_key", "run_id_dotdot",
    "run_id_dot", "run_id_slash", "run_id_absolute", "run_id_too_long", "timeout_1e300_text",
    "timeout_over_a_day", "timeout_negative", "timeout_nan", "cell_timeout_huge", "lr_inf",
    "lr_zero", "lr_negative", "lr_text", "batch_1e8", "batch_float", "steps_true", "steps_zero",
    "workers_bool_flow", "cluster_workers_false", "max_bytes_4096G", "max_bytes_bool",
    "min_bytes_zero", "iters_1e9", "seed_negative", "seed_4301_digits", "section_not_mapping",
    "list_key", "long_bad_value_flow", "interval_two_hours", "scale_above_one", "python_tag",
    "tab_indent")}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_file_gives_one_short_line(case: str, tmp_path: Path, repo_root: Path) -> None:
    content, expected = HOSTILE[case]
    bad = write(tmp_path / f"{case}.yaml", content)
    with pytest.raises(ParamsError) as err:
        load_params(repo_root / "params/default.yaml", bad, check_data=False)
    message = str(err.value)
    assert expected in message, message
    assert "\n" not in message and len(message) <= 320, message


def test_directory_and_empty_file(tmp_path: Path) -> None:
    with pytest.raises(ParamsError, match="not a regular file"):
        load_params(tmp_path)
    empty = write(tmp_path / "empty.yaml", "")
    assert load_params(empty, check_data=False).run_id == "default"  # defaults validate alone
    assert load_params(check_data=False).cluster.workers == 5


# A sample through the CLI: exit 2, one line, no traceback, bounded time and memory.
CLI_SAMPLE = ["binary_garbage", "alias_bomb", "deep_list", "duplicate_top_key", "lr_inf",
              "timeout_1e300_text", "run_id_dotdot", "long_bad_value_flow"]


def _run_measured(args: list[str]) -> tuple[int, str, float, int]:
    """Run the CLI; its exit code, stderr, its own CPU seconds (user + system: what it costs,
    whatever else the host runs) and its peak RSS in KB. A hang still fails at 120 s wall."""
    proc = subprocess.run([sys.executable, "-c", LAUNCH, *args], capture_output=True,
                          text=True, timeout=120)
    cpu_s, peak_kb = proc.stdout.split()[-2:]
    return proc.returncode, proc.stderr, float(cpu_s), int(peak_kb)


def test_params_cli_sample_exit_2_one_line(tmp_path: Path) -> None:
    files = [write(tmp_path / f"{c}.yaml", HOSTILE[c][0]) for c in CLI_SAMPLE] + [tmp_path]
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


def test_chapters_send_remote_engines_their_own_data_root(repo_root: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """Chapters 08, 10 and 11 build their configs with the data root as engines on other hosts
    resolve it (under cluster.remote_root), never the driver's absolute path. (Chapter 08 plans
    only the data sets it finds on the driver: a fresh clone has none, so they count as
    present here; what is checked is the root the configs carry.)"""
    from ddlstudy.experiments import dynamics

    monkeypatch.setattr(dynamics, "missing_dataset", lambda *a, **k: None)
    from ddlstudy.chapters import ch08_convergence, ch10_faults, ch11_beyond
    from ddlstudy.config.params import ClusterParams
    from ddlstudy.experiments import grid
    from ddlstudy.records.store import project_root

    P = load_params(repo_root / "params/default.yaml")
    P.cluster = ClusterParams(launcher="ssh", hosts=["n1:8", "n2:8"], ifname="ib0",
                              controller_ip="10.1.2.3", remote_root="/srv/ddl")
    want = grid.engine_data_root(P)
    assert want != str(P.data.path()) and not want.startswith(str(project_root()))
    faults = ch10_faults.setup(P, tmp_path / "run10")
    assert faults.cfgs and {c.data_root for c in faults.cfgs} == {want}
    conv = ch08_convergence.setup(P, tmp_path / "run08")
    assert conv.plan and {c.data_root for _, c in conv.plan} == {want}
    assert ch11_beyond.base_config(P, P.beyond).data_root == want
