"""All-reduce algorithms: results against a float64 reference, counted bytes against the analytic
ones, clear errors on bad input (on every rank, no hang), and the benchmark CLI end to end.

Engine calls are batched (selfcheck_many) because each costs milliseconds of ipyparallel overhead.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from ddlstudy import collectives as C
from ddlstudy.bench import collectives as bench

ALGS = list(C.ALGORITHMS)
REQUIRED = ["algorithm", "ranks", "size_bytes", "count", "dtype", "time_p50_s", "time_min_s",
            "time_max_s", "algbw_GBps", "busbw_GBps", "wrong", "sent_bytes", "recv_bytes"]


def _cases(p: int) -> list[dict]:
    """Odd lengths, length < p (empty chunks), divisible lengths; sum/mean; float32/64."""
    lengths = sorted({1, max(1, p - 1), 7, 1001, 840})
    return [dict(algorithm=a, count=n, dtype=d, op=op, seed=n + p)
            for a in ALGS for n in lengths for d in ("float32", "float64")
            for op in ("sum", "mean")]


def _check_world(cluster, p: int) -> None:
    cluster.init_process_group(world_size=p)
    cases = _cases(p)
    per_rank = cluster.run(C.selfcheck_many, cases, world_size=p)
    bad = [(case, r["rank"], r["wrong"], r["max_abs_err"])
           for rank_res in per_rank for case, r in zip(cases, rank_res, strict=True)
           if r["wrong"]]
    assert not bad, bad[:5]
    for case, *res in zip(cases, *per_rank, strict=True):
        if case["count"] != 840 or case["algorithm"] == "reference":
            continue  # 840 = lcm(1..8): every chunk split is exact
        nbytes = 840 * (4 if case["dtype"] == "float32" else 8)
        for r in res:
            assert (r["sent_bytes"], r["recv_bytes"]) == C.analytic_traffic(
                case["algorithm"], nbytes, p, r["rank"]), (case, r)


@pytest.mark.parametrize("p", [1, 2, 3, 4])
def test_all_algorithms_match_float64_reference(cluster, p):
    _check_world(cluster, p)


@pytest.mark.slow
@pytest.mark.parametrize("p", [5, 6, 7, 8])
def test_all_algorithms_large_worlds(cluster8, p):
    _check_world(cluster8, p)


def test_counted_bytes_ring_and_ps(cluster):
    """Spelled out: ring moves 2(N-1)/N of the buffer per rank; the PS server N-1 buffers."""
    p, count = 4, 1024
    cluster.init_process_group(world_size=p)
    nbytes = count * 4
    ring = cluster.run(C.selfcheck, "ring", count, world_size=p)
    assert all(r["sent_bytes"] == r["recv_bytes"] == 2 * 3 * nbytes // 4 for r in ring)
    assert all(r["counted"] for r in ring)
    ps = cluster.run(C.selfcheck, "ps", count, world_size=p)
    assert ps[0]["sent_bytes"] == ps[0]["recv_bytes"] == 3 * nbytes
    assert all(r["sent_bytes"] == r["recv_bytes"] == nbytes for r in ps[1:])
    ref = cluster.run(C.selfcheck, "reference", count, world_size=p)
    assert not ref[0]["counted"]


@pytest.mark.parametrize("kind,expect", [
    ("length", "lengths differ across ranks"),
    ("dtype", "dtypes differ across ranks"),
    ("noncontiguous", "not contiguous"),
])
def test_bad_input_raises_on_every_rank(cluster, kind, expect):
    p = 3
    cluster.init_process_group(world_size=p)
    msgs = cluster.run(C.probe_error, kind, "ring_pipelined", 2, timeout=30, world_size=p)
    assert all(msgs), msgs  # every rank raised: nobody is left waiting
    assert expect in msgs[2]
    assert all("\n" not in m for m in msgs)
    if kind == "noncontiguous":
        assert all("rank(s) [2]" in m for m in msgs[:2])
    # The group still works afterwards: the check failed before any algorithm traffic.
    assert cluster.run(C.probe_error, "none", world_size=p) == ["", "", ""]


def test_unknown_algorithm_and_op_list_valid_ones():
    x = torch.ones(4)
    with pytest.raises(ValueError, match="valid: ring, ring_pipelined"):
        C.all_reduce(x, "butterfly")
    with pytest.raises(ValueError, match="valid: sum, mean"):
        C.all_reduce(x, "ring", op="max")


def test_algorithms_in_process_all_world_sizes():
    """Same algorithm code on threads: exact (float64 of small integers) for p = 1..8."""
    for p in range(1, 9):
        xs = [torch.arange(13, dtype=torch.float64) * (r + 1) for r in range(p)]
        want = torch.arange(13, dtype=torch.float64) * p * (p + 1) / 2
        for alg in C.HAND_WRITTEN:
            outs, _ = C.run_local(alg, xs, segment_bytes=16)  # pipelined: many segments
            assert all(torch.equal(o, want) for o in outs), (alg, p)


def test_wait_times_out_instead_of_hanging():
    """A peer that never sends: the receive gives up after timeout_s with a clear error."""
    import threading
    import time

    comm = C.Comm(C.LocalTransport(1, 2, {}, threading.Lock()), timeout_s=0.2)
    t0 = time.perf_counter()
    with pytest.raises(TimeoutError, match=r"recv 1<-0 .* within 0.2 s"):
        comm.recv(torch.empty(3), 0)
    # a hang guard: far above 0.2 s for a loaded host's late wake-up, far below the 120 s
    # default a Comm that ignored timeout_s would wait
    assert time.perf_counter() - t0 < 20


def test_analytic_traffic_hand_values():
    # 5 ranks, 1000 B: ring 2*4/5*1000 = 1600 each way.
    assert C.analytic_traffic("ring", 1000, 5, 3) == (1600, 1600)
    # 5 ranks fold onto 4: rank 0 hands 1000 B over and gets 1000 B back; rank 1 does that plus
    # lg 4 = 2 full exchanges (recursive doubling) = 3000, or 2*3/4*1000 = 1500 (Rabenseifner).
    assert C.analytic_traffic("recursive_doubling", 1000, 5, 0) == (1000, 1000)
    assert C.analytic_traffic("recursive_doubling", 1000, 5, 1) == (3000, 3000)
    assert C.analytic_traffic("rabenseifner", 1000, 5, 1) == (2500, 2500)
    assert C.analytic_traffic("rabenseifner", 1000, 5, 4) == (1500, 1500)
    # binomial tree on 6 ranks: rank 0 has children 1, 2, 4; rank 2 has parent 0 and child 3.
    assert C.analytic_traffic("tree", 1000, 6, 0) == (3000, 3000)
    assert C.analytic_traffic("tree", 1000, 6, 2) == (2000, 2000)
    assert C.analytic_traffic("tree", 1000, 6, 5) == (1000, 1000)


def test_count_wrong_catches_a_missing_term():
    """The #wrong check must be able to fail: drop one rank's input from the sum."""
    p, n = 4, 1000
    good = sum(C.rank_data(7, r, n, torch.float32) for r in range(p))
    assert C.count_wrong(good, 7, p, "sum")[0] == 0
    bad = good - C.rank_data(7, 2, n, torch.float32)
    assert C.count_wrong(bad, 7, p, "sum")[0] > n // 2


