"""The hostile set (issue 23): 100+ params files and the bad CLI flags, through the real CLIs.

Each params file is written into tmp_path by the test and given to `python -m ddlstudy.report
--params F --out D`; each bad flag set to `python -m ddlstudy.train ...`. Every one must be
refused in one line on stderr, exit 2, no traceback, before a cluster starts: the run's
IPYTHONDIR (a fresh folder) gets no `ddlstudy-clusters` entry and --out is not created. Time is
bounded as CPU seconds of the CLI process (< 10 s for report, as the issue asks; < 2 s for
train, whose flags are checked before torch loads: the train CLI reports whether torch was
imported, and a refusal must not have), which holds on a loaded host where wall time does not;
wall time only guards against a hang. The case classes are
the issue's: file-level (binary, bombs, nesting, size, key counts, escape bytes), seeds out of
range, NaN / inf, unbounded sizes, empty lists, unknown names (kernel, models, profiles),
missing replay tables, projection bounds, paths (/etc records, run_id traversal), timeouts,
faults settings, unwritable --out.

The in-process sweep (`load_params`, every file) is quick and runs always; the CLI sweeps start
one Python per case (report ~3, train ~0.1-0.6 CPU-seconds each) and are marked slow. Each prints
its count and its slowest case, which the reports quote.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from ddlstudy.config.params import ParamsError, load_params
from hostile_cases import FILES, LAUNCH, write, y
from test_bounds import BAD_TRAIN_FLAGS as BOUNDS_TRAIN_FLAGS

ROOT = Path(__file__).resolve().parents[1]
CPU_LIMIT_S = 10.0  # the issue's bound on a refusal, as CPU time of the CLI process
# train checks its flags before torch loads: 0.07-0.56 CPU-seconds per refusal measured idle
# (torch's import alone took 2.2); 2 s leaves room for a loaded host's slower CPU seconds, and
# whether torch loaded is asserted on its own (`_TRAIN` below), independent of load
TRAIN_CPU_LIMIT_S = 2.0
WALL_LIMIT_S = 120.0  # a hang guard only (a loaded 2-core host took 41 s of wall for 3 s of CPU)


# Refused by the CLI before anything starts, not by the schema (the kernel list is the runner's).
CLI_ONLY = {"unknown_kernel"}


@pytest.mark.parametrize("case", [c for c in FILES if c not in CLI_ONLY])
def test_every_hostile_file_is_refused_in_one_line(case: str, tmp_path: Path) -> None:
    """In process, every file: ParamsError, one printable line naming the problem."""
    content, words = FILES[case]
    bad = write(tmp_path / f"{case}.yaml", content)
    with pytest.raises(ParamsError) as err:
        load_params(bad)
    line = str(err.value)
    assert words in line, line
    assert "\n" not in line and len(line) <= 400, line
    assert not any(ord(c) < 32 or ord(c) == 127 for c in line), repr(line)


def test_the_set_covers_the_issue(tmp_path: Path) -> None:
    """107 files or more (the issue's count), every case class present."""
    assert len(FILES) >= 107, len(FILES)


# ----------------------------------------------------------------------------- through the CLIs


# `python -m ddlstudy.train` as it runs from the shell (runpy, the same __main__), saying on
# stdout at exit whether torch was imported: a refusal must come before torch loads.
_TRAIN = ("import atexit, runpy, sys; "
          "atexit.register(lambda: print('torch-imported', 'torch' in sys.modules)); "
          "runpy.run_module('ddlstudy.train', run_name='__main__', alter_sys=True)")


def _cli(args: list[str], home: Path) -> dict[str, Any]:
    """Run one CLI under a fresh IPYTHONDIR; its exit, stderr, wall / CPU seconds, RSS, whether
    it started a cluster (an entry under IPYTHONDIR/ddlstudy-clusters) and, run as `_TRAIN`,
    whether it imported torch (None otherwise)."""
    ipy = home / "ipython"
    env = dict(os.environ, IPYTHONDIR=str(ipy), MPLBACKEND="Agg")
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", LAUNCH, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
                            start_new_session=True)  # a hang is killed with all it started
    try:
        out, err = proc.communicate(timeout=WALL_LIMIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        subprocess.run([sys.executable, "-m", "ddlstudy.cluster", "--cleanup"], env=env,
                       capture_output=True, timeout=120, check=False)
        return {"code": None, "err": "timed out", "wall": WALL_LIMIT_S, "cpu": math.inf,
                "rss_mb": 0.0, "cluster": True}
    cpu, rss = (out.split() or ["inf", "0"])[-2:]
    clusters = ipy / "ddlstudy-clusters"
    said = [ln.split()[-1] for ln in out.splitlines() if ln.startswith("torch-imported ")]
    return {"code": proc.returncode, "err": err, "wall": time.monotonic() - t0,
            "cpu": float(cpu), "rss_mb": int(rss) / 1024,
            "cluster": clusters.exists() and any(clusters.iterdir()),
            "torch": said[-1] == "True" if said else None}


def _sweep(cases: dict[str, list[str]], tmp_path: Path) -> dict[str, dict[str, Any]]:
    """Every case's CLI run, two at a time (the CPU bound is per process)."""
    def one(item: tuple[int, tuple[str, list[str]]]) -> tuple[str, dict[str, Any]]:
        index, (name, args) = item
        home = tmp_path / f"home-{index}"  # names may hold '/' (flags)
        home.mkdir()
        return name, _cli(args, home)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(one, enumerate(cases.items())))


