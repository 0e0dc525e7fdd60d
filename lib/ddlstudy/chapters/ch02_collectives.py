"""Chapter 02 (collectives): every all-reduce algorithm vs message size, the alpha-beta-gamma
fit, and which algorithm wins where (Fourie 2019 Figs 9-14).

The benchmark itself runs in the notebook (`ddlstudy.bench.collectives` sits above this layer);
this module records, draws and reads its tables. `order` is the chapter's finding, "which
algorithm is fastest at a size": the notebook's text and the book's summary
(`chapters.summaries.collectives`) both read it, so it is computed once.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from ddlstudy.analysis import costmodel, plots, stats
from ddlstudy.cluster.engines import Cluster
from ddlstudy.records import store as records

LOG_DEPTH = ["tree", "recursive_doubling"]              # lg p messages, whole buffer each
BANDWIDTH_OPTIMAL = ["ring", "ring_pipelined", "rabenseifner", "ps_sharded"]  # 2(p-1)/p n


def settings(P: Any, **overrides: Any) -> Any:
    """The params' collectives section with the notebook's non-None parameters laid on top."""
    return P.collectives.model_validate({**P.collectives.model_dump(),
                                         **{k: v for k, v in overrides.items() if v is not None}})


def start_cluster(P: Any, workers: int) -> Cluster:
    """Engines for the largest rank count, with the params' timeouts."""
    return Cluster(workers=workers, **P.cluster.engine_kwargs(),
                   start_timeout_s=P.cluster.start_timeout_s,
                   collective_timeout_s=P.cluster.collective_timeout_s).start()


def hosts(cluster: Cluster) -> set[str]:
    """The engines' host names (one host: every byte is a memory copy)."""
    return {str(e.get("host")) for e in cluster.info()}


def ok_rows(bench: pd.DataFrame) -> pd.DataFrame:
    """Rows whose cell ran (no error text; CSV round-trips turn '' into NaN)."""
    if "error" not in bench:
        return bench
    return bench[bench["error"].isna() | (bench["error"].astype(str) == "")]


def record(out: Path, bench: pd.DataFrame, p2p: pd.DataFrame, med: pd.DataFrame) -> None:
    """Write `collectives`, `p2p`, `collectives_summary`; stop on any wrong sum."""
    records.write_table(bench, out, "collectives")
    records.write_table(p2p, out, "p2p")
    records.write_table(med, out, "collectives_summary")
    assert int(bench["wrong"].sum()) == 0, "an algorithm returned wrong sums: see the #wrong column"


def p2p_GBps(p2p: pd.DataFrame) -> float | None:
    """The best point-to-point copy rate measured beside the bench (None if none was)."""
    return float(p2p["bandwidth_GBps"].max()) if len(p2p) else None


def time_figure(bench: pd.DataFrame, repeats: int, out: Path) -> Figure:
    """Time vs size per algorithm (log-log), saved as `time_vs_size.png`."""
    fig = plots.collective_time_vs_size(
        bench, f"All-reduce time vs message size (log-log; line: median of {repeats} repeat(s) "
        "of each cell's p50, band: 95 % bootstrap interval of the median)")
    plots.save(fig, out, "time_vs_size")
    return fig


def busbw_figure(bench: pd.DataFrame, p2p: pd.DataFrame, out: Path) -> Figure:
    """Bus bandwidth vs size against the point-to-point rate, saved as `busbw_vs_size.png`."""
    fig = plots.collective_busbw_vs_size(bench, p2p_GBps(p2p))
    plots.save(fig, out, "busbw_vs_size")
    return fig


def fit_model(bench: pd.DataFrame, out: Path) -> dict[str, Any]:
    """Fit one (alpha, beta, gamma) to every row; write `costmodel_errors`, `costmodel_fit` and
    the residuals figure."""
    fit = costmodel.fit(bench)
    errors = costmodel.prediction_error_table(bench, fit)
    records.write_table(errors, out, "costmodel_errors")
    records.write_table(pd.DataFrame([fit]), out, "costmodel_fit")
    plots.save(plots.costmodel_residuals(errors), out, "costmodel_residuals")
    return fit


def fit_view(fit: dict[str, Any]) -> pd.DataFrame:
    """The fit as one row; a constant the points could not resolve is shown as such, not as a
    fitted 0."""
    return pd.DataFrame([{k: "not resolved" if k in fit["unresolved"].split(", ") else v
                          for k, v in fit.items()}])


def best_algorithm(med: pd.DataFrame, out: Path) -> pd.DataFrame:
    """Per (ranks, size) the hand-written algorithm with the lowest median (`best_algorithm`)."""
    hand = med[med["algorithm"] != "reference"]
    best = (hand.loc[hand.groupby(["ranks", "size_bytes"])["time_p50_s"].idxmin()]
            .reset_index(drop=True))
    records.write_table(best, out, "best_algorithm")
    return best


def order(bench: pd.DataFrame, ranks: int, size: int) -> pd.DataFrame:
    """The chapter's finding at one cell: the algorithms that ran at `ranks` and `size`, fastest
    first, each its median over repeats of the p50 time with its interval. The reference
    (torch's all_reduce) is left out unless it is all there is."""
    ok = ok_rows(bench)
    hand = ok[ok["algorithm"] != "reference"]
    ok = hand if len(hand) else ok
    cell = ok[(ok["ranks"] == ranks) & (ok["size_bytes"] == size)]
    return stats.summarize(cell, ["algorithm"], "time_p50_s").sort_values("time_p50_s")


