"""Training throughput, Horovod-style: hand-written bucketed all-reduce vs torch DDP (img/sec).

Defaults are the issue's benchmark: ResNet-18, CIFAR shape, synthetic data, 2 workers, batch 32
per worker; runs `allreduce` (ring, bucketed, overlapped with backward), the same without overlap,
and `ddp`, then prints images/sec(allreduce overlapped) / images/sec(ddp) (goal >= 0.9) and the
no-overlap ratio. The variant list runs --repeats times, interleaved. Writes results.csv (one
row per variant and repeat), table.csv (pooled per variant), chunks.csv, each run's records
under OUT/<variant>-<repeat>/, and meta.json.

    python -m ddlstudy.bench train --out outputs/bench/train
    python -m ddlstudy.bench train --model resnet50 --workers 4 --steps 30 \\
        --variants allreduce,allreduce_no_overlap,ddp,ps_sync
    python -m ddlstudy.bench train --model resnet50 --workers 4 --variants allreduce,ddp \\
        --network 10GbE --compute replay --replay-source gpu --goal 0.95   # as root
    python -m ddlstudy.bench train --model resnet50 --workers 4 --variants horovod,ddp \\
        --network 10GbE --compute replay --replay-source gpu --steps 4    # Horovod vs DDP

With --network every engine runs in its own namespace on a shaped link
(ddlstudy.network.emulated.netem) and
replayed compute is stretched by 1/scale; the allreduce/ddp ratio then comes with a bootstrap
interval over the interleaved repeats (ddlstudy.analysis.stats), and the goal is met or not only
when the
interval says so.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from ddlstudy.cli.train import (
    _OneLineParser,
    add_config_arguments,
    add_network_arguments,
    check_network_args,
    config_from_args,
)
from ddlstudy.train.config import TrainConfig  # not the trainer: torch loads only once every

# flag is checked (`_main_owned`), so a bad flag is refused in well under a second

# variant name -> TrainConfig overrides
VARIANTS: dict[str, dict[str, Any]] = {
    "allreduce": {"strategy": "allreduce", "overlap": True},
    "allreduce_no_overlap": {"strategy": "allreduce", "overlap": False},
    "ddp": {"strategy": "ddp"},
    "ps_sync": {"strategy": "ps_sync"},
    "ps_async": {"strategy": "ps_async"},
    "ps_sharded": {"strategy": "ps_sharded"},
    "single": {"strategy": "single", "workers": 1},
    "horovod": {"strategy": "horovod"},
}
# variants compared with ddp (images/sec ratio, with an interval when repeated)
VS_DDP = ("allreduce", "allreduce_no_overlap", "horovod")
DEFAULT_VARIANTS = "allreduce,allreduce_no_overlap,ddp"
DEFAULTS = TrainConfig(model="resnet18", shape="cifar", dataset="synthetic", workers=2,
                       batch_size=32, steps=8, warmup_steps=2, bucket_mb=25.0, eval=False)
DEFAULT_REPEATS = 3
GOAL = 0.9
TABLE_COLUMNS = ["variant", "images_per_sec", "images_per_sec_per_worker", "images_per_sec_conf",
                 "step_time_p50_s", "compute_s", "comm_s", "comm_wait_s", "update_s",
                 "bytes_sent_per_step"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--variants", "--strategies", dest="variants", default=DEFAULT_VARIANTS,
                        help=f"comma-separated, from {', '.join(VARIANTS)} "
                             f"(default {DEFAULT_VARIANTS})")
    parser.add_argument("--algorithm", default="ring", help="allreduce algorithm (collectives)")
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS,
                        help="run the variant list this many times, interleaved, so a burst of "
                             "load on the machine hits every variant alike; images/sec pools "
                             f"all repeats (default {DEFAULT_REPEATS})")
    parser.add_argument("--out", default="outputs/bench/train", help="results folder")
    parser.add_argument("--no-progress", dest="progress", action="store_false")
    parser.add_argument("--goal", type=float, default=GOAL,
                        help=f"allreduce/ddp images/sec ratio to reach (default {GOAL})")
    add_config_arguments(parser, DEFAULTS)
    add_network_arguments(parser)
    parser.set_defaults(eval=False)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        if math.isnan(v):
            return "-"
        return f"{v:.4g}" if abs(v) < 1e5 else f"{v:,.0f}"
    return str(v)


def format_table(df: pd.DataFrame, columns: list[str]) -> str:
    cells = [[_fmt(v) for v in row] for row in df[columns].itertuples(index=False)]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)


def ratios(table: pd.DataFrame) -> dict[str, float]:
    """images/sec of each all-reduce variant (and Horovod) over ddp's (the goal, >= 0.9, is
    the overlapped allreduce's)."""
    ips = table.set_index("variant")["images_per_sec"]
    out = {}
    if "ddp" in ips:
        for v in VS_DDP:
            if v in ips:
                out[f"{v}/ddp"] = float(ips[v] / ips["ddp"])
    return out


