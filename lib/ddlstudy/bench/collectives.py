"""All-reduce benchmark in nccl-tests units: size, count, time, algbw, busbw, #wrong per algorithm.

    python -m ddlstudy.bench collectives --ranks 2,4 -b 8 -e 64M -f 2 -n 20 -w 5 --out DIR

algbw = size / time (GB = 1e9 B); busbw = algbw * 2(n-1)/n, the per-link bandwidth a ring-optimal
all-reduce needs, comparable with the point-to-point bandwidth printed at the end (its ceiling).
A re-run into the same --out skips grid cells already measured without error. --repeats runs the
whole grid that many times, interleaved: within each (ranks, size) the algorithms run back to back,
their order rotated every repeat, so drift hits every algorithm alike; every repeat is a row.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ddlstudy import collectives as coll
from ddlstudy.cluster.engines import pingpong
from ddlstudy.config import params
from ddlstudy.records.store import failed_runs as failed  # cells whose run raised

COLUMNS = ["algorithm", "ranks", "size_bytes", "count", "dtype", "op", "time_p50_s", "time_min_s",
           "time_max_s", "algbw_GBps", "busbw_GBps", "wrong", "max_abs_err", "sent_bytes",
           "recv_bytes", "sent_msgs", "recv_msgs", "traffic_counted", "iters", "repeat", "error"]
CELL_KEY = ["algorithm", "ranks", "size_bytes", "dtype", "op", "repeat"]


def parse_size(text: str) -> int:
    """argparse type for '8', '8K', '64M', '1G' (binary multiples, as nccl-tests)."""
    try:
        return params.parse_size(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def size_grid(minbytes: int | str, maxbytes: int | str, factor: float) -> list[int]:
    """minbytes, minbytes*f, ... up to maxbytes, which is always included."""
    minbytes, maxbytes = parse_size(str(minbytes)), parse_size(str(maxbytes))
    if minbytes < 1 or maxbytes < minbytes:
        raise ValueError(f"need 1 <= minbytes <= maxbytes, got {minbytes}, {maxbytes}")
    if factor <= 1:
        raise ValueError(f"stepfactor must be > 1, got {factor}")
    sizes, s = [], float(minbytes)
    while s <= maxbytes:
        sizes.append(int(s))
        s *= factor
    if sizes[-1] != maxbytes:  # unlike nccl-tests, always measure the size asked for with -e
        sizes.append(maxbytes)
    return sizes


def _int_list(text: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad rank list {text!r}: use e.g. 2,4") from None
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"bad rank list {text!r}: positive integers, e.g. 2,4")
    return out


def _repeats(text: str) -> int:
    """argparse type: 1..100 repeats."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= 100:
        raise argparse.ArgumentTypeError(f"bad --repeats {text!r}: an integer 1..100, e.g. 3")
    return n


def _algorithms(text: str) -> list[str]:
    if text in ("all", ""):
        return list(coll.ALGORITHMS)
    names = [a.strip() for a in text.split(",") if a.strip()]
    unknown = [a for a in names if a not in coll.ALGORITHMS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown algorithm(s) {unknown}; valid: "
                                         f"{', '.join(coll.ALGORITHMS)}")
    return names


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("-b", "--minbytes", type=parse_size, default=8, help="smallest size (8)")
    parser.add_argument("-e", "--maxbytes", type=parse_size, default=256 << 20,
                        help="largest size (256M)")
    parser.add_argument("-f", "--stepfactor", type=float, default=2, help="size multiplier (2)")
    parser.add_argument("-n", "--iters", type=int, default=20, help="timed iterations (20)")
    parser.add_argument("-w", "--warmup_iters", type=int, default=5, help="warm-up iterations (5)")
    parser.add_argument("--ranks", type=_int_list, default=[2, 4],
                        help="world sizes, comma-separated (2,4)")
    parser.add_argument("--algorithms", type=_algorithms, default=list(coll.ALGORITHMS),
                        help=f"comma-separated, or all: {','.join(coll.ALGORITHMS)}")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    parser.add_argument("--op", default="sum", choices=list(coll.OPS))
    parser.add_argument("--out", type=Path, default=None,
                        help="output folder (outputs/collectives-<time>)")
    parser.add_argument("--check", action=argparse.BooleanOptionalAction, default=True,
                        help="count #wrong against a float64 reference (on)")
    parser.add_argument("--ipp-profile", dest="profile", default=None,
                        help="connect to this ipyparallel profile instead of local engines")
    parser.add_argument("--repeats", type=_repeats, default=3,
                        help="interleaved repeats of the whole grid (3); one row per repeat")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds any one collective may take before it is an error")


