"""Bytes per link tier (issue 21): the Comm harness counts every message by the peer's node
(`collectives.placement`: rank r on node r // k), the registry derives each algorithm's split
from its structure, and a run's records carry both (steps.csv, summary.csv) beside the node
links' veth counts, now per rank.

- in process (threads): counted == analytic per tier for every algorithm with a split, at even
  and uneven node sizes; intra + inter == the total for every algorithm;
- the records' columns: tier_columns, the veth share per rank, the old-records conversion;
- the hosts' map (DDLSTUDY_RANK_NODES, what the Cluster sets on several hosts) decides the
  tiers over gpus_per_node, and a hierarchical all-reduce refuses a k it contradicts;
- on local engines: a trained hierarchical and a flat ring at 2 ranks per node;
- as root, the issue's command shape at 2 nodes x 2 GPUs (namespaces): per-tier bytes per step
  equal the analytic ones, and each node's veth carries its two ranks' inter-node bytes.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from ddlstudy.collectives import ALGORITHMS, analytic_tiers, hand_written, run_local
from ddlstudy.collectives.placement import (
    ENV,
    ENV_RANK_NODES,
    check_layout,
    host_env,
    k_of,
    parse_rank_nodes,
    set_env,
    set_rank_nodes,
    tier,
    using_gpus_per_node,
)
from ddlstudy.network.emulated import netem
from ddlstudy.network.emulated.wire import WireBytes
from ddlstudy.records.migrate import wire_per_rank
from ddlstudy.train.results import tier_columns

AVAILABLE, WHY = netem.available()
N = 840 * 3  # elements: divisible by every world size and node size below
LAYOUTS = [(4, 2), (8, 4), (6, 4), (5, 2), (3, 1)]  # (ranks, ranks per node); 6/4, 5/2 uneven


def test_tier_rule() -> None:
    assert tier(0, 1, 2) == "intra" and tier(1, 2, 2) == "inter" and tier(0, 1, 1) == "inter"


@pytest.mark.parametrize("algorithm", hand_written())
@pytest.mark.parametrize("p,k", LAYOUTS)
def test_counted_tiers_are_the_analytic_ones(algorithm: str, p: int, k: int) -> None:
    with using_gpus_per_node(k):
        _, traffic = run_local(algorithm, [torch.full((N,), float(r)) for r in range(p)])
    for r, t in enumerate(traffic):
        got = t.tiers()
        assert got is not None and t.gpus_per_node == k
        assert got["intra"][0] + got["inter"][0] == t.sent_bytes
        assert got["intra"][1] + got["inter"][1] == t.recv_bytes
        if k == 1:  # every peer on another node
            assert got["intra"] == (0, 0)
        want = analytic_tiers(algorithm, N * 4, p, r, k)
        if ALGORITHMS[algorithm].tiers is None:
            assert want is None
        else:
            assert want == got, (algorithm, p, k, r)


# ------------------------------------------------------------------ the hosts' rank -> node map
def test_host_env_from_the_ranks_hosts() -> None:
    """What the Cluster gives its engines from each rank's hostname (ranks grouped by host)."""
    assert host_env(["h0", "h0", "h1", "h1"]) == {ENV_RANK_NODES: "0,0,1,1", ENV: "2"}
    assert host_env(["a", "a", "a", "b"]) == {ENV_RANK_NODES: "0,0,0,1", ENV: "3"}
    assert host_env(["h0", "h0", "h1", "h2"]) == {ENV_RANK_NODES: "0,0,1,2"}  # no single k
    assert host_env(["h0", "h1", "h1"]) == {ENV_RANK_NODES: "0,1,1"}  # smaller node first
    assert host_env(["one", "one"]) == {}  # one host: gpus_per_node (or its namespaces) decide
    with pytest.raises(ValueError, match="group ranks node by node"):
        host_env(["h0", "h1", "h0"])
    assert k_of((0, 0, 1)) == 2 and k_of((0, 1, 1)) is None and k_of(()) is None


@pytest.mark.parametrize("text,needle", [("1,1", "node by node"), ("0,2", "node by node"),
                                         ("0,x", "comma-separated")])
