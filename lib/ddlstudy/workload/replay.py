"""Reference compute times for compute replay: how long one forward + backward takes per model.

On one machine N workers fight for the same cores, so measured scaling is contention, not a
cluster. Compute replay waits each worker's per-step compute time of a reference device instead
of computing, while gradients of the model's real sizes still cross real links. The times come
from a measured single-worker run on this host (`measure`), from a GPU run stored in the repo
(`tables/*.csv`, with how it was measured beside it), or from a CSV the user gives.

    python -m ddlstudy.replay measure --device cuda --models alexnet,vgg16 --out table.csv
    python -m ddlstudy.replay measure --device cuda --precision bf16 --channels-last --compile \
        --models resnet50 --shapes cifar,imagenet --out compiled.csv
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

TABLES = Path(__file__).resolve().parent / "tables"
COLUMNS = ["model", "shape", "batch_size", "device", "device_name", "compute_s_p50",
           "compute_s_min", "compute_s_max", "steps", "dtype", "torch"]
# How a row was measured, beside COLUMNS (tables measured before these existed lack them:
# eager float32, no channels-last).
HOW_COLUMNS = ["precision", "channels_last", "compiled", "warmup", "warmup_s", "driver", "cuda",
               "date", "error"]
PRECISIONS = {"fp32": None, "bf16": "bfloat16"}  # name -> torch.autocast dtype (None: off)


def measure(models: Sequence[str], shape: str = "cifar", batch_size: int = 32,
            device: str = "cpu", steps: int = 20, warmup: int = 5,
            channels_last: bool = False, precision: str = "fp32",
            compile: bool = False, record_errors: bool = False,
            on_row: Callable[[dict[str, Any]], None] | None = None) -> pd.DataFrame:
    """Median forward + backward time of one worker step, per model, on `device`.

    precision "bf16": forward and loss under torch.autocast(bfloat16) (weights stay float32,
    as mixed-precision training keeps them); channels_last: model and input in NHWC;
    compile: torch.compile(model), whose compilation falls in the warm-up steps (their total
    is `warmup_s`), never in the timed ones. record_errors: a model that fails (compile,
    memory) gets a row with its error and NaN times and the next model is measured (else the
    error is raised). On CUDA each timed step is bracketed by torch.cuda.synchronize, so it
    times the kernels, not their launch. on_row(row) is called after each model.
    """
    import torch

    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; valid: {', '.join(PRECISIONS)}")
    rows = []
    how = _how(device, precision, channels_last, compile, warmup)
    name = torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu"
    for model_name in models:
        row = {"model": model_name, "shape": shape, "batch_size": batch_size, "device": device,
               "device_name": name, "compute_s_p50": math.nan, "compute_s_min": math.nan,
               "compute_s_max": math.nan, "steps": steps, "dtype": "float32",
               "torch": torch.__version__, **how}
        try:
            times, warm_s = _time_model(model_name, shape, batch_size, device, steps, warmup,
                                        channels_last, precision, compile)
            row.update(compute_s_p50=statistics.median(times), compute_s_min=min(times),
                       compute_s_max=max(times), warmup_s=warm_s)
        except Exception as err:  # noqa: BLE001 - recorded in the row; the next model goes on
            if not record_errors:
                raise
            row["error"] = f"{type(err).__name__}: {err}".replace("\n", " ")[:300]
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
        rows.append(row)
        if on_row is not None:
            on_row(row)
    return pd.DataFrame(rows, columns=COLUMNS + HOW_COLUMNS)


def _time_model(model_name: str, shape: str, batch_size: int, device: str, steps: int,
                warmup: int, channels_last: bool, precision: str,
                compile: bool) -> tuple[list[float], float]:
    """(timed step seconds, warm-up seconds) of one model's forward + backward."""
    import contextlib

    import torch

    from ddlstudy.workload.models import INPUT_SHAPES, NUM_CLASSES, build_model

    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    model = build_model(model_name, shape).to(device)
    x = torch.randn(batch_size, *INPUT_SHAPES[shape], device=device)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, NUM_CLASSES[shape], (batch_size,), device=device)
    loss_fn = torch.nn.CrossEntropyLoss()
    if compile:
        torch._dynamo.reset()  # each model compiles afresh (ResNets share forward's code)
    run = torch.compile(model) if compile else model
    kind = torch.device(device).type
    amp = PRECISIONS[precision]

    def autocast() -> contextlib.AbstractContextManager:
        if amp is None:
            return contextlib.nullcontext()
        return torch.autocast(kind, dtype=getattr(torch, amp))

    times: list[float] = []
    _sync(device)
    t_warm = time.perf_counter()
    warm_s = 0.0
    for i in range(warmup + steps):
        if i == warmup:
            _sync(device)
            warm_s = time.perf_counter() - t_warm
        _sync(device)
        t0 = time.perf_counter()
        model.zero_grad(set_to_none=True)
        with autocast():
            loss = loss_fn(run(x), y)
        loss.backward()
        _sync(device)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    del model, run, x, y
    return times, warm_s