def _assert_refused(results: dict[str, dict[str, Any]], outs: dict[str, Path], what: str,
                    cpu_limit_s: float = CPU_LIMIT_S) -> None:
    """Each: exit 2, one line, no traceback, under the CPU bound, no cluster, no --out made,
    and torch not imported (where the run says: `_TRAIN`)."""
    bad = []
    for name, r in results.items():
        lines = r["err"].strip().splitlines()
        ok = (r["code"] == 2 and len(lines) == 1 and "Traceback" not in r["err"]
              and r["cpu"] < cpu_limit_s and not r["cluster"] and not r["torch"]
              and not (outs[name].exists() and outs[name].is_dir() and any(outs[name].iterdir())))
        if not ok:
            bad.append(f"{name}: exit {r['code']}, {len(lines)} lines, cpu {r['cpu']:.1f} s, "
                       f"cluster {r['cluster']}, torch {r['torch']}: {r['err'][-300:]!r}")
    slow = max(results.items(), key=lambda kv: kv[1]["cpu"])
    wall = max(r["wall"] for r in results.values())
    rss = max(r["rss_mb"] for r in results.values())
    print(f"{what}: {len(results) - len(bad)} of {len(results)} refused in one line, exit 2, "
          f"no cluster; max CPU {slow[1]['cpu']:.1f} s ({slow[0]}), max wall {wall:.1f} s, "
          f"max RSS {rss:.0f} MB")
    assert not bad, "\n".join(bad)


@pytest.mark.slow
def test_every_hostile_file_is_refused_by_the_report_cli(tmp_path: Path) -> None:
    files = {c: write(tmp_path / f"{c}.yaml", content) for c, (content, _) in FILES.items()}
    outs = {c: tmp_path / f"out-{c}" for c in FILES}
    cases = {c: ["-m", "ddlstudy.report", "--params", str(files[c]), "--out", str(outs[c])]
             for c in FILES}
    cases = {c: [sys.executable, *args] for c, args in cases.items()}
    _assert_refused(_sweep(cases, tmp_path), outs, "report --params (hostile files)")


# (flags, what the line names): 28 bad train flag sets: test_bounds' table and five more
BAD_TRAIN_FLAGS: list[tuple[list[str], str]] = [
    *BOUNDS_TRAIN_FLAGS,
    (["--workers", "100000"], "workers"),
    (["--model", "resnet51"], "resnet51"),
    (["--strategy", "nope"], "nope"),
    (["--dataset", "imagenet22k"], "imagenet22k"),
    (["--weight-decay", "nan"], "weight"),
]


@pytest.mark.slow
def test_every_bad_train_flag_is_refused_by_the_train_cli(tmp_path: Path) -> None:
    assert len(BAD_TRAIN_FLAGS) == 28
    cases, outs = {}, {}
    for i, (flags, _) in enumerate(BAD_TRAIN_FLAGS):
        name = f"{i:02d} {' '.join(flags)}"
        out = Path(flags[flags.index("--out") + 1]) if "--out" in flags else tmp_path / f"o{i}"
        outs[name] = out if "--out" not in flags else tmp_path / "never-used"
        extra = [] if "--out" in flags else ["--out", str(out)]
        cases[name] = [sys.executable, "-c", _TRAIN, "--model", "mlp", "--dataset",
                       "synthetic", "--steps", "2", *flags, *extra]
    results = _sweep(cases, tmp_path)
    assert all(r["torch"] is not None for r in results.values()), "a run did not say"
    _assert_refused(results, outs, "train flags", TRAIN_CPU_LIMIT_S)
    for (flags, words), r in zip(BAD_TRAIN_FLAGS, results.values(), strict=True):
        assert words in r["err"], (flags, r["err"])


def test_a_bad_train_flag_is_refused_before_torch_loads(tmp_path: Path) -> None:
    """One refusal per check stage (TrainConfig.validate, the engine count, the network
    flags), quick enough to run always: exit 2, one line, and torch never imported."""
    cases = {"seed": ["--seed", "-1"], "engines": ["--workers", "100000"],
             "network": ["--network", "nope"]}
    for name, flags in cases.items():
        home = tmp_path / name
        home.mkdir()
        r = _cli([sys.executable, "-c", _TRAIN, "--model", "mlp", *flags, "--out",
                  str(home / "out")], home)
        assert r["code"] == 2 and r["torch"] is False, (name, r)
        assert len(r["err"].strip().splitlines()) == 1 and not (home / "out").exists(), r


def test_the_torch_probe_sees_torch(tmp_path: Path) -> None:
    """The probe can fail: `_TRAIN` reports torch when the run imports it (--help loads none,
    so a run that imports torch itself first stands in for a CLI that loads it too early)."""
    probe = _TRAIN.replace("runpy.run_module", "__import__('torch'); runpy.run_module")
    r = _cli([sys.executable, "-c", probe, "--seed", "-1"], tmp_path)
    assert r["code"] == 2 and r["torch"] is True, r


@pytest.mark.slow
def test_unwritable_report_out_is_refused_by_the_cli(tmp_path: Path) -> None:
    """A valid params file, an --out that cannot be a folder: one line, exit 2, no cluster."""
    good = write(tmp_path / "ok.yaml", y({"run_id": "hostile-ok"}))
    outs = {"etc_passwd": Path("/etc/passwd"), "under_a_file": Path("/etc/passwd/x"),
            "proc": Path("/proc/ddlstudy-x"), "dev_null_child": Path("/dev/null/x")}
    cases = {n: [sys.executable, "-m", "ddlstudy.report", "--params", str(good), "--out",
                 str(o)] for n, o in outs.items()}
    _assert_refused(_sweep(cases, tmp_path), {n: tmp_path / "never" for n in outs},
                    "report --out (unwritable)")