def test_bad_rank_nodes_named(text: str, needle: str) -> None:
    with pytest.raises(ValueError, match=f"{ENV_RANK_NODES}.*{needle}"):
        parse_rank_nodes(text)


def test_the_hosts_map_decides_the_tiers(monkeypatch: pytest.MonkeyPatch) -> None:
    """4 ranks on hosts of 3 + 1 while gpus_per_node says 1: counted and analytic follow the
    hosts (rank 2 -> 3 and 3 -> 0 leave their node, 0 -> 1 and 1 -> 2 do not)."""
    monkeypatch.setenv(ENV_RANK_NODES, "0,0,0,1")
    monkeypatch.delenv(ENV, raising=False)
    assert tier(0, 2, 1) == "intra" and tier(2, 3, 1) == "inter"
    _, traffic = run_local("ring", [torch.full((N,), float(r)) for r in range(4)])
    for r, t in enumerate(traffic):
        got = t.tiers()
        assert got == analytic_tiers("ring", N * 4, 4, r, 1), r
        assert (got["inter"][0] > 0) == (r in (2, 3)) and (got["intra"][0] > 0) == (r in (0, 1))


def test_hierarchical_refuses_a_k_the_hosts_contradict(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_RANK_NODES, "0,0,1,1")
    check_layout(4, 2)  # agrees: silent
    xs = [torch.full((N,), float(r)) for r in range(4)]
    with using_gpus_per_node(4), pytest.raises(ValueError, match="set gpus_per_node 2 or leave"):
        run_local("hierarchical", xs)
    monkeypatch.setenv(ENV_RANK_NODES, "0,0,1,2")
    with pytest.raises(ValueError, match="same number of engines"):
        run_local("hierarchical", xs)
    monkeypatch.setenv(ENV_RANK_NODES, "0,0,1,1")
    with using_gpus_per_node(2):
        out, _ = run_local("hierarchical", xs)
    assert all(torch.equal(o, torch.full((N,), 6.0)) for o in out)


def test_what_leaves_a_node_hierarchical_vs_flat_ring() -> None:
    """What the split is for: 2 nodes of 4. The hierarchical all-reduce sends n out of each
    node (4 ranks x 2(m-1)/m of n/4); the flat ring sends 2(p-1)/p n = 1.75 n, all of it from
    the node's last rank (its right neighbour is on the next node)."""
    p, k, n = 8, 4, N * 4
    hier = [analytic_tiers("hierarchical", n, p, r, k)["inter"][0] for r in range(p)]
    ring = [analytic_tiers("ring", n, p, r, k)["inter"][0] for r in range(p)]
    assert sum(hier[:4]) == n and min(hier) > 0
    assert sum(ring[:4]) == ring[3] == 2 * (p - 1) * n // p and ring[0] == 0


def test_library_all_reduce_has_no_counted_split() -> None:
    from ddlstudy.collectives.common import Traffic

    assert Traffic(10, 10, counted=False).tiers() is None
    assert analytic_tiers("reference", 4000, 4, 3, 2) == analytic_tiers("ring", 4000, 4, 3, 2)


def test_tier_columns_mean_over_workers_and_nan_where_missing() -> None:
    workers = pd.DataFrame({"bytes_sent_intra": [10.0, 30.0], "bytes_sent_inter": [1.0, 3.0],
                            "bytes_recv_intra": [10.0, 30.0], "bytes_recv_inter": [1.0, 3.0]})
    a = {"bytes_sent_intra": 20.0, "bytes_sent_inter": 2.0, "bytes_recv_intra": 20.0,
         "bytes_recv_inter": 2.0}
    cols = tier_columns(workers, [a, a])
    assert cols["bytes_sent_intra_per_step"] == 20.0 and cols["bytes_recv_inter_per_step"] == 2.0
    assert cols["analytic_bytes_sent_inter_per_step"] == 2.0
    part = tier_columns(workers.assign(bytes_sent_inter=[1.0, math.nan]), [a, None])
    assert math.isnan(part["bytes_sent_inter_per_step"])
    assert math.isnan(part["analytic_bytes_sent_inter_per_step"])
    assert part["bytes_sent_intra_per_step"] == 20.0


