"""Conversions of records written before a change of a column's meaning, one function each,
run once on a reference folder and idempotent (a converted row is recognised and left alone).
The CHANGELOG names the date and the command; `docs/metrics.md` the column's meaning now.

    python -m ddlstudy.records.migrate wire-per-rank [DIR]   # default: results/reference
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ddlstudy.records.reference import reference_dir

WIRE_WAYS = ("sent", "recv")


def wire_per_rank(root: Path) -> dict[str, int]:
    """Convert tables written before 2026-11-28 whose rows of several ranks per node
    (gpus_per_node k > 1) held the node's veth bytes whole in `wire_bytes_*_per_step`: the
    whole moves to `wire_node_bytes_*_per_step` and `wire_bytes_*` becomes each rank's share,
    / k (what `network.emulated.wire` writes now). Only rows whose workers fill their nodes
    (workers % k == 0, so every node holds k ranks) and that lack a wire_node value; rows of
    one rank per node get wire_node = wire. Returns {file: rows converted}; running it again
    converts nothing."""
    done: dict[str, int] = {}
    for path in sorted(root.rglob("*.csv")):
        head = pd.read_csv(path, nrows=0)
        need = {"gpus_per_node", "workers", *(f"wire_bytes_{w}_per_step" for w in WIRE_WAYS)}
        if not need <= set(head.columns):
            continue
        df = pd.read_csv(path)
        k = pd.to_numeric(df["gpus_per_node"], errors="coerce").fillna(1)
        if not (k > 1).any():
            continue
        for w in WIRE_WAYS:
            if f"wire_node_bytes_{w}_per_step" not in df:
                df[f"wire_node_bytes_{w}_per_step"] = float("nan")
        todo = (df["wire_node_bytes_sent_per_step"].isna() & df["wire_bytes_sent_per_step"].notna()
                & ((k <= 1) | (df["workers"] % k == 0)))
        if not todo.any():
            continue
        for w in WIRE_WAYS:
            whole = df[f"wire_bytes_{w}_per_step"]
            df.loc[todo, f"wire_node_bytes_{w}_per_step"] = whole[todo]
            df.loc[todo, f"wire_bytes_{w}_per_step"] = whole[todo] / k[todo].clip(lower=1)
        df.to_csv(path, index=False)
        done[str(path)] = int(todo.sum())
    return done


MIGRATIONS = {"wire-per-rank": wire_per_rank}


def main(argv: list[str] | None = None) -> int:
    """`python -m ddlstudy.records.migrate NAME [DIR]`: run one conversion, print what it did."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m ddlstudy.records.migrate",
                                     description="Convert old records to a column's meaning "
                                     "now (idempotent).")
    parser.add_argument("name", choices=sorted(MIGRATIONS))
    parser.add_argument("dir", nargs="?", default=None, help="default: results/reference")
    args = parser.parse_args(argv)
    root = Path(args.dir) if args.dir else reference_dir()
    if not root.is_dir():
        print(f"error: {root} is not a folder: give a reference folder", file=sys.stderr)
        return 2
    done = MIGRATIONS[args.name](root)
    for path, n in done.items():
        print(f"{Path(path).relative_to(root)}: {n} rows")
    print(f"{sum(done.values())} rows in {len(done)} tables converted")
    return 0


if __name__ == "__main__":
    from ddlstudy.host import entry
    raise SystemExit(entry.run(main))
