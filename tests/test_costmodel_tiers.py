"""The step model's extensions (issue 21, item 7): latency per message, two tiers and the
hierarchical all-reduce's traffic per tier, S parameter servers with incast, the overlapped PS."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ddlstudy.analysis import costmodel as M
from ddlstudy.collectives.registry import analytic_traffic

MIB = 2**20
SIZES = (8 * MIB, 4 * MIB, 2 * MIB, 1 * MIB, 64 * 1024)
C0 = M.SETTINGS_ALONE


@pytest.mark.parametrize("strategy,kw", [("allreduce", {"algorithm": "ring"}),
                                         ("allreduce", {"algorithm": "tree"}),
                                         ("ps_sync", {"servers": 3}),
                                         ("ps_sync", {"servers": 2, "ps_overlap": True})])
def test_latency_term_is_monotone_and_charged_per_message(strategy, kw):
    steps = [M.predict_step(strategy, "", 6, M.Link(1e9, lat), 0.05, C0, sizes=SIZES, **kw)
             for lat in (0.0, 1e-6, 1e-5, 1e-4, 1e-3)]
    totals = [s.total(C0) for s in steps]
    assert all(b >= a for a, b in zip(totals, totals[1:], strict=False)) and totals[-1] > totals[0]
    for s, lat in zip(steps, (0.0, 1e-6, 1e-5, 1e-4, 1e-3), strict=True):
        assert s.latency_s == pytest.approx(s.messages * lat)


def test_ring_latency_is_2p_minus_2_messages_per_bucket():
    one = M.predict_step("allreduce", "", 4, M.Link(1e9, 1e-3), 0.0, C0, sizes=(MIB,),
                         algorithm="ring")
    assert one.messages == 2 * (4 - 1) and one.latency_s == pytest.approx(6e-3)


def test_naive_ps_charges_two_latencies_per_server():
    for s in (1, 2, 4):
        st = M.ps_step(SIZES, 4, s, M.Link(1e9, 1e-3), 0.1, C0)
        assert st.messages == 2 * s and st.latency_s == pytest.approx(2 * s * 1e-3)


# ----------------------------------------------------------------------------- hierarchical
def _simulate_hierarchical(bufs: list[np.ndarray], nodes: tuple[int, ...]
                           ) -> tuple[list[np.ndarray], list[dict[str, list[int]]]]:
    """The hierarchical all-reduce's message schedule (4-byte elements), counting bytes per tier:
    ring reduce-scatter in each node, ring all-reduce of every elementary shard across the nodes
    (the shards' owners, one per node, form a ring), ring all-gather in the node. It walks the
    schedule's messages (who sends which chunk to whom), independently of the formulas; the
    data itself is summed directly, not moved (the collectives layer tests its own code)."""
    n = len(bufs[0])
    first = np.cumsum((0, *nodes))
    out = [b.astype(np.float64).copy() for b in bufs]
    sent = [{"intra": [0, 0], "inter": [0, 0]} for _ in bufs]

    def move(src: int, dst: int, elems: int, tier: str) -> None:
        sent[src][tier][0] += 4 * elems
        sent[dst][tier][1] += 4 * elems

    bounds = {k: np.linspace(0, n, k + 1).astype(int) for k in set(nodes)}
    node_sums = []
    for i, k in enumerate(nodes):  # ring reduce-scatter: k-1 steps, one chunk per rank each
        ranks = list(range(first[i], first[i] + k))
        b = bounds[k]
        for step in range(k - 1):
            for j, r in enumerate(ranks):
                c = (j - step) % k
                move(r, ranks[(j + 1) % k], b[c + 1] - b[c], "intra")
        node_sums.append(sum(out[r] for r in ranks))
    total = sum(node_sums)
    cuts = sorted({int(x) for k in nodes for x in bounds[k]})
    m = len(nodes)
    for lo, hi in zip(cuts, cuts[1:], strict=False):  # elementary shards
        owners = [first[i] + int(np.searchsorted(bounds[k], lo, side="right") - 1)
                  for i, k in enumerate(nodes)]
        sub = np.linspace(lo, hi, m + 1).astype(int) if m > 1 else np.array([lo, hi])
        for step in range(2 * (m - 1)):  # ring all-reduce among the owners
            for j, r in enumerate(owners):
                c = (j - step) % m
                move(r, owners[(j + 1) % m], sub[c + 1] - sub[c], "inter")
    for i, k in enumerate(nodes):  # ring all-gather in the node
        ranks = list(range(first[i], first[i] + k))
        b = bounds[k]
        for step in range(k - 1):
            for j, r in enumerate(ranks):
                c = (j + 1 - step) % k
                move(r, ranks[(j + 1) % k], b[c + 1] - b[c], "intra")
        for r in ranks:
            out[r] = total.copy()
    return out, sent


@pytest.mark.parametrize("nodes", [(4, 4), (2, 2, 2), (8,), (1, 1, 1, 1), (3, 3, 2), (4, 1),
                                   (2, 3, 3, 4)])
def test_hierarchical_traffic_per_tier_matches_a_simulation(nodes):
    n_elems = 720 * 7  # divisible by every k and m here, and by m x k
    rng = np.random.default_rng(0)
    bufs = [rng.standard_normal(n_elems) for _ in range(sum(nodes))]
    _, sent = _simulate_hierarchical(bufs, nodes)
    for rank in range(sum(nodes)):
        got = M.hierarchical_traffic(4 * n_elems, nodes, rank)
        assert got["intra"] == tuple(sent[rank]["intra"]), (nodes, rank)
        assert got["inter"] == tuple(sent[rank]["inter"]), (nodes, rank)


@pytest.mark.parametrize("nodes", [(4, 4), (3, 3, 2), (2, 3, 3, 4), (8, 8, 8, 8)])
def test_hierarchical_per_tier_traffic_is_the_ring_s_analytic_traffic(nodes):
    nbytes = 4 * 720 * 7
    m = len(nodes)
    for node, k in enumerate(nodes):
        first = sum(nodes[:node])
        for local in range(k):
            got = M.hierarchical_traffic(nbytes, nodes, first + local)
            assert got["intra"] == analytic_traffic("ring", nbytes, k, local) if k > 1 else True
            assert got["inter"] == analytic_traffic("ring", nbytes // k, m, node)
        # every node's NIC carries 2(m-1)/m n each way, whatever its size
        assert M.node_nic_traffic(nbytes, nodes, node) == (2 * (m - 1) * nbytes // m,) * 2


def test_hierarchical_step_charges_each_tier_its_bytes():
    intra, inter = M.Link(8e11, 2e-6, goodput=1.0), M.Link(1e10, 1e-5)
    n = float(64 * MIB)
    for nodes in [(4, 4), (3, 3, 2), (8, 8, 8, 8)]:
        tiers = M.Tiers(node_sizes=nodes, intra=intra)
        st = M.allreduce_step((int(n),), sum(nodes), inter, 0.0, C0, algorithm=M.HIERARCHICAL,
                              overlap=False, tiers=tiers)
        k, m = max(nodes), len(nodes)
        wire = 2 * (k - 1) / k * n * intra.beta + 2 * (m - 1) / m * n * inter.beta
        lat = 2 * (k - 1) * intra.latency_s + 2 * (m - 1) * inter.latency_s
        assert st.wire_s == pytest.approx(wire) and st.latency_s == pytest.approx(lat)


def test_flat_ring_on_multi_gpu_nodes_runs_at_the_slower_tier():
    intra, inter = M.Link(8e11, 0.0, goodput=1.0), M.Link(1e10, 0.0)
    tiers = M.Tiers(gpus_per_node=8, intra=intra)
    flat = M.allreduce_step((64 * MIB,), 32, inter, 0.0, C0, algorithm="ring", overlap=False,
                            tiers=tiers)
    hier = M.allreduce_step((64 * MIB,), 32, inter, 0.0, C0, algorithm=M.HIERARCHICAL,
                            overlap=False, tiers=tiers)
    assert flat.wire_s == pytest.approx(2 * 31 / 32 * 64 * MIB * inter.beta)
    assert hier.total(C0) < flat.total(C0)
    with pytest.raises(ValueError, match="intra-node link"):
        M.allreduce_step((MIB,), 8, inter, 0.0, C0, tiers=M.Tiers(gpus_per_node=4))


# ----------------------------------------------------------------------------- S servers
@pytest.mark.parametrize("n,s", [(6, 1), (6, 2), (6, 3), (8, 4), (4, 4)])
def test_s_server_incast_bytes(n, s):
    link = M.Link(1e9, 0.0)
    m = float(sum(SIZES))
    st = M.ps_step(SIZES, n, s, link, 0.0, C0)
    # each server's link: N workers' pushes of model/S in, then N pulls out (2N/S models)
    assert st.wire_s == pytest.approx(2 * max(n * m / s, m) * link.beta)
    co = M.ps_step(SIZES, n, s, link, 0.0, C0, colocated=True)
    busiest = max((n - 1) * m / s, m * (1 - 1 / s)) if s == n else max((n - 1) * m / s, m)
    assert co.wire_s == pytest.approx(2 * busiest * link.beta)


def test_colocated_s_equals_n_moves_the_ring_s_bytes():
    link = M.Link(1e9, 0.0)
    m = float(sum(SIZES))
    for n in (2, 4, 6):
        co = M.ps_step(SIZES, n, n, link, 0.0, C0, colocated=True)
        assert co.wire_s == pytest.approx(2 * (n - 1) / n * m * link.beta)
    with pytest.raises(ValueError, match="co-located"):
        M.ps_step(SIZES, 2, 3, link, 0.0, C0, colocated=True)


def test_multi_gpu_nodes_share_their_nic_in_the_ps():
    link, intra = M.Link(1e9, 0.0), M.Link(1e11, 0.0, goodput=1.0)
    m = float(sum(SIZES))
    st = M.ps_step(SIZES, 8, 8, link, 0.0, C0, tiers=M.Tiers(4, intra))
    assert st.wire_s == pytest.approx(2 * 4 * m * link.beta)  # 4 workers behind one NIC


def test_overlapped_ps_is_never_slower_than_the_naive_one_and_hides_under_backward():
    link = M.Link(1e9, 1e-5)
    for n, s in [(2, 1), (6, 1), (6, 6)]:
        naive = M.ps_step(SIZES, n, s, link, 0.2, C0, colocated=s == n)
        over = M.ps_step(SIZES, n, s, link, 0.2, C0, colocated=s == n, overlap=True,
                         bucket_mb=1.0)
        assert 0.2 <= over.total(C0) <= naive.total(C0) + 1e-12
    fast = M.ps_step(SIZES, 2, 1, M.Link(1e13, 0.0), 1.0, C0, overlap=True, bucket_mb=1.0)
    assert fast.total(C0) == pytest.approx(1.0, rel=1e-3)  # all under backward but the last


def test_defaults_keep_the_one_gpu_per_node_model():
    for strategy in ("allreduce", "ps_sync"):
        a = M.predict_step(strategy, "", 4, M.Link(1e9, 0.0), 0.1, sizes=SIZES)
        b = M.predict_step(strategy, "", 4, M.Link(1e9, 0.0), 0.1, sizes=SIZES,
                           tiers=M.Tiers(1, None))
        assert a == b and math.isfinite(a.total(M.Constants()))


# ----------------------------------------------------------------------------- fair PS, ZeRO
def test_fair_ps_and_sharded_strategies_have_a_step_model():
    """ps_overlap, ps_colocated, zero1-3 and fsdp are modelled (no longer in unmodelled())."""
    for name in ("ps_overlap", "ps_colocated", "zero1", "zero2", "zero3", "fsdp"):
        assert name in M.STEP_STRATEGIES and name not in M.unmodelled(), name
    assert "ps_overlap" in M.PS_STEP and "ps_colocated" not in M.PS_STEP  # S = N always


@pytest.mark.parametrize("n,s", [(3, 1), (2, 2), (6, 1)])
def test_overlapped_ps_strategy_moves_what_the_strategy_counts(n, s):
    """ps_overlap's step: each push (and pull) phase carries the busiest link's bytes of the
    strategy's own analytic traffic (strategies.ps_overlap.analytic_traffic, checked against
    counted bytes in test_hierarchical_fairps): a server link N x model / S, a worker the model."""
    from ddlstudy.analysis.costmodel import step as S
    from ddlstudy.strategies.ps_overlap import HEADER_BYTES, analytic_traffic

    link = M.Link(1e9, 0.0)
    m = int(sum(SIZES))
    phase = S._ps_phase(m, n, s, link, M.FLAT, False) / link.beta
    server_recv = analytic_traffic(m, n, s, False, n)[1] - n * HEADER_BYTES
    worker_sent = analytic_traffic(m, n, s, False, 0)[0] - s * HEADER_BYTES
    assert phase == pytest.approx(max(server_recv, worker_sent))
    st = M.predict_step("ps_overlap", "", n, link, 0.0, servers=s, sizes=SIZES, bucket_mb=1.0)
    naive = M.predict_step("ps_sync", "", n, link, 0.0, servers=s, sizes=SIZES)
    assert st == M.ps_step(SIZES, n, s, link, 0.0, M.Constants(), overlap=True, bucket_mb=1.0)
    assert st.total(C0) <= naive.total(C0) + 1e-12


@pytest.mark.parametrize("n,k", [(4, 1), (6, 1), (8, 4), (6, 2)])
def test_colocated_ps_strategy_is_s_equals_n_even_on_multi_gpu_nodes(n, k):
    """ps_colocated: one server per worker. Per push phase a node of k workers receives
    (N - k) k/N of the model and sends k (1 - k/N); with one GPU per node that is the ring's
    (N-1)/N per direction, as the strategy counts (2(N-1)/N per step, sent and received)."""
    from ddlstudy.analysis.costmodel import step as S
    from ddlstudy.strategies.ps_overlap import analytic_traffic

    link, intra = M.Link(1e9, 0.0), M.Link(1e11, 0.0, goodput=1.0)
    tiers = M.Tiers(k, intra if k > 1 else None)
    m = int(sum(SIZES))
    phase = S._ps_phase(m, n, n, link, tiers, True) / link.beta
    assert phase == pytest.approx(max((n - k) * k / n * m, k * m * (1 - k / n)))
    if k == 1:
        assert 2 * phase == pytest.approx(analytic_traffic(m, n, n, True, 0)[0], abs=4 * n)
    st = M.predict_step("ps_colocated", "", n, link, 0.0, sizes=SIZES, tiers=tiers)
    assert st == M.ps_step(SIZES, n, n, link, 0.0, M.Constants(), overlap=True, colocated=True,
                           tiers=tiers)


@pytest.mark.parametrize("n", [2, 4, 6])
def test_sharded_steps_move_the_zero_paper_s_volumes(n):
    """ZeRO-1/2: reduce-scatter + all-gather = a ring all-reduce's 2(p-1)/p Psi and messages;
    ZeRO-3 / FSDP 1.5x (Rajbhandari et al. 2020, Sec. 7.2; the study's ZeRO counts these in
    tests/test_zero.py). Nothing overlaps compute: the step is compute + the collectives."""
    link = M.Link(1e9, 1e-5)
    m = float(sum(SIZES))
    ring = M.allreduce_step(SIZES, n, link, 0.0, C0, "ring", bucket_mb=1.0, overlap=False)
    for name, factor in (("zero1", 2), ("zero2", 2), ("zero3", 3), ("fsdp", 3)):
        st = M.predict_step(name, "", n, link, 0.5, sizes=SIZES, bucket_mb=1.0)
        assert st.wire_s / link.beta == pytest.approx(factor * (n - 1) / n * m), name
        assert M.sharded_traffic(int(m), n, 3 if factor == 3 else 1) == pytest.approx(
            factor * (n - 1) / n * m, abs=1)
        assert st.compute_s == 0.5 and st.total(C0) > 0.5 + ring.total(C0) * (factor / 2) - 1e-9
    z1 = M.predict_step("zero1", "", n, link, 0.0, sizes=SIZES, bucket_mb=1.0)
    assert z1.messages == ring.messages and z1.latency_s == pytest.approx(ring.latency_s)
    assert M.predict_step("zero2", "", 1, link, 0.5, sizes=SIZES).total(C0) == 0.5


def test_zero3_units_are_modules():
    """ZeRO-3 / FSDP gather per module: one unit per module holding parameters, summing to the
    model (ResNet-18: 62 tensors in 41 modules)."""
    from ddlstudy.analysis.costmodel import step as S

    units, grads = S.module_bytes("resnet18"), S.gradient_bytes("resnet18")
    assert sum(units) == sum(grads) and len(units) < len(grads)
    link = M.Link(1e9, 1e-4)
    z3 = M.predict_step("zero3", "resnet18", 4, link, 0.0)
    assert z3.messages == pytest.approx(1.5 * 2 * 3 * len(units))