class _Counted(WireBytes):
    """WireBytes with its totals set by hand (no namespaces): `apply` is what is tested."""

    def __init__(self, nodes: list[int], sent: list[int]) -> None:
        self.net, self.nodes = object(), nodes
        self.sent, self.recv = list(sent), list(sent)
        self._before = None


def test_wire_bytes_are_each_ranks_share_of_its_node() -> None:
    summary = pd.DataFrame([{"bytes_sent_per_step": 1.0, "bytes_recv_per_step": 1.0,
                             "bytes_source": "analytic"}])
    # 2 nodes of 2 ranks; every rank of a node reads the node's counter (netem.counters)
    _Counted([0, 0, 1, 1], [400, 400, 600, 600]).apply(summary, ["worker"] * 4, 2, replace=True)
    row = summary.iloc[0]
    assert row["wire_bytes_sent_per_step"] == (100 + 100 + 150 + 150) / 4
    assert row["wire_node_bytes_sent_per_step"] == (200 + 300) / 2
    # the veth does not see intra-node bytes: an analytic figure is not replaced by it
    assert row["bytes_sent_per_step"] == 1.0 and row["bytes_source"] == "analytic"
    one = summary.copy()
    _Counted([0, 1], [400, 600]).apply(one, ["worker"] * 2, 2, replace=True)
    assert one.iloc[0]["bytes_sent_per_step"] == 250 and one.iloc[0]["bytes_source"] == "counted"
    assert one.iloc[0]["wire_node_bytes_sent_per_step"] == 250


def test_old_records_are_converted_once(tmp_path: Path) -> None:
    cell = tmp_path / "ch" / "runs" / "c" / "r1"
    cell.mkdir(parents=True)
    old = pd.DataFrame({"workers": [16, 4, 5], "gpus_per_node": [8, 1, 2],
                        "wire_bytes_sent_per_step": [800.0, 50.0, 70.0],
                        "wire_bytes_recv_per_step": [400.0, 50.0, 70.0]})
    old.to_csv(cell / "summary.csv", index=False)
    assert wire_per_rank(tmp_path) == {str(cell / "summary.csv"): 2}
    new = pd.read_csv(cell / "summary.csv")
    assert new["wire_bytes_sent_per_step"].tolist() == [100.0, 50.0, 70.0]
    assert new["wire_node_bytes_sent_per_step"].tolist()[:2] == [800.0, 50.0]
    assert math.isnan(new["wire_node_bytes_sent_per_step"][2])  # 5 ranks at 2: uneven, kept
    assert new["wire_bytes_recv_per_step"].tolist()[0] == 50.0
    assert wire_per_rank(tmp_path) == {}


def test_issue_command_without_shape_takes_the_testbeds_shape() -> None:
    """The issue's command names no --shape: a testbed's table holds ResNet-50 at the paper's
    224x224 only, so synthetic data takes that shape (and says so); an explicit --shape, a
    table with several shapes and a real data set keep theirs."""
    from ddlstudy.cli.train import _parser, config_from_args, replay_shape

    base = ["--model", "resnet50", "--compute", "replay", "--replay-source",
            "testbed-wang_nchc_10gbe"]

    def config(*extra: str):
        args = _parser().parse_args([*base, *extra])
        return config_from_args(args, strategy=args.strategy, algorithm=args.algorithm)

    got, note = replay_shape(config())
    assert got.input_shape == "imagenet" and "holds resnet50 at imagenet only" in note
    for extra in (["--shape", "cifar"], ["--dataset", "digits"]):
        kept, note = replay_shape(config(*extra))
        assert note is None and kept == config(*extra)
    args = _parser().parse_args(["--model", "resnet50", "--compute", "replay"])
    h100 = config_from_args(args, strategy=args.strategy, algorithm=args.algorithm)
    assert replay_shape(h100) == (h100, None)


