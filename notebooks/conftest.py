"""nbval in `make test`: every notebook executes once per test run. The chapters the CI report
lists (`report.chapters` of DDLSTUDY_PARAMS) were already executed through papermill and rendered
by tests/test_notebooks.py; with DDLSTUDY_NBVAL_SKIP_RENDERED=1 (set by `make test`) nbval runs
only the others. Without it (`make test-notebooks`) nbval runs every notebook."""

from __future__ import annotations

import os
from pathlib import Path


def _rendered_chapters() -> set[str]:
    from ddlstudy.config.params import load_params

    files = os.environ.get("DDLSTUDY_PARAMS", "../params/default.yaml").split(os.pathsep)
    return set(load_params(*files).report.chapters)


def pytest_ignore_collect(collection_path: Path, config: object) -> bool | None:
    if os.environ.get("DDLSTUDY_NBVAL_SKIP_RENDERED") != "1" or collection_path.suffix != ".ipynb":
        return None
    return True if collection_path.stem in _rendered_chapters() else None