def _order_text(bench: pd.DataFrame, p: int, size: int) -> str:
    """Lowest-median algorithm at this size and whether its interval clears the runner-up's."""
    cell = order(bench, p, size)
    first = cell.iloc[0]
    text = (f"lowest median **{first.algorithm}** {first.time_p50_s * 1e6:.0f} us "
            f"[{first.time_p50_s_ci_low * 1e6:.0f}, {first.time_p50_s_ci_high * 1e6:.0f}]")
    if len(cell) > 1:
        second = cell.iloc[1]
        apart = first.time_p50_s_ci_high < second.time_p50_s_ci_low
        text += (f", runner-up {second.algorithm} {second.time_p50_s * 1e6:.0f} us: "
                 + ("the intervals separate" if apart else
                    "the intervals overlap, so these repeats do not decide the order"))
    return text


def _family_text(ok: pd.DataFrame, size: int, slow: Sequence[str], fast: Sequence[str],
                 expected: str) -> str:
    """Best of `slow` / best of `fast`, per repeat, with its interval and verdict."""
    cell = ok[ok["size_bytes"] == size]
    t = cell.pivot_table(index="repeat", columns="algorithm", values="time_p50_s")
    a, b = [x for x in slow if x in t], [x for x in fast if x in t]
    if not a or not b:
        return f"(needs one of {list(slow)} and one of {list(fast)})"
    est = stats.ratio_ci(t[a].min(axis=1), t[b].min(axis=1))
    v = stats.interval_verdict(est, 1.0, 1)
    word = {"agrees": f"faster, as {expected} expect", "differs": f"slower, unlike what {expected}"
            " expect", "inconclusive": "not distinguishable from them by these repeats",
            "not measured": "not measured (too few repeats)"}[v]
    return (f"the best of {'/'.join(b)} is {word} (time of best {'/'.join(a)} over best "
            f"{'/'.join(b)}: {est.text('.2f')})")


def _fit_text(fit: dict[str, Any], ok: pd.DataFrame, host_names: set[str], p: int, large: int,
              p2p_rate: float | None) -> str:
    """What the fit resolved (a constant pinned at ~0 is 'not resolved', never a finding), and on
    one host why its constants are not a network's: beta and gamma are both memory copies."""
    got = [f"$\\alpha$ = {fit['alpha'] * 1e6:.0f} us"] if "alpha" not in fit["unresolved"] else []
    got += [f"$1/\\{k}$ = {1 / fit[k] / 1e9:.2f} GB/s" for k in ("beta", "gamma")
            if k not in fit["unresolved"]]
    text = (f"The fitted machine: {', '.join(got) or 'nothing resolved'}"
            + (f"; not resolved by these points: {fit['unresolved']}" if fit["unresolved"] != "none"
               else "") + f" (median relative error {fit['median_abs_rel_err']:.0%}).")
    if len(host_names) == 1:
        at = ok[ok["size_bytes"] == large]
        top = float(at.groupby("algorithm")["busbw_GBps"].median().max())  # median of repeats
        text += (" Every rank ran on one host, so a byte sent (beta) and a byte reduced (gamma) "
                 "are both memory copies through the same memory bandwidth, which the ranks share: "
                 "the fit cannot separate them, and its error is that contention, not a network; "
                 "these constants describe this host, not a link or a reduction rate"
                 + (f" (the best busbw at {plots.human_bytes(large)} on {p} ranks, "
                    f"{top:.2f} GB/s, is {top / p2p_rate:.0%} of one pair's point-to-point copy "
                    f"rate, {p2p_rate:.2f} GB/s)" if p2p_rate else "")
                 + ". Chapter 05 checks the same formulas on shaped links, where beta is a "
                 "link's rate.")
    return text


def text(bench: pd.DataFrame, p2p: pd.DataFrame, fit: dict[str, Any], host_names: set[str],
         ranks: Sequence[int]) -> str:
    """At the most ranks, smallest and largest size: who wins, whether the latency-bound and
    bandwidth-optimal families order as the formulas say, and what the fit means here."""
    p = max(ranks)
    ok = ok_rows(bench)
    ok = ok[ok["ranks"] == p]
    hand = ok[ok["algorithm"] != "reference"]
    sizes_p = sorted(hand["size_bytes"].unique())
    small, large = sizes_p[0], sizes_p[-1]
    return (
        f"At {p} ranks and {plots.human_bytes(small)}: {_order_text(bench, p, small)}; "
        f"{_family_text(ok, small, BANDWIDTH_OPTIMAL, LOG_DEPTH, 'the latency terms')}. "
        f"At {plots.human_bytes(large)}: {_order_text(bench, p, large)}; "
        f"{_family_text(ok, large, LOG_DEPTH, BANDWIDTH_OPTIMAL, 'the bandwidth terms')}. "
        "By chapter 0's formulas, small messages are latency bound (what counts is the number of "
        "sequential messages: $\\lg p$ for butterfly and tree, $2(p-1)$ for the ring) and large "
        "ones bandwidth bound (ring, Rabenseifner and sharded PS move $2(p-1)/p$ of the buffer "
        "per rank; tree and butterfly the whole buffer $\\lg p$ times). "
        + _fit_text(fit, ok, host_names, p, large, p2p_GBps(p2p)))
