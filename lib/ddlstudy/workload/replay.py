"""Reference compute times for compute replay: how long one forward + backward takes per model.

On one machine N workers fight for the same cores, so measured scaling is contention, not a
cluster. Compute replay waits each worker's per-step compute time of a reference device instead
of computing, while gradients of the model's real sizes still cross real links. The times come
from a measured single-worker run on this host (`measure`), from a GPU run stored in the repo
(`tables/*.csv`, with how it was measured beside it), or from a CSV the user gives.

    python -m ddlstudy.replay measure --device cuda --models alexnet,vgg16 --out table.csv
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

TABLES = Path(__file__).resolve().parent / "tables"
COLUMNS = ["model", "shape", "batch_size", "device", "device_name", "compute_s_p50",
           "compute_s_min", "compute_s_max", "steps", "dtype", "torch"]


def measure(models: Sequence[str], shape: str = "cifar", batch_size: int = 32,
            device: str = "cpu", steps: int = 20, warmup: int = 5,
            channels_last: bool = False) -> pd.DataFrame:
    """Median forward + backward time of one worker step, per model, on `device`."""
    import torch

    from ddlstudy.workload.models import INPUT_SHAPES, NUM_CLASSES, build_model

    rows = []
    name = torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu"
    for model_name in models:
        model = build_model(model_name, shape).to(device)
        if channels_last:
            model = model.to(memory_format=torch.channels_last)
        x = torch.randn(batch_size, *INPUT_SHAPES[shape], device=device)
        y = torch.randint(0, NUM_CLASSES[shape], (batch_size,), device=device)
        loss_fn = torch.nn.CrossEntropyLoss()
        times = []
        for i in range(warmup + steps):
            _sync(device)
            t0 = time.perf_counter()
            model.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            _sync(device)
            if i >= warmup:
                times.append(time.perf_counter() - t0)
        rows.append({"model": model_name, "shape": shape, "batch_size": batch_size,
                     "device": device, "device_name": name,
                     "compute_s_p50": statistics.median(times), "compute_s_min": min(times),
                     "compute_s_max": max(times), "steps": steps, "dtype": "float32",
                     "torch": torch.__version__})
        del model, x, y
    return pd.DataFrame(rows, columns=COLUMNS)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)


def load_table(source: str) -> pd.DataFrame:
    """'gpu' (the stored H100 table), a stored table's name, or a CSV path."""
    path = TABLES / f"{'h100' if source == 'gpu' else source}.csv"
    if not path.exists():
        path = Path(source)
    if not path.exists():
        stored = ", ".join(sorted(p.stem for p in TABLES.glob("*.csv")))
        raise ValueError(f"replay table {source!r} not found: use 'gpu', one of [{stored}], or "
                         "a CSV path with columns model, shape, batch_size, compute_s_p50")
    table = pd.read_csv(path)
    missing = {"model", "shape", "batch_size", "compute_s_p50"} - set(table.columns)
    if missing:
        raise ValueError(f"{path}: replay table lacks columns {sorted(missing)}")
    return table


def compute_time(table: pd.DataFrame, model: str, shape: str, batch_size: int) -> float:
    """The reference step's compute seconds; scales linearly from the nearest batch if needed."""
    rows = table[(table["model"] == model) & (table["shape"] == shape)]
    if rows.empty:
        raise ValueError(f"replay table has no row for model {model!r} at shape {shape!r}; "
                         "measure it with `python -m ddlstudy.replay measure`")
    exact = rows[rows["batch_size"] == batch_size]
    if len(exact):
        return float(exact["compute_s_p50"].iloc[0])
    near = rows.iloc[(rows["batch_size"] - batch_size).abs().argsort().iloc[0]]
    return float(near["compute_s_p50"]) * batch_size / float(near["batch_size"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ddlstudy.replay", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="time forward + backward per model on one device")
    m.add_argument("--models", default="alexnet,vgg16,vgg19,resnet18,resnet50,resnet152,googlenet")
    m.add_argument("--shapes", default="cifar")
    m.add_argument("--batch-sizes", default="32")
    m.add_argument("--device", default="cpu")
    m.add_argument("--steps", type=int, default=20)
    m.add_argument("--warmup", type=int, default=5)
    m.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    frames = [measure(args.models.split(","), shape, int(b), args.device, args.steps, args.warmup)
              for shape in args.shapes.split(",") for b in args.batch_sizes.split(",")]
    table = pd.concat(frames, ignore_index=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out, index=False)
    print(table.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