def pooled_table(results: pd.DataFrame, chunks: pd.DataFrame, workers: dict[str, int]
                 ) -> pd.DataFrame:
    """Per variant: images/sec = all images / all timed wall time over the repeats; the +- is
    1.96 x std of per-chunk img/sec per worker; times and bytes are medians over repeats."""
    rows = []
    for v, grp in results.groupby("variant", sort=False):
        ch = chunks[chunks["variant"] == v]
        ips = grp["images"].sum() / grp["wall_s"].sum()
        row = {"variant": v, "repeats": len(grp), "images_per_sec": ips,
               "images_per_sec_per_worker": ips / workers[v],
               "images_per_sec_conf": float(1.96 * (ch["images_per_sec"] / workers[v]).std(
                   ddof=0)) if len(ch) else math.nan}
        for col in TABLE_COLUMNS[4:]:
            row[col] = float(grp[col].median())
        rows.append(row)
    return pd.DataFrame(rows)


def _interval(results: pd.DataFrame, variant: str = "allreduce") -> dict[str, Any]:
    """variant/ddp images/sec with a paired bootstrap interval over the interleaved repeats."""
    from ddlstudy.analysis import stats

    if not {variant, "ddp"} <= set(results["variant"]):
        return {}
    ips = results.pivot(index="repeat", columns="variant", values="images_per_sec")
    est = stats.ratio_ci(ips[variant], ips["ddp"], paired=True)
    return {"value": est.value, "low": est.low, "high": est.high, "n": est.n,
            "method": est.method}


def goal_verdict(interval: dict[str, Any], goal: float) -> str:
    """'(goal >= g: met / NOT met / inconclusive, interval [lo, hi] over n repeats)'."""
    if not interval or not all(math.isfinite(interval[k]) for k in ("low", "high")):
        return f"(goal >= {goal}: not measured - fewer than 2 repeats)"
    lo, hi = interval["low"], interval["high"]
    word = "met" if lo >= goal else "NOT met" if hi < goal else "inconclusive"
    return (f"(goal >= {goal}: {word}; 95 % interval [{lo:.3f}, {hi:.3f}] over "
            f"{interval['n']} interleaved repeats)")


def interval_text(interval: dict[str, Any]) -> str:
    """'(95 % interval [lo, hi] over n interleaved repeats)', or why there is none."""
    if not interval or not all(math.isfinite(interval[k]) for k in ("low", "high")):
        return "(no interval: fewer than 2 repeats)"
    return (f"(95 % interval [{interval['low']:.3f}, {interval['high']:.3f}] over "
            f"{interval['n']} interleaved repeats)")


