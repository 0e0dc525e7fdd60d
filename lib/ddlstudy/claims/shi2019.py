"""Shi 2019 (MSc thesis, UIUC): Parameter Server vs Ring All-Reduce on GCP, CIFAR-10, batch 32
per worker, 1-6 workers (Ch. 3-5). Every claim is from Ch. 5 (Conclusion, p. 30) or the abstract.

Scaling claims are tested on each strategy's own scaling (its N-worker cells over its own
smaller cells), never as a ratio of two strategies' speed-ups with unequal 1-worker baselines.
"""

from __future__ import annotations

import math

import pandas as pd

from ddlstudy import claims
from ddlstudy.claims import Claim, Measurement, Records, per_run, register_claim, runs, side

PAPER = "Shi 2019"
CONDITIONS = ("GCP VMs, 1 PS + 1-6 workers (TF PS) or 1-6 workers (Horovod ring), CIFAR-10, "
              "batch 32 per worker, AlexNet/VGG16/VGG19/ResNet50/ResNet152, CPU nodes")
CH03 = "03_ps_vs_ring"
READS_03 = ((CH03, "summary"), (claims.EMULATED_03, "summary"))
RATE = "images_per_sec"
RING = "allreduce"
PS = "ps_sync"


def _testbed_label(name: str) -> tuple[str, str]:
    """(testbed label, column) of an emulated chapter 03 grid run on testbed `name` ('none':
    the study's own H100 replay, today's device: the update)."""
    if name in ("", "none", "nan"):
        return claims.TESTBED_EMULATED, claims.UPDATE
    from ddlstudy.testbeds import catalog

    tb = catalog.testbed(name)
    column = (claims.REPRODUCTION if tb.paper == PAPER
              else claims.UPDATE if tb.paper == "today" else "")
    return claims.emulated_testbed_label(name), column


def _sections(rec: Records) -> list[tuple[str, pd.DataFrame, str, str, str]]:
    """(chapter, summary, source, testbed, column) of chapter 03's one-host section and of its
    emulated section, one per testbed its cells ran on (column `testbed`; cells without it ran
    the study's own settings: an H100 replayed, today's device)."""
    out = [(CH03, rec.table(CH03, "summary"), "measured on one host (workers share its cores)",
            claims.TESTBED_HOST, "")]
    df = rec.table(claims.EMULATED_03, "summary")
    src = "emulated (shaped links, replayed compute)"
    if df.empty or "testbed" not in df:
        return [*out, (claims.EMULATED_03, df, src, claims.TESTBED_EMULATED,
                       claims.UPDATE if not df.empty else "")]
    for name, part in claims.by_testbed(df):
        bed, column = _testbed_label(name)
        out.append((claims.EMULATED_03, part, src, bed, column))
    return out


def _ratio(part: pd.DataFrame, strategy: str, workers: int) -> tuple[str, float] | None:
    """Compute / communication seconds per step of `strategy` at `workers` (medians over runs):
    the ratio that sets whether adding workers pays on this testbed."""
    cell = part[(part["strategy"] == strategy) & (part["workers"] == workers)]
    if cell.empty or not {"compute_s", "comm_s"} <= set(cell):
        return None
    comp, comm = float(cell["compute_s"].median()), float(cell["comm_s"].median())
    if not comm > 0:
        return None
    return (f"{strategy} compute / communication per step at {workers} workers", comp / comm)


