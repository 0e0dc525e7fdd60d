"""Chapter 01 (cluster setup): who runs where, and node-to-node ping-pong vs message size
(Wang (NCHC), Fig. 2), so the notebook holds only calls and text."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from ddlstudy.analysis import plots, stats
from ddlstudy.cluster.engines import Cluster, pingpong
from ddlstudy.records import store as records

ENGINE_COLUMNS = ["rank", "host", "pid", "device", "device_name", "threads"]


@dataclass
class Setup:
    """The engines' identities (`engines`) and rank 0's ping-pong to each peer (`p2p`)."""

    info: pd.DataFrame
    p2p: pd.DataFrame


def start_cluster(P: Any, workers: int) -> Cluster:
    """`workers` local or profile engines with the params' start and collective timeouts."""
    return Cluster(workers=workers, **P.cluster.engine_kwargs(),
                   start_timeout_s=P.cluster.start_timeout_s,
                   collective_timeout_s=P.cluster.collective_timeout_s).start()


def run(P: Any, out: Path, workers: int, sizes: Sequence[int], iters: int) -> Setup:
    """Start the engines, record them (`engines`), ping-pong every size once per repeat
    (`p2p`); the engines are stopped whatever happens."""
    cluster = start_cluster(P, workers)
    try:
        info = pd.DataFrame(cluster.info())
        records.write_table(info, out, "engines")
        cluster.init_process_group()
        p2p = pd.concat([pd.DataFrame(cluster.run(pingpong, sizes, iters)[0]).assign(repeat=rep)
                         for rep in range(P.repeats)], ignore_index=True)
    finally:
        cluster.stop()
    records.write_table(p2p, out, "p2p")
    return Setup(info, p2p)


def figure(setup: Setup, repeats: int, out: Path) -> Figure:
    """Bandwidth and latency vs size per peer, saved as `p2p_bandwidth.png`."""
    info = setup.info
    fig = plots.p2p_bandwidth(setup.p2p, f"Rank 0 to each peer ({info['host'].nunique()} host(s), "
                                         f"{info['device'].iloc[0]}; line: median of {repeats} "
                                         "repeat(s), band: 95 % bootstrap interval of the median)")
    plots.save(fig, out, "p2p_bandwidth")
    return fig


def text(setup: Setup, repeats: int) -> str:
    """Latency at the smallest size, bandwidth at the largest, and what one host means."""
    info, p2p = setup.info, setup.p2p
    big = p2p[p2p["size_bytes"] == p2p["size_bytes"].max()]
    small = p2p[p2p["size_bytes"] == p2p["size_bytes"].min()]
    lat, bw = stats.median_ci(small["latency_us"]), stats.median_ci(big["bandwidth_GBps"])
    local = info["host"].nunique() == 1
    return (
        f"Over {repeats} repeat(s) and {p2p['peer'].nunique()} peer(s): one-way latency at "
        f"{plots.human_bytes(small['size_bytes'].iloc[0])} is {lat.text('.0f')} us and "
        f"{plots.human_bytes(big['size_bytes'].iloc[0])} messages move at {bw.text('.2f')} GB/s "
        "(median [interval], order-statistic). "
        + (f"All {len(info)} engines report one host ({info['host'].iloc[0]}): this is loopback "
           "through the kernel's TCP stack, bounded by memory copies and by the cores the engines "
           "share, not by a network. Chapter 4 can shape per-worker links to named network "
           "profiles to emulate a cluster." if local else
           f"Engines span {info['host'].nunique()} hosts: peers on another node show the "
           "network's latency and bandwidth, peers on the same node the host's."))
