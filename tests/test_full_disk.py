"""A full disk and a read-only folder (issue 23): one line, no traceback, no temp files left.

Each test mounts its own small tmpfs (root only; skipped with one line otherwise)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest


def _mount(where: Path, options: str) -> None:
    where.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({proc.stderr.strip()}): needs root")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs with 48 KiB left free: the lock and meta.json fit, a checkpoint and the
    tables do not."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    disk = tmp_path / "disk"
    _mount(disk, "size=256k")
    try:
        with open(disk / "filler", "wb") as f:
            f.write(b"\0" * (208 << 10))
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    disk = tmp_path / "ro"
    _mount(disk, "size=64k,ro")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def _train(out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ddlstudy.train", "--model", "mlp", "--dataset", "synthetic",
         "--workers", "2", "--batch-size", "8", "--steps", "10", "--warmup-steps", "1",
         "--no-progress", "--no-eval", "--timeout", "60", "--out", str(out), *extra],
        capture_output=True, text=True, timeout=600)


def test_read_only_out_is_one_line_exit_2(read_only: Path) -> None:
    proc = _train(read_only / "run")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Read-only file system" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_full_disk_is_one_line_exit_1_and_leaves_no_temp(small_disk: Path) -> None:
    out = small_disk / "run"
    proc = _train(out, "--checkpoint-every", "5")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert "No space left on device" in lines[-1], proc.stderr
    assert "Traceback" not in proc.stderr and len(lines) == 1, proc.stderr
    leftovers = [p.name for p in small_disk.rglob("*") if p.name.endswith(".tmp")]
    assert leftovers == [], leftovers
    assert not (out / ".ddlstudy.lock").exists()