def test_bracketing_drift_is_rounding_sized():
    rng = np.random.default_rng(0)
    df = C.bracketing_drift(rng.normal(size=(8, 4096)), ["ring", "tree", "ps"])
    assert list(df["algorithm"]) == ["ring", "tree", "ps"]
    assert df["ranks_identical"].all()
    eps = float(np.finfo(np.float32).eps)
    assert (df["max_rel_err"] <= 7 * eps).all()  # (p-1) eps sum|x| bound
    assert (df["max_abs_err"] > 0).all()  # float32 really does round


def test_parse_size_and_grid():
    assert [bench.parse_size(s) for s in ("8", "8K", "64M", "256M", "1G", "4KiB")] == [
        8, 8192, 64 << 20, 256 << 20, 1 << 30, 4096]
    with pytest.raises(argparse.ArgumentTypeError):
        bench.parse_size("8X")
    assert bench.size_grid(8, 512, 8) == [8, 64, 512]
    assert bench.size_grid("8", "1K", 4) == [8, 32, 128, 512, 1024]
    assert bench.size_grid(8 << 10, 16 << 20, 8) == [8 << 10, 64 << 10, 512 << 10, 4 << 20,
                                                      16 << 20]


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    return parser.parse_args(argv)


def test_bench_cli_end_to_end(cluster, tmp_path, capsys):
    out = tmp_path / "bench"
    args = _parse(["-b", "8", "-e", "1K", "-n", "2", "-w", "1", "--ranks", "2",
                   "--algorithms", "ring,reference", "--repeats", "2", "--out", str(out)])
    assert bench.main(args, cluster=cluster) == 0
    df = __import__("pandas").read_csv(out / "collectives.csv")
    assert set(REQUIRED) <= set(df.columns)
    assert len(df) == 2 * 8 * 2  # 2 algorithms x 8 sizes (8 B .. 1 KiB) x 2 repeats
    assert sorted(df["repeat"].unique()) == [0, 1]
    # interleaved: the second repeat runs the algorithms in the other order
    assert list(df["algorithm"].iloc[[0, 1, 16, 17]]) == ["ring", "reference", "reference", "ring"]
    assert (__import__("pandas").read_csv(out / "collectives_summary.csv")["repeats"] == 2).all()
    assert (df["wrong"] == 0).all()
    assert (df["time_p50_s"] > 0).all()
    assert (out / "p2p.csv").exists() and (out / "meta.json").exists()
    text = capsys.readouterr().out
    assert "busbw" in text and "point-to-point" in text
    # Re-running into the same folder skips the finished cells.
    assert bench.main(args, cluster=cluster) == 0
    assert len(__import__("pandas").read_csv(out / "collectives.csv")) == 32


def test_bench_rejects_unknown_algorithm():
    with pytest.raises(SystemExit):
        _parse(["--algorithms", "ring,nope"])


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("ddlstudy.bench.train") is None,
                    reason="dispatcher needs every benchmark module")
def test_bench_dispatcher_subprocess(tmp_path):
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "IPYTHONDIR": str(root / ".ipython")}
    cmd = [sys.executable, "-m", "ddlstudy.bench", "collectives", "-b", "8", "-e", "1K", "-n", "2",
           "-w", "1", "--ranks", "2", "--algorithms", "ring,reference", "--out", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=root)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "collectives.csv").exists()
