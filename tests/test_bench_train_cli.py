"""`python -m ddlstudy.bench train` refuses bad flags as `python -m ddlstudy.train` does: one
line, exit 2, before torch loads (its import alone is ~2 CPU-seconds), nothing written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# the CLI as the shell runs it (runpy, the same __main__); at exit it prints whether torch was
# imported and the CPU seconds it used (a bound that holds on a loaded host, unlike wall time)
PROBE = ("import atexit, resource, runpy, sys; "
         "atexit.register(lambda: print('probe', 'torch' in sys.modules, "
         "sum(resource.getrusage(resource.RUSAGE_SELF)[:2]))); "
         "{pre}runpy.run_module('ddlstudy.bench', run_name='__main__', alter_sys=True)")
CPU_LIMIT_S = 2.0  # refusals took 0.3-0.8 CPU-seconds idle; with torch loaded 1.9-3.0

BAD = [
    (["--variants", "bogus"], "unknown variant(s) ['bogus']"),
    (["--model", "nope"], "unknown model 'nope'"),
    (["--network", "100GbE"], "unknown --network '100GbE'"),
    (["--scale", "0.1"], "--scale applies only with --network"),
    (["--workers", "0"], "workers must be an integer >= 1"),
    (["--steps", "x"], "invalid int value: 'x'"),
]


def _bench(args: list[str], out: Path, pre: str = "") -> tuple[int, str, bool, float]:
    """(exit, stderr, torch imported, CPU seconds) of `python -m ddlstudy.bench ARGS`."""
    env = dict(os.environ, IPYTHONDIR=str(out.parent / "ipython"), MPLBACKEND="Agg")
    proc = subprocess.run([sys.executable, "-c", PROBE.format(pre=pre), *args, "--out",
                           str(out)], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=300, check=False)
    probe = [ln.split() for ln in proc.stdout.splitlines() if ln.startswith("probe ")]
    assert probe, proc.stdout + proc.stderr
    return proc.returncode, proc.stderr, probe[-1][1] == "True", float(probe[-1][2])


@pytest.mark.parametrize(("flags", "words"), BAD, ids=[" ".join(f) for f, _ in BAD])
def test_bad_bench_train_flags_are_refused_before_torch(flags: list[str], words: str,
                                                        tmp_path: Path) -> None:
    out = tmp_path / "bench"
    code, err, torch, cpu = _bench(["train", *flags], out)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and words in err and "Traceback" not in err, err
    assert not torch, f"torch was imported before {flags} was refused"
    assert cpu < CPU_LIMIT_S, f"{cpu:.2f} CPU-seconds to refuse {flags}"
    assert not out.exists()


def test_the_probe_sees_torch_when_it_is_imported(tmp_path: Path) -> None:
    """The probe can fail: a run that imports torch says so."""
    _, _, torch, _ = _bench(["train", "--variants", "bogus"], tmp_path / "bench",
                            pre="__import__('torch'); ")
    assert torch
