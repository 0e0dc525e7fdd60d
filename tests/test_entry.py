"""Entry points end quietly when the reader of their stdout leaves (`... | head`), and every
`python -m ddlstudy...` entry point goes through `ddlstudy.host.entry.run`."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ddlstudy.host import entry

REPO = Path(__file__).resolve().parents[1]
PKG = REPO / "lib" / "ddlstudy"


def run_with_reader_gone(args: list[str]) -> subprocess.CompletedProcess:
    """Run `python args...` with stdout a pipe whose read end is closed before the child starts,
    so its first write meets a pipe without readers (EPIPE) every time, loaded host or not."""
    read_fd, write_fd = os.pipe()
    os.close(read_fd)
    try:
        proc = subprocess.run([sys.executable, *args], stdout=write_fd, stderr=subprocess.PIPE,
                              text=True, cwd=REPO, timeout=120,
                              env={**os.environ, "PYTHONWARNINGS": "ignore"})
    finally:
        os.close(write_fd)
    return proc


@pytest.mark.parametrize("args", [
    ["-m", "ddlstudy", "--help"],                                   # the dispatcher itself
    ["-m", "ddlstudy", "params", "params/default.yaml"],            # a command it dispatches
    ["-m", "ddlstudy.params", "params/default.yaml"],               # a shim
    ["-m", "ddlstudy.report.coverage", "results/reference"],        # a table printer
])
def test_closed_pipe_ends_quietly(args):
    proc = run_with_reader_gone(args)
    assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr, proc.stderr
    assert proc.returncode == entry.EXIT_PIPE_CLOSED, (proc.returncode, proc.stderr)


def test_the_installed_script_ends_quietly_too():
    """The `ddlstudy` console script calls ddlstudy.cli.main directly, not through __main__."""
    script = Path(sys.executable).parent / "ddlstudy"
    if not script.exists():
        pytest.skip(f"{script} not installed (pip install -e . puts it there)")
    for args in (["--help"], ["params", "params/default.yaml"]):
        read_fd, write_fd = os.pipe()
        os.close(read_fd)
        try:
            proc = subprocess.run([str(script), *args], stdout=write_fd, stderr=subprocess.PIPE,
                                  text=True, cwd=REPO, timeout=120)
        finally:
            os.close(write_fd)
        assert "Traceback" not in proc.stderr, proc.stderr
        assert proc.returncode == entry.EXIT_PIPE_CLOSED, (args, proc.returncode)


def test_run_returns_main_code_and_maps_none_to_zero():
    assert entry.run(lambda: 2) == 2
    assert entry.run(lambda: None) == 0


def _calls_entry_run(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == "run"
               and isinstance(n.value, ast.Name) and n.value.id == "entry"
               for n in ast.walk(node))


def _main_blocks(tree: ast.Module) -> list[ast.If]:
    return [n for n in tree.body if isinstance(n, ast.If)
            and "__name__" in ast.unparse(n.test) and "__main__" in ast.unparse(n.test)]


def test_every_entry_point_goes_through_entry_run():
    missing = []
    for path in sorted(PKG.rglob("*.py")):
        tree = ast.parse(path.read_text())
        if path.name == "__main__.py":
            exits = [n for n in tree.body if "SystemExit" in ast.unparse(n)
                     or "sys.exit" in ast.unparse(n)]
            blocks = _main_blocks(tree) or exits
        else:
            blocks = _main_blocks(tree)
        missing += [str(path.relative_to(REPO)) for b in blocks if not _calls_entry_run(b)]
    assert not missing, f"entry points not wrapped in ddlstudy.host.entry.run: {missing}"


@pytest.mark.parametrize("module", ["records.sitting", "records.reference", "report.coverage",
                                    "report.readme", "report.pdf", "analysis.calibration",
                                    "cluster.loopback", "params"])
def test_help_prints_usage(module):
    """`python -m ddlstudy.<module> --help` prints its usage and exits 0 (cluster.loopback used
    to build its shim instead, params to read --help as a file name)."""
    proc = subprocess.run([sys.executable, "-m", f"ddlstudy.{module}", "--help"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"usage: python -m ddlstudy.{module}"), proc.stdout[:200]
