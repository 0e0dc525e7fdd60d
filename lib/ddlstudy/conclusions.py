"""Each seed paper's headline claim beside this run's measurement: agrees / differs / why.

Reads only the records the run's chapters wrote under `run_dir`; a claim whose records are
missing says so ("not measured") instead of guessing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

from ddlstudy.plots import add_speedup, human_bytes

Claim = dict[str, str]
# Two measurements closer than this (relative) are within one host's run-to-run noise: the
# verdict is "inconclusive", not agrees/differs.
NOISE = 0.10


def _verdict(better: float, worse: float) -> str:
    """'agrees' when `better` beats `worse` by more than NOISE, 'differs' when the reverse."""
    if abs(better - worse) <= NOISE * max(abs(better), abs(worse)):
        return "inconclusive"
    return "agrees" if better > worse else "differs"


def _read(run_dir: Path, pattern: str, name: str) -> pd.DataFrame:
    frames = [pd.read_csv(p / f"{name}.csv") for p in sorted(run_dir.glob(pattern))
              if (p / f"{name}.csv").exists()]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _row(seed: str, claim: str, paper: str, ours: str, verdict: str, why: str) -> Claim:
    return {"seed": seed, "claim": claim, "paper": paper, "this run": ours, "verdict": verdict,
            "why": why}


def _missing(seed: str, claim: str, paper: str, chapter: str) -> Claim:
    return _row(seed, claim, paper, f"not measured ({chapter} has no records in this run)",
                "not measured", "")


def ps_vs_ring_scaling(run_dir: Path) -> Claim:
    seed, claim = "000", "Ring all-reduce scales with workers; the PS levels off"
    paper = "Figs 4.3/4.4: ring speed-up keeps rising to 6 workers, PS flattens"
    summary = _read(run_dir, "03_ps_vs_ring-*", "summary")
    if summary.empty or "images_per_sec" not in summary:
        return _missing(seed, claim, paper, "03_ps_vs_ring")
    data = add_speedup(summary.dropna(subset=["images_per_sec"]))
    top = int(data["workers"].max())
    at = data[data["workers"] == top].groupby("strategy")["speedup"].mean()
    if not {"ps_sync", "allreduce"} <= set(at.index):
        return _missing(seed, claim, paper, "03_ps_vs_ring (needs ps_sync and allreduce)")
    ps, ring = float(at["ps_sync"]), float(at["allreduce"])
    ours = f"speed-up at {top} workers (mean over models): ring {ring:.2f}, PS {ps:.2f}"
    verdict = _verdict(ring, ps)
    why = ("ring moves 2(N-1)/N of the model per worker; the PS server moves N models per step"
           if verdict == "agrees" else
           "on one host all workers share the cores and the loopback, so compute contention, "
           "not the PS server's link, bounds both; see chapter 4's per-node traffic")
    return _row(seed, claim, paper, ours, verdict, why)


def ps_server_traffic(run_dir: Path) -> Claim:
    seed, claim = "000", "PS server traffic grows with N; ring per-node traffic stays flat"
    paper = "Fig 5.1 and Figs 4.15/4.18 (packets per node)"
    summary = _read(run_dir, "04_utilization_traffic", "summary")
    if summary.empty:
        return _missing(seed, claim, paper, "04_utilization_traffic")
    model_bytes = summary["params"].iloc[0] * 4
    ps = summary[summary["strategy"] == "ps_sync"].sort_values("workers")
    ring = summary[summary["strategy"] == "allreduce"].sort_values("workers")
    ps_ratio = ps["server_bytes_recv_per_step"] / model_bytes
    ring_ratio = ring["bytes_sent_per_step"] / model_bytes
    ours = ("PS server receives " + ", ".join(
        f"{r:.2f}x" for r in ps_ratio) + f" the model at {list(ps['workers'])} workers; each ring "
        "worker sends " + ", ".join(f"{r:.2f}x" for r in ring_ratio))
    grows = len(ps_ratio) > 1 and ps_ratio.is_monotonic_increasing
    flat = (ring_ratio <= 2.0 + 1e-6).all()
    if len(ps_ratio) < 2:
        return _row(seed, claim, paper, ours, "not measured", "needs two or more worker counts")
    return _row(seed, claim, paper, ours, "agrees" if grows and flat else "differs",
                "counted bytes: PS server N x model in and out, ring 2(N-1)/N x model")


def allreduce_by_size(run_dir: Path) -> Claim:
    seed, claim = "001", "Ring beats tree/butterfly as messages grow"
    paper = "Runtime vs message size: ring below tree/butterfly for large messages"
    bench = _read(run_dir, "02_collectives", "collectives")
    if bench.empty:
        return _missing(seed, claim, paper, "02_collectives")
    p = int(bench["ranks"].max())
    at = bench[bench["ranks"] == p]
    big = at[at["size_bytes"] == at["size_bytes"].max()].set_index("algorithm")["time_p50_s"]
    small = at[at["size_bytes"] == at["size_bytes"].min()].set_index("algorithm")["time_p50_s"]
    need = {"ring", "tree"}
    if not need <= set(big.index):
        return _missing(seed, claim, paper, "02_collectives (needs ring and tree)")
    log_algs = [a for a in ("tree", "recursive_doubling") if a in big.index]
    best_log_big = min(big[a] for a in log_algs)
    ours = (f"{p} ranks, {human_bytes(at['size_bytes'].max())}: ring {big['ring'] * 1e3:.2f} ms vs "
            f"best of tree/butterfly {best_log_big * 1e3:.2f} ms; at "
            f"{human_bytes(at['size_bytes'].min())}: ring {small['ring'] * 1e6:.0f} us vs "
            f"{min(small[a] for a in log_algs) * 1e6:.0f} us")
    verdict = _verdict(1 / big["ring"], 1 / best_log_big)
    return _row(seed, claim, paper, ours, verdict,
                "bandwidth term 2(p-1)/p n beta vs lg p n beta" if verdict == "agrees" else
                "at this size and rank count the latency terms and the shared cores still "
                "dominate; raise collectives.max_bytes or run on separate nodes")


def bracketing(run_dir: Path) -> Claim:
    seed, claim = "001", "Ring accuracy 7-10% lower, possibly from float32 'bracketing'"
    paper = "Fig 16: ring accuracy 7-10% below tree (cause unclear)"
    drift = _read(run_dir, "00_background", "bracketing_drift")
    if drift.empty:
        return _missing(seed, claim, paper, "00_background")
    worst = drift["max_rel_err"].max()
    ours = (f"largest float32 error of any algorithm relative to sum|x|: {worst:.1e}; all ranks "
            f"bit-identical: {bool(drift['ranks_identical'].all())}")
    return _row(seed, claim, paper, ours, "differs",
                "summation-order error is ~1e-7 relative and identical on every replica: too small"
                " to cost accuracy; the paper's gap is more likely the flaw it suspects")


def comm_to_compute(run_dir: Path) -> Claim:
    seed, claim = "003", "Communication-to-computation ratio grows with workers"
    paper = "more GPUs: more time communicating relative to computing"
    summary = _read(run_dir, "03_ps_vs_ring-*", "summary")
    if summary.empty or "comm_s" not in summary:
        return _missing(seed, claim, paper, "03_ps_vs_ring")
    ring = summary[summary["strategy"] == "allreduce"].groupby("workers")[
        ["comm_s", "compute_s"]].median()
    ring = ring[ring.index > 1]
    if len(ring) < 2:
        return _row(seed, claim, paper, "needs two worker counts above 1", "not measured", "")
    ratio = ring["comm_s"] / ring["compute_s"]
    ours = "ring comm/compute: " + ", ".join(f"{n} workers {r:.2f}" for n, r in ratio.items())
    return _row(seed, claim, paper, ours, _verdict(ratio.iloc[-1], ratio.iloc[0]),
                "more ranks: more ring steps, each latency-bound at small buckets")


def parameter_heavy_ps(run_dir: Path) -> Claim:
    seed, claim = "002", "The PS is the bottleneck for parameter-heavy AlexNet"
    paper = "AlexNet (61 M params, little compute) scales worst with a PS"
    summary = _read(run_dir, "03_ps_vs_ring-*", "summary")
    if summary.empty or "params" not in summary:
        return _missing(seed, claim, paper, "03_ps_vs_ring")
    data = add_speedup(summary.dropna(subset=["images_per_sec"]))
    ps = data[(data["strategy"] == "ps_sync") & (data["workers"] == data["workers"].max())]
    if ps["model"].nunique() < 2:
        return _row(seed, claim, paper, "needs two or more models in training.models",
                    "not measured", "")
    ps = ps.sort_values("params")
    heavy, light = ps.iloc[-1], ps.iloc[0]
    ours = (f"PS efficiency at {int(heavy.workers)} workers: {heavy.model} "
            f"({heavy.params / 1e6:.1f} M params) {heavy.efficiency:.0%}, {light.model} "
            f"({light.params / 1e6:.1f} M) {light.efficiency:.0%}")
    verdict = _verdict(light.efficiency, heavy.efficiency)
    return _row(seed, claim, paper, ours, verdict,
                "the server moves N x params per step whatever the compute" if verdict == "agrees"
                else "where the server's link is not the limit (one host's loopback, shared cores)"
                " compute bounds every model alike; params/emulated.yaml gives each node its own "
                "shaped link. Horovod runs are not in this study yet")


def p2p_bandwidth(run_dir: Path) -> Claim:
    seed, claim = "004", "Node-to-node bandwidth rises with message size to the link's limit"
    paper = "Fig 2 (NetPIPE): IB and 10GbE bandwidth vs message size"
    p2p = _read(run_dir, "01_cluster_setup", "p2p")
    if p2p.empty:
        return _missing(seed, claim, paper, "01_cluster_setup")
    curve = p2p.groupby("size_bytes")["bandwidth_gbps"].median()
    ours = (f"{curve.iloc[0]:.4f} GB/s at {human_bytes(curve.index[0])} rising to "
            f"{curve.iloc[-1]:.2f} GB/s at {human_bytes(curve.index[-1])}")
    return _row(seed, claim, paper, ours,
                "agrees" if curve.iloc[-1] > 10 * curve.iloc[0] else "differs",
                "small messages pay latency, large ones approach the copy/link bandwidth")


def network_profiles(run_dir: Path) -> Claim:
    seed, claim = "004", "Scaling efficiency is higher on InfiniBand than on 10GbE"
    paper = "ResNet-50, 64 GPUs: 89% (InfiniBand) vs 65% (10GbE)"
    summary = _read(run_dir, "05_network_profiles", "summary")
    if summary.empty or "efficiency" not in summary:
        return _missing(seed, claim, paper, "05_network_profiles")
    top = int(summary["workers"].max())
    at = summary[summary["workers"] == top].set_index("profile")["efficiency"]
    if not {"IB-EDR", "10GbE"} <= set(at.index):
        return _missing(seed, claim, paper, "05_network_profiles (needs IB-EDR and 10GbE)")
    ours = (f"{top} workers, emulated links, compute replayed: IB-EDR-like {at['IB-EDR']:.0%}, "
            f"10GbE-like {at['10GbE']:.0%}")
    return _row(seed, claim, paper, ours, _verdict(at["IB-EDR"], at["10GbE"]),
                "the gradient's 2(N-1)/N x model per step costs 10x longer on the 10x slower "
                "link; latency is not emulated here, and N is 6, not 64")


CLAIMS: list[Callable[[Path], Claim]] = [ps_vs_ring_scaling, ps_server_traffic, allreduce_by_size,
                                         bracketing, parameter_heavy_ps, comm_to_compute,
                                         p2p_bandwidth, network_profiles]


def claims_table(run_dir: str | Path) -> pd.DataFrame:
    return pd.DataFrame([claim(Path(run_dir)) for claim in CLAIMS])
