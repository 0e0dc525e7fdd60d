"""Host CPU pressure (records.store.cpu_stall_s): the share of a window in which some task
waited for a CPU, recorded per timed chunk and per run (train.results `host_cpu_pressure`)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from ddlstudy.records.store import PSI_CPU, cpu_stall_s
from ddlstudy.train.results import _weighted

PSI = cpu_stall_s() is not None


def test_reads_the_some_total_in_seconds(tmp_path: Path) -> None:
    f = tmp_path / "cpu"
    f.write_text("some avg10=3.92 avg60=10.12 avg300=10.92 total=3319649229\n"
                 "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    assert cpu_stall_s(f) == pytest.approx(3319.649229)
    assert cpu_stall_s(tmp_path / "missing") is None
    (tmp_path / "odd").write_text("full total=3\n")
    assert cpu_stall_s(tmp_path / "odd") is None


@pytest.mark.skipif(not PSI, reason=f"{PSI_CPU}: this kernel keeps no CPU pressure information")
def test_oversubscribing_the_cpus_shows_as_pressure() -> None:
    """Twice as many busy processes as CPUs for 2 s: some task waits nearly all the time, on
    an idle host or a loaded one (the condition is made, not hoped for)."""
    n = 2 * len(os.sched_getaffinity(0)) + 1
    burn = "import time\nt = time.monotonic() + 2.5\nwhile time.monotonic() < t: pass\n"
    procs = [subprocess.Popen([sys.executable, "-c", burn]) for _ in range(n)]
    try:
        time.sleep(0.4)  # every burner is running
        s0, t0 = cpu_stall_s(), time.monotonic()
        time.sleep(1.5)
        share = (cpu_stall_s() - s0) / (time.monotonic() - t0)
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=10)
    assert share > 0.5, share


def test_a_runs_pressure_is_its_chunks_weighted_by_length() -> None:
    chunks = pd.DataFrame({"wall_s": [1.0, 3.0], "host_cpu_pressure": [0.8, 0.0]})
    assert _weighted(chunks, "host_cpu_pressure") == pytest.approx(0.2)
    assert math.isnan(_weighted(chunks.assign(host_cpu_pressure=[0.8, math.nan]),
                                "host_cpu_pressure"))
    assert math.isnan(_weighted(chunks.drop(columns="host_cpu_pressure"), "host_cpu_pressure"))