def main(args: argparse.Namespace) -> int:


    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    bad = [v for v in names if v not in VARIANTS]
    if bad or not names:
        print(f"error: unknown variant(s) {bad or names}; valid: {', '.join(VARIANTS)}",
              file=sys.stderr)
        return 2
    try:
        configs = {v: config_from_args(args, algorithm=args.algorithm, **VARIANTS[v]).validate()
                   for v in names}
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    problem = check_network_args(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    out = Path(args.out)
    from ddlstudy.records.lock import OutputFolderError, OutputLock

    try:  # one owner per --out, before any engine starts
        lock = OutputLock(out, "bench train").acquire()
    except OutputFolderError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        return _main_owned(args, configs, names, out)
    finally:
        lock.release()


def _main_owned(args: argparse.Namespace, configs: dict[str, Any], names: list[str],
                out: Path) -> int:
    """main's work once --out is owned."""
    from dataclasses import replace

    from ddlstudy.cluster.engines import ClusterError
    from ddlstudy.experiments.grid import dilation, emulated_cluster
    from ddlstudy.records import store as records
    from ddlstudy.train.trainer import train

    engines = max(c.world_size for c in configs.values())
    base = configs[names[0]]
    print(f"Model: {base.model} ({base.input_shape}), data: {base.dataset}, batch {base.batch_size}"
          f" per worker, {base.workers} workers, {base.warmup_steps} warm-up + {base.steps} timed "
          f"steps, variants: {', '.join(names)}", flush=True)
    rows, chunk_rows, network = [], [], None
    try:
        with emulated_cluster(args.network, engines, args.scale, offload_off=False,
                              profile=args.profile, collective_timeout_s=args.timeout) as cluster:
            configs = {v: replace(c, time_dilation=dilation(cluster, c.compute)).validate()
                       for v, c in configs.items()}
            network = cluster.network_info
            for rep in range(args.repeats):
                for v in names:
                    sub = out / (v if args.repeats == 1 else f"{v}-{rep}")
                    result = train(cluster, configs[v], out_dir=sub, progress=args.progress)
                    for line in result.horovod_lines():
                        print(f"[{v} #{rep}] {line}", flush=True)
                    rows.append({"variant": v, "repeat": rep, **result.row})
                    chunk_rows.append(result.chunks.assign(variant=v, repeat=rep))
    except (ClusterError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except (TimeoutError, RuntimeError) as err:
        print(f"run failed: {err}", file=sys.stderr)
        return 1
    results = pd.DataFrame(rows)
    chunks = pd.concat(chunk_rows, ignore_index=True)
    table = pooled_table(results, chunks, {v: c.workers for v, c in configs.items()})
    r = ratios(table)
    per_repeat = {k: [ratios(results[results["repeat"] == rep]).get(k, math.nan)
                      for rep in range(args.repeats)] for k in r}
    records.write_table(results, out, "results")
    records.write_table(table, out, "table")
    records.write_table(chunks, out, "chunks")
    records.write_meta(out, {"variants": names, "repeats": args.repeats,
                             **configs[names[0]].to_dict()}, ratios=r,
                       ratios_per_repeat=per_repeat, goal=args.goal,
                       ratio_interval=_interval(results), network=network,
                       ratio_intervals={k: _interval(results, k.split("/")[0]) for k in r})
    print()
    print(format_table(table, ["variant", "repeats", *TABLE_COLUMNS[1:]]))
    print()
    for k, val in r.items():
        verdict = ""
        if k == "allreduce/ddp":
            verdict = "  " + goal_verdict(_interval(results), args.goal)
        else:
            verdict = "  " + interval_text(_interval(results, k.split("/")[0]))
        reps = ", ".join(f"{x:.3f}" for x in per_repeat[k])
        print(f"images/sec {k}: {val:.3f}{verdict}  [per repeat: {reps}]")
    print(f"wrote {out}/results.csv, table.csv, chunks.csv and meta.json")
    return 0


if __name__ == "__main__":
    from ddlstudy.host import entry
    parser = _OneLineParser(prog="python -m ddlstudy.bench train")
    add_arguments(parser)
    raise SystemExit(entry.run(lambda: main(parser.parse_args())))