def _cell(cluster: Any, p: int, alg: str, count: int, dtype: str, op: str, iters: int,
          warmup: int, check: bool, timeout_s: float, repeat: int = 0) -> dict[str, Any]:
    """Time one (algorithm, size) cell on p ranks, then (optionally) check its result."""
    per_rank = cluster.run(coll.time_algorithm, alg, count, dtype, op, iters, warmup, timeout_s,
                           world_size=p)
    times = np.max(np.array([r["times_s"] for r in per_rank]), axis=0)  # slowest rank per iter
    t50 = float(np.median(times))
    size = count * np.dtype(dtype).itemsize
    algbw = size / t50 / 1e9
    row: dict[str, Any] = {
        "algorithm": alg, "ranks": p, "size_bytes": size, "count": count, "dtype": dtype,
        "op": op, "time_p50_s": t50, "time_min_s": float(times.min()),
        "time_max_s": float(times.max()), "algbw_GBps": algbw,
        "busbw_GBps": algbw * 2 * (p - 1) / p, "wrong": -1, "max_abs_err": float("nan"),
        "sent_bytes": max(r["sent_bytes"] for r in per_rank),
        "recv_bytes": max(r["recv_bytes"] for r in per_rank),
        "sent_msgs": max(r["sent_msgs"] for r in per_rank),
        "recv_msgs": max(r["recv_msgs"] for r in per_rank),
        "traffic_counted": per_rank[0]["counted"], "iters": iters, "repeat": repeat, "error": "",
    }
    if check:
        res = cluster.run(coll.selfcheck, alg, count, dtype, op, 0, 1, timeout_s, world_size=p)
        row["wrong"] = int(sum(r["wrong"] for r in res))
        row["max_abs_err"] = max(r["max_abs_err"] for r in res)
    return row


def _p2p(cluster: Any, p: int, nbytes: int, iters: int, warmup: int,
         timeout_s: float) -> dict[str, Any]:
    rows = cluster.run(pingpong, [nbytes], iters, warmup, [1], world_size=p,
                       timeout=timeout_s + 30)[0]
    return {"ranks": p, **rows[0]}


