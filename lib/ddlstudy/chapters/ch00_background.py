"""Chapter 00 (background): the collectives on in-process ranks, the cost formulas' worked
numbers and float32 summation-order drift, so the notebook holds only calls and text.

Nothing here needs a cluster: `collectives.run_local` runs the study's algorithm code over
queues, `costmodel.predict` is analytic. Each `text_*` builds a paragraph from the tables just
written, so the prose always states this run's numbers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure

from ddlstudy import collectives
from ddlstudy.analysis import costmodel, plots, stats
from ddlstudy.records import store as records

N_RANKS, NUMEL = 4, 1 << 18  # a 1 MiB float32 "gradient" on 4 ranks
DEMO_ALGORITHMS = ("ps", "ring", "tree", "recursive_doubling")
WORKED_ALGORITHMS = ("ring", "recursive_doubling", "rabenseifner", "tree", "ps")
WORKED_SIZES = (8 * 1024, 98 * 2**20)  # 8 KiB and ResNet-50's 98 MiB (Shi 2019 Table 3.1)
WORKED_RANKS = (2, 4, 8)
FOURIE_GAP = 0.07  # Fourie 2019, Fig 16: ring accuracy 7-10 % below tree


def traffic_demo(out: Path, n_ranks: int = N_RANKS, numel: int = NUMEL) -> pd.DataFrame:
    """Bytes each rank moves per algorithm on in-process ranks (`traffic_demo`); every result is
    checked to be the exact sum, so a wrong algorithm stops the chapter."""
    inputs = [torch.full((numel,), float(r + 1)) for r in range(n_ranks)]
    total = float(sum(range(1, n_ranks + 1)))
    rows = []
    for algorithm in DEMO_ALGORITHMS:
        outs, traffic = collectives.run_local(algorithm, inputs)
        assert all(torch.equal(o, torch.full((numel,), total)) for o in outs)
        for rank, t in enumerate(traffic):
            rows.append({"algorithm": algorithm, "rank": rank, "sent_MiB": t.sent_bytes / 2**20,
                         "recv_MiB": t.recv_bytes / 2**20, "messages_sent": t.sent_msgs})
    demo = pd.DataFrame(rows)
    records.write_table(demo, out, "traffic_demo")
    return demo


def sent_by_rank(demo: pd.DataFrame) -> pd.DataFrame:
    """MiB sent, one row per rank, one column per algorithm (what the chapter shows)."""
    return demo.pivot(index="rank", columns="algorithm", values="sent_MiB")


def text_traffic(demo: pd.DataFrame, n_ranks: int = N_RANKS, numel: int = NUMEL) -> str:
    """The counted bytes set beside the ring formula 2(N-1)/N."""
    sent = sent_by_rank(demo)
    ps_root, ps_other = sent["ps"].iloc[0], sent["ps"].iloc[1:]
    ring = sent["ring"]
    return (
        f"Counted above: rank 0 acts as the PS server and sends {ps_root:.2f} MiB while the other "
        f"ranks send {ps_other.min():.2f}-{ps_other.max():.2f} MiB each; every ring rank sends "
        f"{ring.min():.2f}-{ring.max():.2f} MiB (the formula $2(N-1)/N$ gives "
        f"{2 * (n_ranks - 1) / n_ranks * numel * 4 / 2**20:.2f}). The tree's busiest rank sends "
        f"{sent['tree'].max():.2f} MiB, its least busy {sent['tree'].min():.2f}; recursive "
        f"doubling sends {sent['recursive_doubling'].max():.2f} MiB per rank ($\\lg N$ = "
        f"{int(np.log2(n_ranks))} rounds of the whole buffer).")


def worked_costs(out: Path) -> pd.DataFrame:
    """Predicted all-reduce time per network, size, rank count and algorithm (analytic,
    gamma = 0) as `worked_costs`."""
    rows = []
    for network, link in costmodel.NETWORKS.items():
        for nbytes in WORKED_SIZES:
            for p in WORKED_RANKS:
                for algorithm in WORKED_ALGORITHMS:
                    t = costmodel.predict(algorithm, nbytes, p, link["alpha"], link["beta"], 0.0)
                    rows.append({"network": network, "size": plots.human_bytes(nbytes),
                                 "ranks": p, "algorithm": algorithm, "predicted_ms": 1e3 * t})
    worked = pd.DataFrame(rows)
    records.write_table(worked, out, "worked_costs")
    return worked


def worked_view(worked: pd.DataFrame, network: str = "10GbE") -> pd.DataFrame:
    """One network's predictions, size x ranks by algorithm (ms, 3 decimals)."""
    return worked[worked["network"] == network].pivot_table(
        index=["size", "ranks"], columns="algorithm", values="predicted_ms").round(3)