def _scaling(rec: Records, strategy: str, lo_of: str) -> list[Measurement]:
    """Per model and section: images/sec at the top worker count over `lo_of` ('1': the
    1-worker cell times N; 'half': the cell at half the top count), one value per run."""
    rows = []
    for ch, df, src, bed, col in _sections(rec):
        need = f"{strategy} at 1 and >= 2 worker counts"
        if df.empty or not {"strategy", "workers", RATE} <= set(df):
            rows.append(Measurement(f"{ch}", missing=rec.missing(ch, need), chapter=ch,
                                    testbed=bed))
            continue
        for model, part in df[df["strategy"] == strategy].groupby("model"):
            top = int(part["workers"].max())
            lo = 1 if lo_of == "1" else max(1, top // 2)
            counts = set(part["workers"])
            if top < 2 or lo not in counts or lo == top:
                rows.append(Measurement(f"{model}", missing=rec.missing(ch, need), chapter=ch,
                                        testbed=bed))
                continue
            hi_r = runs(part, RATE, workers=top)
            lo_r = runs(part, RATE, workers=lo)
            scale = top / lo if lo_of == "1" else 1.0
            vals = per_run(lambda h, low, s=scale: h / (s * low), hi_r, lo_r)
            label = (f"{model}: {strategy} images/sec at {top} workers / ({top} x at 1)"
                     if lo_of == "1" else
                     f"{model}: {strategy} images/sec at {top} workers / at {lo}")
            rows.append(Measurement(label, vals, source=rec.source(ch, src), testbed=bed,
                                    chapter=ch, column=col, ratio=_ratio(part, strategy, top)))
    return rows


def _levels_off(rec: Records) -> list[Measurement]:
    return _scaling(rec, PS, "half")


def _proportional(rec: Records) -> list[Measurement]:
    return _scaling(rec, RING, "1")


def _ring_scales_better(rec: Records) -> list[Measurement]:
    """Per model: (ring top / ring half-top) / (PS top / PS half-top), per run; both baselines
    are cells where the strategy communicates (>= 2 workers at 4-6)."""
    rows = []
    for ch, df, src, bed, col in _sections(rec):
        need = "ps_sync and allreduce at the top and half the top worker count (>= 2)"
        if df.empty or not {"strategy", "workers", RATE} <= set(df):
            rows.append(Measurement(ch, missing=rec.missing(ch, need), chapter=ch, testbed=bed))
            continue
        for model, part in df.groupby("model"):
            top = int(part["workers"].max())
            half = top // 2
            cells = [runs(part, RATE, strategy=s, workers=w)
                     for s in (RING, PS) for w in (top, half)]
            if half < 2 or any(c.empty for c in cells):
                rows.append(Measurement(model, missing=rec.missing(ch, need), chapter=ch,
                                        testbed=bed))
                continue
            vals = per_run(lambda rt, rh, pt, ph: (rt / rh) / (pt / ph), *cells)
            rows.append(Measurement(f"{model}: ring gain {half}->{top} workers / PS gain "
                                    f"{half}->{top}", vals, source=rec.source(ch, src),
                                    testbed=bed, chapter=ch, column=col,
                                    ratio=_ratio(part, RING, top)))
    return rows


CH07 = "07_frameworks"
SRC07 = "emulated; bytes counted on the wire (chapter 07)"


def _wire(rec: Records, strategy: str, column: str, per_second: bool) -> list[Measurement]:
    """Chapter 07 (framework cells, wire byte counts), per profile: `column` at the top worker
    count over its value at the lowest count (`per_second`: bytes per second of run time)."""
    df = rec.table(CH07, "summary")
    need = f"{strategy} at two worker counts with wire byte counts ({column})"
    if df.empty or column not in df or df[column].isna().all():
        return [Measurement(strategy, missing=rec.missing(CH07, need), chapter=CH07)]
    rows = []
    for profile, part in df[df["strategy"] == strategy].groupby("profile"):
        counts = sorted(part["workers"].unique())
        lo_n = 1 if column.startswith("wire_server") else 2
        if lo_n not in counts or counts[-1] <= lo_n:
            rows.append(Measurement(str(profile), missing=rec.missing(CH07, need),
                                    chapter=CH07))
            continue
        top = int(counts[-1])

        def rate(n: int, part: pd.DataFrame = part) -> pd.Series:
            b = runs(part, column, workers=n)
            if not per_second:
                return b
            steps = runs(part, RATE, workers=n) / (n * float(part["batch_size"].iloc[0]))
            return b * steps

        scale = top / lo_n if column.startswith("wire_server") else 1.0
        vals = per_run(lambda h, lo, s=scale: h / (s * lo), rate(top), rate(lo_n))
        what = "bytes/s" if per_second else "bytes per step"
        label = (f"{profile}: {strategy} {column} {what} at {top} workers / "
                 + (f"({top} x at 1)" if scale != 1.0 else f"at {lo_n}"))
        rows.append(Measurement(label, vals, source=rec.source(CH07, SRC07), chapter=CH07))
    return rows


def _ps_traffic(rec: Records) -> list[Measurement]:
    return _wire(rec, "tf_ps_sync", "wire_server_bytes_recv_per_step", per_second=False)


def _ring_traffic(rec: Records) -> list[Measurement]:
    return _wire(rec, "horovod", "wire_bytes_sent_per_step", per_second=True)


CLAIMS = [
    Claim(PAPER, "shi_ps_levels_off",
          "PS speed-up levels off as workers are added",
          "In Figure 4.3, as we increase the number of Worker nodes in the cluster under "
          "Parameter Server architecture, the speed-up of training process tends to level off.",
          "Ch. 5 Conclusion, p. 30; Fig. 4.3", CONDITIONS,
          "PS images/sec at the top worker count / at half of it (each run; the PS's own "
          "scaling, both cells send the model)",
          "equivalence", 1.0, 1 / 1.15, 1.15,
          "'level off' = a plateau: doubling the workers (3 -> 6) changes throughput by under "
          "15 % either way; proportional scaling would give 2.0, so the band is far from it",
          READS_03, _levels_off),
    Claim(PAPER, "shi_ring_proportional",
          "ring speed-up roughly proportional to the number of workers",
          "In Figure 4.4, on the other hand, the speed-up of the training process is roughly "
          "proportional to the number of nodes.",
          "Ch. 5 Conclusion, p. 30; Fig. 4.4", CONDITIONS,
          "ring scaling efficiency: images/sec at the top worker count / (N x images/sec at 1 "
          "worker), the ring's own 1-worker baseline as in Fig. 4.4",
          "equivalence", 1.0, 0.8, 1.25,
          "'roughly proportional' = speed-up within 20 % of N: efficiency in [0.8, 1.25] "
          "(symmetric on the log scale, 1/1.25 = 0.8)",
          READS_03, _proportional),
    Claim(PAPER, "shi_ring_scales_better",
          "ring all-reduce scales out better than PS",
          "This observation implies the Ring All-Reduce architecture is better at scaling out "
          "than that of Parameter Server.",
          "Ch. 5 Conclusion, p. 30; abstract", CONDITIONS,
          "(ring images/sec at N / at N/2) / (PS images/sec at N / at N/2), each run; "
          "both baselines communicate (N/2 >= 2)",
          "direction", 1.0, *side(1.0),
          "'better at scaling out' = the ring gains more from added workers than the PS: "
          "any ratio above 1 once the 95 % interval excludes 1 (the paper gives no size)",
          READS_03, _ring_scales_better),
    Claim(PAPER, "shi_ps_traffic_proportional",
          "PS server traffic proportional to the number of workers",
          "we observe that the network traffic between Worker nodes and Parameter Server node "
          "is proportional the number of Worker nodes in the cluster.",
          "Ch. 5 Conclusion, p. 30; Figs 4.7, 4.9, 4.11, 5.1", CONDITIONS,
          "TF PS server bytes received per step, counted on the wire, at N workers / "
          "(N x at 1 worker): 1 = proportional (tensor counts are fixed by the code: not used)",
          "equivalence", 1.0, 0.8, 1.25,
          "'proportional' with no qualifier, but read from traffic plots over time: within 20 "
          "% of N x the 1-worker traffic, as for 'roughly proportional'",
          ((CH07, "summary"),), _ps_traffic),
    Claim(PAPER, "shi_ring_traffic_same",
          "per-worker ring traffic roughly the same as workers are added",
          "in Figures 4.15 and 4.18, we observe that the communication overhead between Worker "
          "nodes in Ring All-Reduce architecture is roughly the same. Each Worker node fully "
          "leverages the network bandwidth. And the packets sent and received remain constant "
          "as we increase or decrease the Worker nodes in the Ring All-Reduce cluster.",
          "Ch. 5 Conclusion, p. 30; Figs 4.15, 4.18", CONDITIONS,
          "per-worker ring (Horovod) bytes sent per second of training, counted on the wire, "
          "at the top worker count / at 2 workers (the paper plots packets over time)",
          "equivalence", 1.0, 1 / 1.2, 1.2,
          "'roughly the same' / 'remain constant' = within 20 % either way; per-step bytes "
          "grow as 2(N-1)/N by the algorithm (+67 % from 2 to 6), so the rate is the quantity "
          "the paper's packets-over-time figures show",
          ((CH07, "summary"),), _ring_traffic),
]
assert all(math.isfinite(c.no_effect) for c in CLAIMS)

for _claim in CLAIMS:
    register_claim(_claim)
