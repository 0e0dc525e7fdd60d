"""The all-reduce bench's engine side without ipyparallel (or pydantic): every process a rank.

    torchrun --standalone --nproc-per-node 1 scripts/gpu/collectives_spmd.py --out DIR
    python scripts/gpu/collectives_spmd.py --device cpu --out DIR        # one rank, no launcher

Joins the launcher's group through ddlstudy.cli.torchrun.start (cpu:gloo,cuda:nccl on CUDA),
then, per registered algorithm and size, runs what `python -m ddlstudy.bench collectives`
runs on each engine: collectives.time_algorithm (inputs on the group's payload device,
synchronize around each timed call) and collectives.selfcheck (against the float64
reference). Rank 0 writes collectives.csv (slowest rank per iteration, median) and prints it.
The bench's driver module is not imported: it reads ddlstudy.config.params, which needs
pydantic. With one rank the algorithms move no bytes: it checks the GPU path (inputs on the
device, the input check's metadata over gloo), not bandwidth.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--maxbytes", type=int, default=64 << 20)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    import numpy as np
    import pandas as pd
    import torch.distributed as dist

    from ddlstudy import collectives as coll
    from ddlstudy.cli.torchrun import start

    cluster = start(args.device)
    sizes = [8 << (3 * i) for i in range(12) if 8 << (3 * i) <= args.maxbytes]
    rows = []
    for size in sizes:
        for alg in coll.ALGORITHMS:
            count = max(1, size // 4)
            row = {"algorithm": alg, "ranks": cluster.world_size, "size_bytes": count * 4,
                   "error": ""}
            try:
                per_rank = cluster.run(coll.time_algorithm, alg, count, "float32", "sum",
                                       args.iters, args.warmup)
                times = np.max(np.array([r["times_s"] for r in per_rank]), axis=0)
                check = cluster.run(coll.selfcheck, alg, count, "float32", "sum")
                row.update(time_p50_s=float(np.median(times)), time_min_s=float(times.min()),
                           time_max_s=float(times.max()),
                           wrong=int(sum(r["wrong"] for r in check)),
                           max_abs_err=max(r["max_abs_err"] for r in check))
            except (RuntimeError, ValueError, TimeoutError) as err:
                row["error"] = f"{type(err).__name__}: {err}".replace("\n", " ")[:300]
            rows.append(row)
    if cluster.rank == 0:
        info = cluster.infos[0]
        df = pd.DataFrame(rows).assign(device=info["device"], device_name=info["device_name"],
                                       backend=cluster.network_info["backend"])
        args.out.mkdir(parents=True, exist_ok=True)
        df.to_csv(args.out / "collectives.csv", index=False)
        print(df.to_string(index=False))
        print(f"wrote {args.out}/collectives.csv ({len(df)} rows, "
              f"{int((df['error'] != '').sum())} failed, "
              f"{int((df.get('wrong', pd.Series(dtype=float)).fillna(0) > 0).sum())} wrong)")
    dist.destroy_process_group()
    return 0

if __name__ == "__main__":
    sys.exit(main())
