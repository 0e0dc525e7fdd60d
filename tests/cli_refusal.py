"""What the bad-input tests (issue 23) check of a CLI's refusal, in one place: exit 2, exactly
one line on stderr that names the problem, no traceback, and nothing written (`assert_refused`);
and the two ways they get a refusal: the CLI's `main` in-process (`exit_code`), or
`python -m <module>` as the shell runs it, in a subprocess that reports at exit whether torch
was imported and the CPU seconds it used (`run_probed`; CPU time is a bound that holds on a
loaded host, wall time is not).

Used by tests/test_bounds.py and tests/test_bench_train_cli.py. The asserts carry their own
messages (pytest rewrites asserts in test files, not in this helper)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# `python -m MODULE` through runpy (the same __main__ the shell runs); at exit it prints
# 'probe <torch imported> <CPU seconds>'. {pre} runs first (the probe's own check imports
# torch there).
PROBE = ("import atexit, resource, runpy, sys; "
         "atexit.register(lambda: print('probe', 'torch' in sys.modules, "
         "sum(resource.getrusage(resource.RUSAGE_SELF)[:2]))); "
         "{pre}runpy.run_module({module!r}, run_name='__main__', alter_sys=True)")


def assert_refused(code: Any, err: str, words: str, out: Path | None = None) -> None:
    """A refusal: exit `code` 2, `err` one line (surrounding whitespace aside) containing
    `words`, no traceback; `out` (the run's --out) not created when given."""
    lines = err.strip().splitlines()
    assert code == 2, f"exit {code!r}, not 2; stderr: {err}"
    assert len(lines) == 1, f"{len(lines)} lines on stderr, not 1: {err}"
    assert words in err, f"{words!r} not in stderr: {err}"
    assert "Traceback" not in err, f"a traceback on stderr: {err}"
    if out is not None:
        assert not Path(out).exists(), f"{out} exists after a refusal"


def exit_code(main: Callable[[list[str]], Any], argv: Sequence[str]) -> Any:
    """`main(argv)`'s exit code, whether it returns it or raises SystemExit (argparse)."""
    try:
        return main(list(argv))
    except SystemExit as exit_:
        return exit_.code


@dataclass(frozen=True)
class Probed:
    """A `run_probed` run: exit code, stderr, whether torch was imported, CPU seconds."""

    code: int
    err: str
    torch: bool
    cpu_s: float


_COMPILED: list[bool] = []


def _compile_once() -> None:
    """Byte-compile the package once per session before anything is timed: on a fresh clone
    the first refusals compiled every module they imported, which cost more CPU-seconds than
    the refusal itself (4 of them crossed the 2 s bound in CI, and passed warm)."""
    if not _COMPILED:
        import compileall

        compileall.compile_dir(str(ROOT / "lib"), quiet=1)
        _COMPILED.append(True)


def run_probed(module: str, args: Sequence[str], home: Path, pre: str = "",
               timeout_s: float = 300) -> Probed:
    """`python -m module ARGS` in a subprocess from the repository root, IPYTHONDIR under
    `home` (no cluster entry of the user's is touched), with PROBE's report read back. The
    package is byte-compiled first (`_compile_once`): the CPU bound is the refusal's, not the
    first import's compilation."""
    _compile_once()
    env = dict(os.environ, IPYTHONDIR=str(home / "ipython"), MPLBACKEND="Agg")
    proc = subprocess.run([sys.executable, "-c", PROBE.format(pre=pre, module=module), *args],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout_s,
                          check=False)
    probe = [ln.split() for ln in proc.stdout.splitlines() if ln.startswith("probe ")]
    assert probe, f"the probe did not report: {proc.stdout}{proc.stderr}"
    return Probed(proc.returncode, proc.stderr, probe[-1][1] == "True", float(probe[-1][2]))
