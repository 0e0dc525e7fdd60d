"""Jiang et al. 2020 (BytePS, "A Unified Architecture for Accelerating Distributed DNN Training
in Heterogeneous GPU/CPU Clusters", OSDI 2020): the abstract's unification claim, tested by the
bytes chapter 03's emulated cells counted.

The abstract says all-reduce and PS are special cases of BytePS. The case that the study can
build is the one with no machines beyond the n GPU workers (k = 0 CPU machines): every worker
then also serves 1/n of the parameters, a PS co-located with the workers, the study's
`ps_colocated` (S = N servers, `ddlstudy.strategies.ps_overlap`). If all-reduce is a special
case of that arrangement, each worker sends per step what the ring all-reduce sends,
2(n-1)/n of the model. The quantity is the bytes each worker sent per step, counted by
ddlstudy's own `Comm` on its links, `ps_colocated` over `allreduce` for the same model, worker
count, testbed and run (same repeat). As for Rajbhandari 2020's ZeRO counts (`claims.beyond`),
the algorithm as implemented sets these bytes, not the network: a verdict tests this study's
co-located PS against the paper's claim, and the condition text says so. Every run counts the
same bytes, so the ratio is decided as an exact result ("counted, exact in all N runs") from 5
runs, never from fewer.

Not tested: the other special case (non-colocated PS with k = n CPU machines; the study's
separate-server PS runs with S = 1 in the reference grid), and the time formulas of the paper's
Sec. 2 / Table 1, whose exact wording this file does not quote (it was not at hand in the
paper's own text). The abstract's speed-ups over all-reduce and PS ("up to 84% and 245%")
need BytePS's CPU summation machines, which the study does not implement.
"""

from __future__ import annotations

import math

import pandas as pd

from ddlstudy import claims
from ddlstudy.claims import Claim, Measurement, Records, per_run, register_claim, runs

PAPER = "Jiang 2020"
CH03 = "03_ps_vs_ring"
READS = ((CH03, "summary"), (claims.EMULATED_03, "summary"))
BYTES = "bytes_sent_per_step"
RING = "allreduce"
COLOCATED = "ps_colocated"
CONDITIONS = ("the paper: GPU machines plus spare CPU machines and bandwidth in one cluster, "
              "training jobs with up to 256 GPUs (its abstract's terms); the study reads the "
              "all-reduce case as the one with no CPU-only machines (k = 0). Here: chapter 03's "
              "cells (emulated: shaped links, replayed compute, one process per GPU node; or "
              "one host), the PS co-located with the workers (ps_colocated: S = N servers, each "
              "worker serving 1/N of the parameters) beside the ring all-reduce; bytes counted "
              "by ddlstudy's own Comm, so set by the algorithm as implemented: a verdict tests "
              "the implementation, not a network; no CPU-only summation machines (k > 0)")
SRC = "bytes counted by ddlstudy's Comm per worker per step (chapter 03)"


def _testbed(name: str, chapter: str, model: str) -> str:
    """The testbed label of one chapter 03 section's `model` rows: the host, today's H100
    replay ('none'), or a catalog testbed replayed on emulated links."""
    if chapter == CH03:
        return claims.TESTBED_HOST
    if name in ("", "none", "nan"):
        return claims.TESTBED_EMULATED
    return claims.emulated_testbed_label(name, [model])


def _sections(rec: Records) -> list[tuple[str, str, pd.DataFrame]]:
    """(chapter, testbed name, cells) of chapter 03's one-host section and of its emulated
    section, one per testbed (`claims.by_testbed`): one testbed's cells are never paired with
    another's."""
    out = [(CH03, "none", rec.table(CH03, "summary"))]
    emulated = rec.table(claims.EMULATED_03, "summary")
    out += [(claims.EMULATED_03, name, part) for name, part in claims.by_testbed(emulated)]
    return out


def _colocated_over_ring(rec: Records) -> list[Measurement]:
    """Per section, model and worker count (>= 2): ps_colocated's counted bytes sent per step /
    the ring's, run by run (same repeat). Only counted bytes (`bytes_source` counted) are used."""
    need = (f"{COLOCATED} and {RING} at the same worker count (>= 2) with counted bytes "
            f"({BYTES}); {COLOCATED} runs in chapter 03 when training.strategies (one host) or "
            "a testbed grid's strategies name it")
    rows = []
    for ch, name, df in _sections(rec):
        if df.empty or not {"strategy", "workers", "model", BYTES} <= set(df):
            continue
        counted = df[df["bytes_source"] == "counted"] if "bytes_source" in df else df
        for model, part in counted.groupby("model"):
            if COLOCATED not in set(part["strategy"]):
                continue
            bed = _testbed(name, ch, str(model))
            for n in sorted(int(w) for w in part.loc[part["strategy"] == COLOCATED, "workers"]
                            .unique() if int(w) >= 2):
                a = runs(part, BYTES, strategy=COLOCATED, workers=n)
                b = runs(part, BYTES, strategy=RING, workers=n)
                label = f"{model}: {COLOCATED} / ring bytes sent per step per worker at {n} workers"
                if a.empty or b.empty:
                    rows.append(Measurement(label, missing=rec.missing(ch, need), chapter=ch,
                                            testbed=bed))
                    continue
                rows.append(Measurement(label, per_run(lambda x, y: x / y, a, b),
                                        source=rec.source(ch, SRC), testbed=bed, chapter=ch,
                                        exact="counted, exact"))
    if rows:
        return rows
    chapter = CH03 if CH03 in rec.folders and claims.EMULATED_03 not in rec.folders else (
        claims.EMULATED_03)
    return [Measurement(COLOCATED, missing=rec.missing(chapter, need), chapter=chapter)]


SAME = (0.98, 1.02)
CLAIMS = [
    Claim(PAPER, "byteps_allreduce_special_case_bytes",
          "all-reduce is a special case of BytePS: with no spare CPU machines (k = 0), a PS "
          "co-located with the workers moves the ring all-reduce's bytes",
          "It provides a communication framework that is both proved optimal and unified – "
          "existing all-reduce and PS become two special cases of BytePS.",
          "Abstract (OSDI 2020)", CONDITIONS,
          "ps_colocated bytes sent per step per worker / ring all-reduce bytes sent per step per "
          "worker, run by run (same repeat, workers, model, testbed)",
          "magnitude", 1.0, *SAME,
          "'a special case' of the framework = all-reduce's traffic is what the k = 0 "
          "arrangement sends: a ratio of 1.0; the margin allows only counting overheads "
          "(padding of shards to equal size, message headers), as for Rajbhandari 2020's "
          "'exactly the same': [0.98, 1.02]",
          READS, _colocated_over_ring),
]
assert all(math.isfinite(c.no_effect) for c in CLAIMS)

for _claim in CLAIMS:
    register_claim(_claim)
