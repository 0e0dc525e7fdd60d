"""`ddlstudy lab`: JupyterLab on notebooks/, with the project's Jupyter and IPython state kept
inside the checkout (as `make lab` does), listening on loopback only."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence

from ddlstudy.records.store import project_root


def main(argv: Sequence[str] | None = None) -> int:
    root = project_root()
    env = dict(os.environ)
    env.setdefault("IPYTHONDIR", str(root / ".ipython"))
    env.setdefault("JUPYTER_CONFIG_DIR", str(root / ".jupyter"))
    cmd = [sys.executable, "-m", "jupyter", "lab", "--ip=127.0.0.1", "--no-browser",
           f"--notebook-dir={root / 'notebooks'}", *(argv or [])]
    try:
        return subprocess.run(cmd, env=env).returncode
    except KeyboardInterrupt:
        return 130
