"""Params layer, validate, and fail with one clear line naming the key and the fix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ddlstudy.params import ParamsError, deep_merge, load_params, parse_size

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


def test_defaults_validate(repo_root: Path) -> None:
    for name in ("default", "ci", "thesis", "gpu-cluster"):
        files = [repo_root / "params/default.yaml"]
        if name != "default":
            files.append(repo_root / f"params/{name}.yaml")
        params = load_params(*files)
        assert params.run_id == name


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