# ----------------------------------------------------------------------------- local engines
@pytest.mark.parametrize("algorithm", ["hierarchical", "ring"])
def test_trained_run_records_tiers_equal_to_analytic(cluster, algorithm: str) -> None:
    """4 local engines told they sit 2 per node (DDLSTUDY_GPUS_PER_NODE, as the emulated
    cluster sets it): steps.csv and summary.csv carry per-tier bytes, equal to the analytic."""
    from ddlstudy.train.trainer import TrainConfig, train

    cluster.run(set_env, 2, world_size=cluster.size)  # every engine, not the last world's
    try:
        res = train(cluster, TrainConfig(model="mlp", dataset="digits", strategy="allreduce",
                                         algorithm=algorithm, workers=4, batch_size=8,
                                         steps=2, warmup_steps=1, eval=False, bucket_mb=0.05),
                    progress=False)
    finally:
        cluster.run(set_env, None, world_size=cluster.size)
    row, steps = res.row, res.steps
    for way in ("sent", "recv"):
        intra, inter = row[f"bytes_{way}_intra_per_step"], row[f"bytes_{way}_inter_per_step"]
        assert intra + inter == row[f"bytes_{way}_per_step"]
        assert intra == row[f"analytic_bytes_{way}_intra_per_step"]
        assert inter == row[f"analytic_bytes_{way}_inter_per_step"]
    assert row["bytes_sent_intra_per_step"] > 0 and row["bytes_sent_inter_per_step"] > 0
    assert steps["bytes_sent_intra"].notna().all()
    if algorithm == "ring":  # ranks 1 and 3 send to the next node, 0 and 2 inside theirs
        by_rank = steps.groupby("rank")["bytes_sent_inter"].max()
        assert by_rank[0] == by_rank[2] == 0 and by_rank[1] > 0 and by_rank[3] > 0


def test_trained_hierarchical_refuses_hosts_it_cannot_describe(cluster) -> None:
    """Local engines given the map the Cluster sets on hosts of 2 + 1 + 1: the hierarchical run
    stops with the one-line reason on every rank (no rank waits on a message), and the same
    engines then train a ring whose tiers follow that map."""
    from ddlstudy.train.trainer import TrainConfig, train

    run = dict(model="mlp", dataset="digits", strategy="allreduce", workers=4, batch_size=8,
               steps=2, warmup_steps=1, eval=False, bucket_mb=0.05)
    cluster.run(set_rank_nodes, [0, 0, 1, 2], world_size=cluster.size)
    try:
        with pytest.raises(ValueError, match="does not match the hosts.*same number of engines"):
            train(cluster, TrainConfig(algorithm="hierarchical", **run), progress=False)
        res = train(cluster, TrainConfig(algorithm="ring", **run), progress=False)
    finally:
        cluster.run(set_rank_nodes, None, world_size=cluster.size)
    leaves = res.steps.groupby("rank")["bytes_sent_inter"].max()
    assert leaves[0] == 0 and leaves[1] > 0 and leaves[2] > 0 and leaves[3] > 0
    assert res.row["bytes_sent_inter_per_step"] == res.row["analytic_bytes_sent_inter_per_step"]


@pytest.mark.parametrize("strategy", ["ps_overlap", "ps_sync", "ps_async"])
def test_parameter_servers_count_their_bytes_by_tier(cluster, strategy: str) -> None:
    """3 workers + 1 server on 4 engines at 2 per node: worker 2 shares node 1 with the server
    (rank 3), workers 0 and 1 do not. Every row's tiers add up to its total; only worker 2's
    traffic (and the server's share of it) is intra-node. The fair PS counts through its Comm,
    the thesis's PS (sync and async) by its messages."""
    from ddlstudy.train.trainer import TrainConfig, train

    cluster.run(set_env, 2, world_size=cluster.size)
    try:
        res = train(cluster, TrainConfig(model="mlp", dataset="digits", strategy=strategy,
                                         workers=3, servers=1, batch_size=8, steps=2,
                                         warmup_steps=1, eval=False, bucket_mb=0.05),
                    progress=False)
    finally:
        cluster.run(set_env, None, world_size=cluster.size)
    steps = res.steps
    for way in ("sent", "recv"):
        total = steps[f"bytes_{way}_intra"] + steps[f"bytes_{way}_inter"]
        assert (total == steps[f"bytes_{way}"]).all(), way
    w = steps[steps["role"] == "worker"].groupby("rank")[["bytes_sent_intra",
                                                          "bytes_sent_inter"]].max()
    assert w.loc[0, "bytes_sent_intra"] == w.loc[1, "bytes_sent_intra"] == 0
    assert w.loc[2, "bytes_sent_inter"] == 0 and w.loc[2, "bytes_sent_intra"] > 0
    srv = steps[steps["role"] == "server"]
    # the server pulls to worker 2 inside its node, to workers 0 and 1 across: 1 : 2 (the
    # async server serves one worker per row: over its rows, as every worker ran every step)
    if strategy == "ps_async":
        srv = srv[["bytes_sent_intra", "bytes_sent_inter"]].sum().to_frame().T
    assert (srv["bytes_sent_inter"] == 2 * srv["bytes_sent_intra"]).all() and len(srv)
    # the summary's per-tier columns are the workers' means; no analytic split for this one
    assert res.row["bytes_sent_intra_per_step"] == pytest.approx(w["bytes_sent_intra"].mean())
    assert math.isnan(res.row["analytic_bytes_sent_intra_per_step"])


