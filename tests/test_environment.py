"""pyproject.toml and environment.yml pin the same versions: conda and pip users get one study."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml


def test_pins_agree(repo_root: Path) -> None:
    project = tomllib.loads((repo_root / "pyproject.toml").read_text())["project"]
    env = yaml.safe_load((repo_root / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))

    def pins(reqs: list[str]) -> dict[str, str]:
        out = {}
        for req in reqs:
            m = re.fullmatch(r"([A-Za-z0-9_.\-\[\]]+)==([^;\s]+)", req.strip())
            assert m, f"not an exact pin: {req!r}"
            out[m.group(1).lower()] = m.group(2)
        return out

    assert pins(project["dependencies"]) == pins(pip_section)
    assert pins(project["dependencies"])["torch"] == "2.13.0"