def run_collectives_bench(cluster: Any, ranks: Sequence[int], sizes: Sequence[int],
                          algorithms: Sequence[str], iters: int = 20, warmup: int = 5,
                          dtype: str = "float32", op: str = "sum", check: bool = True,
                          timeout_s: float = 120.0, done: pd.DataFrame | None = None,
                          on_row: Any = None, progress: bool = True, repeats: int = 1
                          ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The grid ranks x algorithms x sizes, `repeats` times, on a started Cluster; returns
    (collectives, p2p), one row per cell and repeat (see `grid_order` for the interleaving).

    done: rows already measured (skipped). on_row(df_so_far) is called after every cell, so a
    caller can save as it goes. A failing cell is recorded with its error, the process group is
    rebuilt, and the grid goes on.
    """
    from tqdm.auto import tqdm

    itemsize = np.dtype(dtype).itemsize
    counts = sorted({max(1, s // itemsize) for s in sizes})
    have = set()
    rows: list[dict[str, Any]] = []
    if done is not None and not done.empty:
        ok = done[~failed(done)]
        if "repeat" not in ok:
            ok = ok.assign(repeat=0)
        ok = ok.assign(repeat=ok["repeat"].fillna(0).astype(int))
        rows = ok.to_dict("records")
        have = {tuple(r[k] for k in CELL_KEY) for r in rows}
    grid = [(rep, p, a, n) for rep, p, n, a in grid_order(ranks, counts, algorithms, repeats)
            if (a, p, n * itemsize, dtype, op, rep) not in have]
    p2p_rows = []
    bar = tqdm(total=len(grid), desc="all-reduce grid", disable=not progress, file=sys.stderr)
    current = 0
    for rep, p, alg, count in grid:
        if p > cluster.size:
            raise ValueError(f"--ranks {p} needs {p} engines; the cluster has {cluster.size}")
        if p != current:
            cluster.init_process_group(world_size=p)
            current = p
            bar.write(f"# ranks {p}\n{_header()}")
        bar.set_postfix_str(f"r{rep} p={p} {alg} {count * itemsize} B")
        try:
            row = _cell(cluster, p, alg, count, dtype, op, iters, warmup, check, timeout_s, rep)
        except (TimeoutError, RuntimeError, ValueError) as err:
            row = {"algorithm": alg, "ranks": p, "size_bytes": count * itemsize, "count": count,
                   "dtype": dtype, "op": op, "iters": iters, "repeat": rep,
                   "error": f"{type(err).__name__}: {err}".replace("\n", " ")[:500]}
            cluster.init_process_group(world_size=p)  # a failed collective poisons the group
        rows.append(row)
        bar.write(_line(row))
        bar.update()
        if on_row is not None:
            on_row(_frame(rows))
    bar.close()
    big = max(counts) * itemsize
    p2p_ranks = max(ranks)
    if p2p_ranks >= 2:
        if current != p2p_ranks:
            cluster.init_process_group(world_size=p2p_ranks)
        p2p_rows.append(_p2p(cluster, p2p_ranks, big, max(iters, 3), warmup, timeout_s))
    return _frame(rows), pd.DataFrame(p2p_rows)


def grid_order(ranks: Sequence[int], counts: Sequence[int], algorithms: Sequence[str],
               repeats: int) -> list[tuple[int, int, int, str]]:
    """(repeat, ranks, count, algorithm) in run order: per repeat, per rank count and size, every
    algorithm back to back, the algorithm order rotated by one each repeat (drift hits all)."""
    algs = list(algorithms)
    order = []
    for rep in range(repeats):
        turn = algs[rep % len(algs):] + algs[:rep % len(algs)] if algs else []
        order += [(rep, p, n, a) for p in ranks for n in counts for a in turn]
    return order


def repeat_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Per (algorithm, ranks, size): median over repeats of each repeat's p50 time, with its
    order-statistic interval (ddlstudy.analysis.stats) and the repeat count; failed rows left
    out."""
    from ddlstudy.analysis import stats

    ok = df[~failed(df)]
    if ok.empty:
        return pd.DataFrame(columns=["algorithm", "ranks", "size_bytes", "time_p50_s",
                                     "time_p50_s_ci_low", "time_p50_s_ci_high", "repeats"])
    return stats.summarize(ok, ["algorithm", "ranks", "size_bytes"], "time_p50_s")


def _frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    for col in COLUMNS:
        if col not in df:
            df[col] = np.nan
    return df[COLUMNS + [c for c in df.columns if c not in COLUMNS]]


_FMT = [("size(B)", 12), ("count", 11), ("type", 8), ("algorithm", 19), ("time(us)", 10),
        ("min", 10), ("max", 10), ("algbw", 7), ("busbw", 7), ("#wrong", 7)]


def _header() -> str:
    return " ".join(name.rjust(w) for name, w in _FMT)


def _line(row: dict[str, Any]) -> str:
    if row.get("error"):
        return (f"{row['size_bytes']:>12} {row['count']:>11} {row['dtype']:>8} "
                f"{row['algorithm']:>19}  ERROR {row['error']}")
    vals = [row["size_bytes"], row["count"], row["dtype"], row["algorithm"],
            f"{row['time_p50_s'] * 1e6:.1f}", f"{row['time_min_s'] * 1e6:.1f}",
            f"{row['time_max_s'] * 1e6:.1f}", f"{row['algbw_GBps']:.2f}",
            f"{row['busbw_GBps']:.2f}", "N/A" if row["wrong"] < 0 else row["wrong"]]
    return " ".join(str(v).rjust(w) for v, (_, w) in zip(vals, _FMT, strict=True))


def summary(df: pd.DataFrame) -> str:
    """Per ranks at the smallest and largest size: the lowest median over repeats, with its
    interval, and whether that interval overlaps the runner-up's (then the order is noise)."""
    med = repeat_summary(df)
    lines = []
    for p, sub in med.groupby("ranks"):
        for size in (sub["size_bytes"].min(), sub["size_bytes"].max()):
            cell = sub[sub["size_bytes"] == size].sort_values("time_p50_s")
            best = cell.iloc[0]
            line = (f"ranks {p}, {size} B: lowest median {best['algorithm']} "
                    f"{best['time_p50_s'] * 1e6:.1f} us [{best['time_p50_s_ci_low'] * 1e6:.1f}, "
                    f"{best['time_p50_s_ci_high'] * 1e6:.1f}] over {best['repeats']} repeat(s)")
            if len(cell) > 1:
                second = cell.iloc[1]
                apart = best["time_p50_s_ci_high"] < second["time_p50_s_ci_low"]
                line += (f"; runner-up {second['algorithm']} {second['time_p50_s'] * 1e6:.1f} us"
                         + ("" if apart else " (intervals overlap: order not decided)"))
            lines.append(line)
    return "\n".join(lines)


def main(args: argparse.Namespace, cluster: Any = None) -> int:
    """Run the benchmark; `cluster`: an already started Cluster to use instead of starting one."""
    out = args.out or Path("outputs") / f"collectives-{dt.datetime.now():%Y%m%d-%H%M%S}"
    try:
        sizes = size_grid(args.minbytes, args.maxbytes, args.stepfactor)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    from ddlstudy.records.lock import OutputFolderError, OutputLock

    try:  # bounds, then one owner per --out, before any engine starts
        problem = check_args(args)
        lock = None if problem else OutputLock(out, "bench collectives").acquire()
    except OutputFolderError as err:
        problem = str(err)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        return _main_owned(args, cluster, out, sizes)
    finally:
        lock.release()


def check_args(args: argparse.Namespace) -> str | None:
    """The flags' bounds (as params' collectives section): None, or the one-line problem."""
    import math

    if not 1 <= args.iters <= 1_000_000:
        return f"-n/--iters must be 1..1000000, got {args.iters}"
    if not 0 <= args.warmup_iters <= 1_000_000:
        return f"-w/--warmup_iters must be 0..1000000, got {args.warmup_iters}"
    if not (math.isfinite(args.stepfactor) and 1 < args.stepfactor <= 1 << 20):
        return f"-f/--stepfactor must be in (1, 1048576], got {args.stepfactor:g}"
    if not (math.isfinite(args.timeout) and 0 < args.timeout <= params.MAX_TIMEOUT_S):
        return f"--timeout must be in (0, {params.MAX_TIMEOUT_S:g}] s, got {args.timeout:g}"
    if max(args.ranks) > 64:
        return f"--ranks: at most 64 ranks, got {max(args.ranks)}"
    return params.collective_memory_problem(args.maxbytes, max(args.ranks), "-e/--maxbytes")


def _main_owned(args: argparse.Namespace, cluster: Any, out: Path, sizes: list[int]) -> int:
    """main's work once --out is owned."""
    from contextlib import nullcontext

    from ddlstudy.cluster.engines import Cluster, ClusterError
    from ddlstudy.records import store as records

    params = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
              if k != "func"}
    records.write_meta(out, params)
    done = None
    if (Path(out) / "collectives.csv").exists():
        done = records.read_table(out, "collectives")
    workers = max(args.ranks)
    try:
        ctx = nullcontext(cluster) if cluster is not None else Cluster(
            workers=workers, profile=args.profile, collective_timeout_s=args.timeout)
        with ctx as c:
            df, p2p = run_collectives_bench(
                c, args.ranks, sizes, args.algorithms, args.iters, args.warmup_iters,
                args.dtype, args.op, args.check, args.timeout, done=done,
                on_row=lambda d: records.write_table(d, out, "collectives"),
                repeats=args.repeats)
    except (ClusterError, ValueError, TimeoutError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    records.write_table(df, out, "collectives")
    records.write_table(repeat_summary(df), out, "collectives_summary")
    records.write_table(p2p, out, "p2p")
    print("\n" + summary(df))
    for r in p2p.itertuples():
        print(f"point-to-point rank 0 <-> 1 ({r.ranks} ranks up), {r.size_bytes} B one-way: "
              f"{r.time_p50_s * 1e6:.1f} us, {r.bandwidth_GBps:.2f} GB/s (busbw ceiling)")
    n_failed = int(failed(df).sum())
    n_wrong = int((df["wrong"].fillna(0) > 0).sum())
    print(f"wrote {out}/collectives.csv ({len(df)} rows), p2p.csv, meta.json")
    if n_failed or n_wrong:
        print(f"{n_failed} cell(s) failed, {n_wrong} with wrong results", file=sys.stderr)
        return 1
    return 0
