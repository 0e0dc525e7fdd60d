"""constraints.txt and environment.yml pin the same versions (conda and pip users get one study),
and every pin satisfies pyproject.toml's ranges."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml


def _constraints(repo_root: Path) -> list[str]:
    lines = (repo_root / "constraints.txt").read_text().splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]


def test_pins_agree(repo_root: Path) -> None:
    env = yaml.safe_load((repo_root / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))

    def pins(reqs: list[str]) -> dict[str, str]:
        out = {}
        for req in reqs:
            m = re.fullmatch(r"([A-Za-z0-9_.\-\[\]]+)==([^;\s]+)", req.strip())
            assert m, f"not an exact pin: {req!r}"
            out[m.group(1).lower()] = m.group(2)
        return out

    assert pins(_constraints(repo_root)) == pins(pip_section)
    assert pins(_constraints(repo_root))["torch"] == "2.13.0"


def test_pins_satisfy_the_ranges(repo_root: Path) -> None:
    """Every runtime and extra requirement of pyproject.toml is pinned in constraints.txt, and
    the pin lies in its range (so `pip install -c constraints.txt` resolves)."""
    from packaging.requirements import Requirement

    project = tomllib.loads((repo_root / "pyproject.toml").read_text())["project"]
    pinned = {}
    for line in _constraints(repo_root):
        name, _, version = line.partition("==")
        pinned[name.lower()] = version
    extras = project["optional-dependencies"]
    reqs = [*project["dependencies"], *(r for k, v in extras.items() if k in ("tf", "docs", "dev")
                                        for r in v)]
    for text in reqs:
        req = Requirement(text)
        assert req.name.lower() in pinned, f"{req.name} has no pin in constraints.txt"
        assert req.specifier.contains(pinned[req.name.lower()]), (req, pinned[req.name.lower()])
    assert not any("==" in r for r in project["dependencies"]), "ranges, not pins, in pyproject"
