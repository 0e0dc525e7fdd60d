"""Shared fixtures: one real local ipyparallel cluster per session (starting one costs ~10 s)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("IPYTHONDIR", str(ROOT / ".ipython"))
os.environ.setdefault("MPLCONFIGDIR", str(ROOT / ".cache" / "matplotlib"))
os.environ.setdefault("MPLBACKEND", "Agg")

from ddlstudy.cluster.engines import Cluster  # noqa: E402


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """Four local engines; tests re-init the process group for the world size they need."""
    with Cluster(workers=4, collective_timeout_s=60) as c:
        yield c


@pytest.fixture(scope="session")
def cluster8() -> Iterator[Cluster]:
    with Cluster(workers=8, collective_timeout_s=120) as c:
        yield c


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def ci_report(tmp_path_factory: pytest.TempPathFactory):
    """The CI report (params/default.yaml + params/ci.yaml) run once per session: the notebook
    tests and the browser test read the same run folder and book."""
    from ddlstudy.report.runner import run_report

    out = tmp_path_factory.mktemp("report") / "ci"
    files = [str(ROOT / "params/default.yaml"), str(ROOT / "params/ci.yaml")]
    return files, out, run_report(files, str(out))


@pytest.fixture
def no_reference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty results/reference: a run without a chapter has nothing to fall back on."""
    from ddlstudy.records import reference

    root = tmp_path / "reference"
    monkeypatch.setattr(reference, "reference_dir", lambda: root)
    return root
