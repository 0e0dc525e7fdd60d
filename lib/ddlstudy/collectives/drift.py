"""float32 bracketing drift: each algorithm's rounding error against the exact sum."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ddlstudy.collectives.registry import hand_written
from ddlstudy.collectives.simulate import run_local


def bracketing_drift(values: np.ndarray | torch.Tensor,
                     algorithms: Sequence[str] | None = None) -> Any:
    """float32 all-reduce of values[rank] by each algorithm vs the exact (float64) sum.

    Every algorithm adds the same numbers in a different order ("bracketing"); the error each
    order leaves is what Fourie 2019 suspected behind the ring's lower accuracy. No communication:
    the algorithms run on in-process ranks. Returns one row per algorithm: max/mean absolute
    error, max error relative to sum|x| (the sum's condition scale), the fraction of elements
    that differ from the correctly rounded sum, and whether all ranks got identical bits.
    """
    import pandas as pd

    data = torch.as_tensor(np.asarray(values, dtype=np.float64))
    if data.dim() != 2:
        raise ValueError(f"values must be 2-D (ranks x elements), got shape {tuple(data.shape)}")
    x32 = data.to(torch.float32)
    exact = x32.double().sum(0)
    scale = x32.double().abs().sum(0).clamp_min(torch.finfo(torch.float64).tiny)
    rounded = exact.to(torch.float32)  # the best a float32 result can be
    rows = []
    for alg in algorithms or hand_written():
        outs, _ = run_local(alg, list(x32))
        err = (outs[0].double() - exact).abs()
        rows.append({
            "algorithm": alg, "ranks": data.shape[0], "elements": data.shape[1],
            "max_abs_err": float(err.max()), "mean_abs_err": float(err.mean()),
            "max_rel_err": float((err / scale).max()),
            "frac_not_correctly_rounded": float((outs[0] != rounded).double().mean()),
            "ranks_identical": all(torch.equal(outs[0], o) for o in outs[1:]),
        })
    return pd.DataFrame(rows)