def text_worked(worked: pd.DataFrame, p: int = 8) -> str:
    """Ring vs PS on the big gradient, and the cheapest formula on the small one (10GbE)."""
    w = worked[worked["network"] == "10GbE"].set_index(["size", "ranks", "algorithm"])
    w = w["predicted_ms"]
    big, small = plots.human_bytes(WORKED_SIZES[1]), plots.human_bytes(WORKED_SIZES[0])
    small_best = w.loc[(small, p)].idxmin()
    return (
        f"*Analytic* (the formulas above with the 10GbE link's $\\alpha$, $\\beta$; $\\gamma$ = 0):"
        f" at {big} and $p$ = {p} the ring needs {w.loc[(big, p, 'ring')] / 1e3:.2f} s per "
        f"all-reduce and the central PS {w.loc[(big, p, 'ps')] / 1e3:.2f} s. At {small} the "
        f"fastest formula is {small_best} ({w.loc[(small, p, small_best)] * 1e3:.0f} us vs the "
        f"ring's {w.loc[(small, p, 'ring')] * 1e3:.0f} us). Chapter 2 measures these on the "
        "cluster.")


def bracketing_drift(out: Path, repeats: int, seed: int) -> pd.DataFrame:
    """Each algorithm's float32 error against the exact sum on mixed-magnitude data, one seeded
    draw per repeat so the interval spans the data (`bracketing_drift`)."""
    trials = []
    for trial in range(repeats):
        rng = np.random.default_rng(seed + trial)
        values = (rng.standard_normal((8, 100_000)) * 10.0 ** rng.integers(-3, 4, (8, 100_000)))
        trials.append(collectives.bracketing_drift(values.astype(np.float32))
                      .assign(trial=trial))
    drift = pd.concat(trials, ignore_index=True)
    records.write_table(drift, out, "bracketing_drift")
    return drift


def drift_figure(drift: pd.DataFrame, out: Path) -> Figure:
    """Trial 0's errors per algorithm, saved as `bracketing_drift_trial0.png` (its data file
    must not replace the `bracketing_drift` table of every trial)."""
    first = drift[drift["trial"] == 0]
    fig = plots.drift_table_figure(first.rename(columns={"max_abs_err": "abs_error"}),
                                   "float32 all-reduce error vs exact sum, 8 ranks (trial 0)")
    plots.save(fig, out, "bracketing_drift_trial0")
    return fig


def text_drift(drift: pd.DataFrame, gap: float = FOURIE_GAP) -> str:
    """The measured drift set against the accuracy gap Fourie 2019 attributes to bracketing."""
    worst: Any = drift.loc[drift["max_rel_err"].idxmax()]
    per_trial = stats.median_ci(drift.groupby("trial")["max_rel_err"].max())
    identical = bool(drift["ranks_identical"].all())
    factor = gap / per_trial.value if per_trial.value > 0 else float("inf")
    return (
        f"Over {per_trial.n} seeded draw(s), the largest error relative to $\\sum|x|$ of any "
        f"algorithm is {per_trial.text('.1e')} (worst single case {worst.max_rel_err:.1e}, "
        f"{worst.algorithm}), against float32's unit round-off of $6\\times10^{{-8}}$. That is "
        + (f"{factor:.0e} times smaller than the 7 % accuracy gap Fourie 2019 asks about"
           if factor >= 1 else f"as large as the {gap:.0%} accuracy gap Fourie 2019 asks about")
        + ". All ranks got identical bits from every algorithm: "
        + (f"{identical} (every replica applies the same update, so they cannot drift apart)."
           if identical else f"{identical}: some algorithm leaves replicas with different sums, "
           "which lets them drift apart over steps.")
        + " Chapter 99 sets this against the paper's claim.")
