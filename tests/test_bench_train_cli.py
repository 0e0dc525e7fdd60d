"""`python -m ddlstudy.bench train` refuses bad flags as `python -m ddlstudy.train` does: one
line, exit 2, before torch loads (its import alone is ~2 CPU-seconds), nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_refusal import Probed, assert_refused, run_probed

CPU_LIMIT_S = 2.0  # refusals took 0.3-0.8 CPU-seconds idle; with torch loaded 1.9-3.0

BAD = [
    (["--variants", "bogus"], "unknown variant(s) ['bogus']"),
    (["--model", "nope"], "unknown model 'nope'"),
    (["--network", "100GbE"], "unknown --network '100GbE'"),
    (["--scale", "0.1"], "--scale applies only with --network"),
    (["--workers", "0"], "workers must be an integer >= 1"),
    (["--steps", "x"], "invalid int value: 'x'"),
]


def _bench(args: list[str], out: Path, pre: str = "") -> Probed:
    """`python -m ddlstudy.bench ARGS --out OUT`, probed (exit, stderr, torch, CPU seconds)."""
    return run_probed("ddlstudy.bench", [*args, "--out", str(out)], out.parent, pre=pre)


@pytest.mark.parametrize(("flags", "words"), BAD, ids=[" ".join(f) for f, _ in BAD])
def test_bad_bench_train_flags_are_refused_before_torch(flags: list[str], words: str,
                                                        tmp_path: Path) -> None:
    out = tmp_path / "bench"
    r = _bench(["train", *flags], out)
    assert_refused(r.code, r.err, words, out)
    assert not r.torch, f"torch was imported before {flags} was refused"
    assert r.cpu_s < CPU_LIMIT_S, f"{r.cpu_s:.2f} CPU-seconds to refuse {flags}"


def test_the_probe_sees_torch_when_it_is_imported(tmp_path: Path) -> None:
    """The probe can fail: a run that imports torch says so."""
    r = _bench(["train", "--variants", "bogus"], tmp_path / "bench", pre="__import__('torch'); ")
    assert r.torch