# ----------------------------------------------------------------------------- as root
@pytest.mark.netns
@pytest.mark.skipif(not AVAILABLE, reason=f"network namespaces unavailable: {WHY}")
def test_hierarchical_command_writes_per_tier_bytes(tmp_path: Path) -> None:
    """The issue's command at 2 nodes x 2 GPUs (an MLP of 0.58 M parameters, so gradients
    dominate the control traffic): the records' per-tier bytes per step equal the analytic,
    and each node's veth (TCP payload, 2 warm-up + 3 timed steps) carries its 2 ranks'
    counted inter-node bytes, within 5 % (ipyparallel's control messages ride on it too)."""
    out = tmp_path / "hier"
    env = {k: v for k, v in os.environ.items() if k != ENV}
    done = subprocess.run(
        [sys.executable, "-m", "ddlstudy.train", "--model", "mlp", "--dataset", "digits",
         "--hidden", "4096", "--strategy", "allreduce", "--algorithm", "hierarchical",
         "--workers", "4", "--gpus-per-node", "2", "--network", "10GbE", "--steps", "3",
         "--warmup-steps", "2", "--no-progress", "--no-eval", "--timeout", "60", "--out",
         str(out)], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("Bytes sent per worker"))
    row = pd.read_csv(out / "summary.csv").iloc[0]
    assert row["gpus_per_node"] == 2 and row["rank_nodes"] == "0,0,1,1"
    for col in ("bytes_sent_intra", "bytes_sent_inter", "bytes_recv_intra",
                "bytes_recv_inter"):
        assert row[f"{col}_per_step"] == row[f"analytic_{col}_per_step"] > 0, col
    assert (row["bytes_sent_intra_per_step"] + row["bytes_sent_inter_per_step"]
            == row["bytes_sent_per_step"])
    # k = 2, m = 2: intra 2(k-1)/k n = n, inter 2(m-1)/m of n/k = n/2 per rank (n: 4 x params)
    n = 4 * int(row["params"])
    assert abs(row["bytes_sent_intra_per_step"] - n) <= 4 * 8
    assert abs(row["bytes_sent_inter_per_step"] - n / 2) <= 4 * 8
    mb = (row["bytes_sent_intra_per_step"] / 1e6, row["bytes_sent_inter_per_step"] / 1e6)
    assert line == (f"Bytes sent per worker per step: {mb[0]:.1f} MB inside its node, "
                    f"{mb[1]:.1f} MB to other nodes (analytic: {mb[0]:.1f}, {mb[1]:.1f})")
    steps = pd.read_csv(out / "steps.csv")
    assert steps["bytes_sent_inter"].notna().all()
    nodes = pd.read_csv(out / "node_bytes.csv")
    per_node = 2 * row["bytes_sent_inter_per_step"] * 5
    for payload in nodes["payload_sent_est"]:
        assert 0.99 * per_node <= payload <= 1.05 * per_node, (payload, per_node)
    # one reading per node (before 2026-11-28 one per rank: a node's two readings differed by
    # a few control bytes)
    assert row["wire_node_bytes_sent_per_step"] == pytest.approx(
        2 * row["wire_bytes_sent_per_step"], rel=1e-12)
