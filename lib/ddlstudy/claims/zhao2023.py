"""Zhao et al. 2023 (PyTorch FSDP, "PyTorch FSDP: Experiences on Scaling Fully Sharded Data
Parallel", VLDB 2023): the abstract's performance claim, FSDP against DDP on a model that fits
on every worker, tested by chapter 11's comparison cells.

The quantity is training throughput (images/sec) of `fsdp` (torch FSDP2 `fully_shard`) over
that of `ddp` (torch DistributedDataParallel) at the same worker count and run (same repeat):
the same model, batch and links, so the ratio is also the ratio of the paper's TFLOPS. The two
must have computed the same way: `fsdp` has no compute replay (it gathers parameters inside
forward and backward), so under chapter 11's compute replay it computes for real on this host
while `ddp` replays H100 compute, and chapter 11 does not compare such cells' images/sec; the
claim then says "not measured" and what to run (every strategy at real compute, or `ddp` in
`beyond.real_compute`), never a ratio of real CPU time to replayed GPU time.

Not tested: the paper's words on FSDP's communication (all-gather before forward and backward,
reduce-scatter of gradients, the volume against DDP's all-reduce) are in its body, whose text
this file does not quote (it was not at hand in the paper's own words); chapter 11 counts
FSDP's bytes (`bytes_sent_per_step`) and states the ZeRO-3 arithmetic, which Rajbhandari 2020's
claims (`claims.beyond`) test for the study's own ZeRO-3.
"""

from __future__ import annotations

import math

import pandas as pd

from ddlstudy import claims
from ddlstudy.claims import Claim, Measurement, Records, per_run, register_claim, runs

PAPER = "Zhao 2023"
CH11 = "11_beyond"
READS = ((CH11, "comparison"),)
RATE = "images_per_sec"
FSDP = "fsdp"
DDP = "ddp"
CONDITIONS = ("the paper: PyTorch FSDP against DDP in large-model training on GPU clusters, "
              "performance as TFLOPS (its abstract's terms). Here: "
              "chapter 11's cells, torch FSDP2 (fully_shard per module, gloo) and torch DDP on "
              "the same model, batch, workers and emulated links (or one host), images/sec; "
              "compared only where both computed the same way (both real or both replayed)")
SRC = "chapter 11's comparison cells (images/sec)"


def _mode(df: pd.DataFrame) -> str:
    """The cells' compute mode ('real', 'replay'; 'real' when not recorded), or 'mixed'."""
    if "compute_mode" not in df or df.empty:
        return "real"
    modes = set(df["compute_mode"].fillna("real").astype(str))
    return modes.pop() if len(modes) == 1 else "mixed"


def _fsdp_over_ddp(rec: Records) -> list[Measurement]:
    """Per worker count: fsdp images/sec / ddp images/sec, run by run (same repeat), where both
    cells computed the same way."""
    df = rec.table(CH11, "comparison")
    need = f"{FSDP} and {DDP} at the same workers with {RATE}"
    if df.empty or not {"strategy", "workers", RATE} <= set(df):
        return [Measurement(f"{FSDP} / {DDP}", missing=rec.missing(CH11, need), chapter=CH11)]
    rows = []
    for n, part in df.groupby("workers"):
        label = f"{FSDP} / {DDP} images/sec at {int(n)} workers"
        f_cells, d_cells = part[part["strategy"] == FSDP], part[part["strategy"] == DDP]
        if f_cells.empty or d_cells.empty:
            rows.append(Measurement(label, missing=rec.missing(CH11, need), chapter=CH11,
                                    testbed=claims.host_or_emulated(part)))
            continue
        fm, dm = _mode(f_cells), _mode(d_cells)
        if fm != dm or fm == "mixed":
            why = (f"not measured: {FSDP} computed '{fm}' and {DDP} '{dm}' (fsdp has no compute "
                   "replay: under beyond.compute replay it computes for real on this host), so "
                   "their images/sec are not comparable; needs both at one compute mode "
                   "(beyond.compute: real, or ddp in beyond.real_compute); on this host's "
                   "gloo that would test gloo as much as FSDP: its reduce-scatter is a whole "
                   "all-reduce, 2.0x a ring's bytes (strategies/fsdp.py), where the paper's "
                   "NCCL runs a ring reduce-scatter on GPUs")
            rows.append(Measurement(label, missing=why, chapter=CH11,
                                    testbed=claims.host_or_emulated(part)))
            continue
        a, b = runs(f_cells, RATE), runs(d_cells, RATE)
        rows.append(Measurement(f"{label} ({fm} compute)", per_run(lambda x, y: x / y, a, b),
                                source=rec.source(CH11, SRC), testbed=claims.host_or_emulated(part),
                                chapter=CH11))
    return rows or [Measurement(f"{FSDP} / {DDP}", missing=rec.missing(CH11, need),
                                chapter=CH11)]


COMPARABLE = (1 / 1.2, 1.2)
CLAIMS = [
    Claim(PAPER, "fsdp_comparable_to_ddp",
          "FSDP trains as fast as DDP (comparable throughput) on a model DDP can train",
          "The experimental results demonstrate that FSDP is capable of achieving comparable "
          "performance to Distributed Data Parallel while providing support for significantly "
          "larger models with near-linear scalability in terms of TFLOPS.",
          "Abstract (arXiv 2304.11277; PVLDB 16(12), 2023)", CONDITIONS,
          "FSDP images/sec / DDP images/sec, run by run (same repeat, workers, model, links), "
          "both at the same compute mode",
          "equivalence", 1.0, *COMPARABLE,
          "'comparable performance', no number given: read as 'roughly the same', the reading "
          "chapter 99 gives Shi 2019's 'roughly the same', within 20 % either way: [0.833, 1.2]",
          READS, _fsdp_over_ddp),
]
assert all(math.isfinite(c.no_effect) for c in CLAIMS)

for _claim in CLAIMS:
    register_claim(_claim)