def _how(device: str, precision: str, channels_last: bool, compile: bool,
         warmup: int) -> dict[str, object]:
    """The row's measuring conditions: precision, layout, compile, driver, CUDA, date (UTC)."""
    import datetime as dt

    import torch

    cuda = device.startswith("cuda")
    return {"precision": precision, "channels_last": bool(channels_last),
            "compiled": bool(compile), "warmup": warmup, "warmup_s": math.nan,
            "driver": _driver() if cuda else "", "cuda": (torch.version.cuda or "") if cuda
            else "", "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "error": ""}


def _driver() -> str:
    """The NVIDIA driver version (nvidia-smi), or "" where it cannot be read."""
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.strip().splitlines()[0] if out.strip() else ""


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
        has = sorted(table.loc[table["model"] == model, "shape"].dropna().astype(str).unique())
        fix = (f"it has {model} at {', '.join(has)}: choose one (--shape, training.shape)"
               if has else "measure it with `python -m ddlstudy.replay measure`")
        raise ValueError(f"replay table has no row for model {model!r} at shape {shape!r}; "
                         f"{fix}")
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
    m.add_argument("--precision", default="fp32", choices=list(PRECISIONS),
                   help="fp32, or bf16 (torch.autocast bfloat16, float32 weights)")
    m.add_argument("--channels-last", action="store_true", help="model and input in NHWC")
    m.add_argument("--compile", action="store_true", help="torch.compile the model (compiled "
                   "in the warm-up steps, not timed; a failure is recorded in the row)")
    m.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    done: list[dict[str, Any]] = []

    def save(row: dict[str, Any]) -> None:  # the table so far: a run cut short keeps its rows
        done.append(row)
        pd.DataFrame(done, columns=COLUMNS + HOW_COLUMNS).to_csv(args.out, index=False)
        ms = row["compute_s_p50"] * 1e3
        how = (f"{row['precision']}{' cl' if row['channels_last'] else ''}"
               f"{' compiled' if row['compiled'] else ''}")
        print(f"{row['model']:>10} {row['shape']:>8} b{row['batch_size']:<4} {how}: "
              f"{ms:8.2f} ms (warm-up {row['warmup_s']:.1f} s) {row['error']}", flush=True)

    for shape in args.shapes.split(","):
        for b in args.batch_sizes.split(","):
            measure(args.models.split(","), shape, int(b), args.device, args.steps, args.warmup,
                    channels_last=args.channels_last, precision=args.precision,
                    compile=args.compile, record_errors=True, on_row=save)
    failed = [r["model"] for r in done if r["error"]]
    print(f"wrote {args.out} ({len(done)} rows" + (f"; failed: {', '.join(failed)})" if failed
                                                    else ")"))
    return 0


if __name__ == "__main__":
    from ddlstudy.host import entry
    raise SystemExit(entry.run(main))
