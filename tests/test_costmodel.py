"""Alpha-beta-gamma formulas against hand-worked values, and the fit recovering known constants."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ddlstudy.analysis import costmodel as M
from ddlstudy.analysis.costmodel import step as STEP

_REAL_SIZES = STEP.gradient_bytes


def _patch_sizes(monkeypatch: pytest.MonkeyPatch, sizes: dict, default: tuple | None = None
                 ) -> None:
    """Synthetic models' gradient sizes where the step model looks them up (the step module);
    real models (the published points `validate` also predicts) keep their real sizes."""
    def fake(model: str, shape: str = "cifar") -> tuple:
        if model in sizes:
            return sizes[model]
        return default if default is not None else _REAL_SIZES(model, shape)

    monkeypatch.setattr(STEP, "gradient_bytes", fake)

A, B, G = 10e-6, 1e-9, 0.25e-9  # 10 us, 1 GB/s, 4 GB/s reduction


def test_ring_hand_value():
    # p = 4, n = 1 MB: 2*3*alpha + 2*3/4*1e6*beta + 3/4*1e6*gamma
    #   = 60e-6 + 1.5e-3 + 0.1875e-3 = 1.7475e-3 s
    assert M.predict("ring", 1e6, 4, A, B, G) == pytest.approx(1.7475e-3)


def test_recursive_doubling_power_of_two_and_fold():
    # p = 8: lg 8 = 3 rounds of (alpha + n beta + n gamma), n = 1e6:
    #   3 * (10e-6 + 1e-3 + 0.25e-3) = 3.78e-3
    assert M.predict("recursive_doubling", 1e6, 8, A, B, G) == pytest.approx(3.78e-3)
    # p = 6 folds onto 4: 2 rounds (2.52e-3) + fold in/out 2 alpha + 2 n beta + n gamma
    #   (20e-6 + 2e-3 + 0.25e-3 = 2.27e-3) = 4.79e-3
    assert M.predict("recursive_doubling", 1e6, 6, A, B, G) == pytest.approx(4.79e-3)


def test_rabenseifner_hand_value():
    # p = 4, n = 1e6: 2*2*alpha + 2*3/4*n*beta + 3/4*n*gamma = 40e-6 + 1.5e-3 + 0.1875e-3
    assert M.predict("rabenseifner", 1e6, 4, A, B, G) == pytest.approx(1.7275e-3)


def test_tree_hand_value():
    # p = 5: depth ceil(lg 5) = 3; 2*3*(alpha + n beta) + 3 n gamma, n = 1e6
    #   = 6 * 1.01e-3 + 0.75e-3 = 6.81e-3
    assert M.predict("tree", 1e6, 5, A, B, G) == pytest.approx(6.81e-3)


def test_ps_hand_value():
    # p = 4: server link carries 3 buffers in and 3 out: 2*3*(alpha + n beta) + 3 n gamma
    #   = 6 * 1.01e-3 + 0.75e-3 = 6.81e-3 (the same as the 5-rank tree: depth 3 there too)
    assert M.predict("ps", 1e6, 4, A, B, G) == pytest.approx(6.81e-3)


def test_ring_pipelined_segments():
    # p = 4, n = 16 MiB, 1 MiB segments: chunk 4 MiB -> S = 4 segments.
    # alpha 2*3*4 = 24, beta 2*3/4*n, gamma 3/4*n/4
    n = 16 << 20
    a, b, g = M.terms("ring_pipelined", n, 4, segment_bytes=1 << 20)
    assert (a, b, g) == (24, 1.5 * n, 0.75 * n / 4)


def test_one_rank_is_free_and_bad_input():
    assert M.predict("ring", 1e6, 1, A, B, G) == 0.0
    with pytest.raises(ValueError, match="valid: ring"):
        M.predict("nope", 1, 2, A, B, G)


def test_bandwidth_optimal_algorithms_beat_butterfly_at_large_sizes():
    big, small = 256 << 20, 8
    assert M.predict("ring", big, 8, A, B, G) < M.predict("recursive_doubling", big, 8, A, B, G)
    assert M.predict("recursive_doubling", small, 8, A, B, G) < M.predict("ring", small, 8, A, B, G)


def _synthetic(alpha: float, beta: float, gamma: float, noise: float = 0.0) -> pd.DataFrame:
    rng = np.random.default_rng(1)
    rows = []
    for alg in M.ALGORITHMS:
        for p in (2, 3, 4, 8):
            for n in (8, 1 << 10, 1 << 16, 1 << 20, 1 << 24):
                t = M.predict(alg, n, p, alpha, beta, gamma) * (1 + noise * rng.normal())
                rows.append({"algorithm": alg, "ranks": p, "size_bytes": n, "time_p50_s": t})
    rows.append({"algorithm": "ring", "ranks": 1, "size_bytes": 8, "time_p50_s": 1e-6})  # skipped
    return pd.DataFrame(rows)


def test_fit_recovers_known_constants():
    got = M.fit(_synthetic(A, B, G))
    assert got["alpha"] == pytest.approx(A, rel=1e-6)
    assert got["beta"] == pytest.approx(B, rel=1e-6)
    assert got["gamma"] == pytest.approx(G, rel=1e-6) and got["unresolved"] == "none"
    table = M.prediction_error_table(_synthetic(A, B, G), got)
    assert set(table.columns) >= {"algorithm", "ranks", "size_bytes", "measured_s", "predicted_s",
                                  "rel_error"}
    assert table["rel_error"].abs().max() < 1e-6


def test_fit_with_noise_and_zero_gamma_stays_non_negative():
    got = M.fit(_synthetic(A, B, 0.0, noise=0.05))
    assert got["gamma"] >= 0 and got["alpha"] >= 0
    assert got["alpha"] == pytest.approx(A, rel=0.2)
    assert got["beta"] == pytest.approx(B, rel=0.2)


def test_fit_names_constants_it_cannot_resolve():
    got = M.fit(_synthetic(A, 0.0, 0.0))  # latency only: no bytes term to find
    assert got["unresolved"] == "beta, gamma" and max(got["beta"], got["gamma"]) < 1e-20


def test_nnls_matches_constrained_optimum():
    # y = 2*x0 - 1*x1 exactly: the unconstrained fit has x1 < 0; NNLS must set x1 = 0.
    a = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    y = a @ np.array([2.0, -1.0])
    x = M._nnls(a, y)
    assert x[1] == 0 and x[0] == pytest.approx(1.5)  # least squares of [2, -1, 1] on column 0: 3/2


def test_networks_are_sane():
    for name, net in M.NETWORKS.items():
        assert net["alpha"] > 0 and net["beta"] > 0, name
    assert M.NETWORKS["1GbE"]["beta"] == pytest.approx(8e-9)
    # 100 MB ring all-reduce on 8 ranks over 1GbE: bandwidth term 2*7/8*1e8*8e-9 = 1.4 s
    t = M.predict_network("ring", 1e8, 8, "1GbE")
    assert t == pytest.approx(1.4 + 14 * 50e-6)
    assert not math.isnan(M.predict_table(["ring"], [8], [2], A, B, G)["busbw_GBps"][0])


# ----------------------------------------------------------------------------- the step model
MIB = 2**20


def _link_with_beta(beta: float, latency_s: float = 0.0) -> M.Link:
    """A link whose payload time is exactly `beta` s/B (rate chosen through GOODPUT)."""
    return M.Link(8.0 / (beta * M.GOODPUT), latency_s)


def test_networks_come_from_netem_profiles():
    from ddlstudy.network.emulated.netem import PROFILES

    assert set(M.NETWORKS) == set(PROFILES)
    for name, p in PROFILES.items():
        assert M.NETWORKS[name]["alpha"] == p.latency_s
        assert M.NETWORKS[name]["beta"] == pytest.approx(8 / p.rate_bps)


def test_a_profile_added_later_is_a_network(monkeypatch):
    from ddlstudy.network.emulated import netem

    monkeypatch.setitem(netem.PROFILES, "lab-25GbE",
                        netem.Profile("lab-25GbE", 25e9, 5e-6, "test", "test"))
    assert "lab-25GbE" in M.NETWORKS and len(M.NETWORKS) == len(netem.PROFILES)
    assert M.predict_network("ring", 1e8, 2, "lab-25GbE") == pytest.approx(
        1e8 * 8 / 25e9 + 2 * 5e-6)


def test_goodput_is_payload_per_wire_byte():
    # MTU 1500: 1448 payload bytes per 1514-byte frame
    assert M.GOODPUT == pytest.approx(1448 / 1514)
    assert M.profile_link("10GbE", 0.01).beta == pytest.approx(8 / (1e8 * 1448 / 1514))


def test_ring_step_moves_2_n_minus_1_over_n_of_the_model():
    # one 4 MB gradient, 4 workers, no overlap: wire = 2*3/4 * 4e6 * beta = 6e6 * beta
    beta = 1e-8
    c = M.Constants(host_s_per_byte=0.0)
    st = M.allreduce_step([4_000_000], 4, _link_with_beta(beta, 1e-5), 0.5, c, "ring",
                          bucket_mb=25, overlap=False)
    assert st.wire_s == pytest.approx(6e6 * beta)
    assert st.latency_s == pytest.approx(2 * 3 * 1e-5)  # 2(N-1) messages
    assert st.compute_s == 0.5
    # host work: ring reduces 3/4 of the buffer, then unpack + optimizer over the model (2x)
    assert st.host_bytes == pytest.approx(0.75 * 4e6 + 2 * 4e6)
    assert st.total(c) == pytest.approx(0.5 + 6e-5 + 0.06)


def test_one_worker_allreduce_is_compute_plus_update():
    c = M.Constants(host_s_per_byte=1e-9, overhead_s=0.01)
    st = M.allreduce_step([1_000_000], 1, _link_with_beta(1e-8), 0.2, c)
    assert (st.compute_s, st.wire_s, st.latency_s) == (0.2, 0.0, 0.0)
    assert st.total(c) == pytest.approx(0.2 + 2e6 * 1e-9 + 0.01)


def test_overlap_hides_the_first_bucket_under_backward():
    # Two 1 MiB gradients, 1 MiB buckets, 2 workers, compute 3 s: forward 1 s, backward 2 s, the
    # last layer's gradient ready at 2 s, the first's at 3 s. Each bucket's ring all-reduce:
    # 2*(1/2)*1 MiB * beta = 1.5 s. Overlapped: bucket 0 runs 2.0-3.5, bucket 1 3.5-5.0.
    # Not overlapped: both start at 3 s: 6.0.
    assert M.BACKWARD_SHARE == pytest.approx(2 / 3)
    link = _link_with_beta(1.5 / MIB)
    c = M.Constants(host_s_per_byte=0.0)
    on = M.allreduce_step([MIB, MIB], 2, link, 3.0, c, "ring", bucket_mb=1, overlap=True)
    off = M.allreduce_step([MIB, MIB], 2, link, 3.0, c, "ring", bucket_mb=1, overlap=False)
    assert on.total(c) == pytest.approx(5.0)
    assert (on.compute_s, on.wire_s) == (pytest.approx(2.0), pytest.approx(3.0))
    assert off.total(c) == pytest.approx(6.0)
    # a fast link (0.1 s a bucket): bucket 0 hides under backward; the last bucket is ready only
    # when backward ends, so it is always exposed: 3.0 + 0.1
    fast = M.allreduce_step([MIB, MIB], 2, _link_with_beta(0.1 / MIB), 3.0, c, "ring",
                            bucket_mb=1)
    assert fast.total(c) == pytest.approx(3.1)
    assert (fast.compute_s, fast.wire_s) == (pytest.approx(3.0), pytest.approx(0.1))


def test_bucket_layout_matches_make_buckets():
    from torch import nn

    from ddlstudy.strategies import make_buckets

    sizes = [4 * n for n in (1000, 300_000, 50, 700_000, 20, 200_000)]
    params = [nn.Parameter(__import__("torch").zeros(s // 4)) for s in sizes]
    real = make_buckets(list(reversed(params)), int(1.5 * MIB))
    model = M.bucket_layout(sizes, 1.5)
    assert [b for b, _ in model] == [4 * b.buf.numel() for b in real]
    assert model[-1][1] == len(sizes) - 1


def test_ps_moves_2n_models_through_one_server_and_2n_over_s_with_s_servers():
    m, beta = 1_000_000, 1e-8
    link = _link_with_beta(beta)
    c = M.Constants(host_s_per_byte=0.0)
    one = M.ps_step([m], 4, 1, link, 0.1, c)
    assert one.wire_s == pytest.approx(2 * 4 * m * beta)  # N models in, N models out
    two = M.ps_step([m], 4, 2, link, 0.1, c)
    assert two.wire_s == pytest.approx(2 * 2 * m * beta)
    # S = N servers: each link carries the model once each way, the ring's 2(N-1)/N argument
    assert M.ps_step([m], 4, 4, link, 0.1, c).wire_s == pytest.approx(2 * m * beta)
    # more servers than workers: the worker's own link is the bottleneck
    assert M.ps_step([m], 4, 8, link, 0.1, c).wire_s == pytest.approx(2 * m * beta)
    # host: worker packs + copies in (2m), server sums N shards and steps its shard
    assert one.host_bytes == pytest.approx(2 * m + 4 * m + m)


def test_async_ps_is_the_longer_of_own_cycle_and_server_turn():
    m, beta = 1_000_000, 1e-8
    link, c = _link_with_beta(beta), M.Constants(host_s_per_byte=0.0)
    # 4 workers, compute 0.01 s: server turn 4 * 2 * m * beta = 0.08 s > own 0.01 + 0.02
    assert M.ps_step([m], 4, 1, link, 0.01, c, sync=False).total(c) == pytest.approx(0.08)
    # compute 1 s: each worker's own cycle (1 + 0.02) dominates; async beats sync (1.08)
    assert M.ps_step([m], 4, 1, link, 1.0, c, sync=False).total(c) == pytest.approx(1.02)
    assert M.ps_step([m], 4, 1, link, 1.0, c).total(c) == pytest.approx(1.08)


def test_predict_step_dispatch_and_bad_input():
    link = M.profile_link("10GbE")
    sizes = [MIB] * 3
    ddp = M.predict_step("ddp", "x", 4, link, 0.1, sizes=sizes)
    ring = M.predict_step("allreduce", "x", 4, link, 0.1, sizes=sizes, algorithm="reference")
    assert ddp == ring
    sharded = M.predict_step("ps_sharded", "x", 4, link, 0.1, sizes=sizes)
    assert sharded == M.ps_step(sizes, 4, 2, link, 0.1, M.Constants())
    with pytest.raises(ValueError, match="valid: ps_sync"):
        M.predict_step("single", "x", 1, link, 0.1, sizes=sizes)
    with pytest.raises(ValueError, match="unknown network profile"):
        M.profile_link("100GbE")
    # the real model's gradient sizes: resnet18 at the CIFAR shape, 11.17 M float32 parameters
    assert sum(M.gradient_bytes("resnet18", "cifar")) == 4 * 11_173_962


def test_project_step_adds_the_profiles_latency():
    sizes = [8 * MIB]
    ib = M.project_step("allreduce", "x", 64, "IB-EDR", 0.03, sizes=sizes)
    eth = M.project_step("allreduce", "x", 64, "10GbE", 0.03, sizes=sizes)
    assert eth > ib > 0.03
    no_lat = M.project_step("allreduce", "x", 64, "10GbE", 0.03, latency_s=0.0, sizes=sizes)
    # chunk 8 MiB / 64 = 128 KiB, one 1 MiB segment: 2(N-1) messages of 18 us
    assert eth - no_lat == pytest.approx(2 * 63 * 18e-6)


# ----------------------------------------------------------------------------- validate
TRUE = M.Constants(link_factor=1.08, host_s_per_byte=2e-9, overhead_s=0.05)


def _write_cells(root, noise: float = 0.0):
    """Summary rows the way trainer.summarize writes them, timed by the model with TRUE."""
    rng = np.random.default_rng(0)
    sizes = {"a": (4 * MIB, 2 * MIB, 64 * 1024), "b": (20 * MIB, 20 * MIB, 1 * MIB)}
    rows = []
    for model, s in sizes.items():
        for strategy in ("ps_sync", "allreduce"):
            for n in (1, 2, 3, 4, 5, 6):
                link = M.profile_link("10GbE", 0.01, latency_s=0.0)
                st = M.predict_step(strategy, model, n, link, 0.02 * 100, TRUE, sizes=s)
                t = st.total(TRUE) * (1 + noise * rng.normal())
                rows.append({"strategy": strategy, "algorithm": "ring_pipelined"
                             if strategy == "allreduce" else "", "overlap": strategy ==
                             "allreduce", "bucket_mb": 25.0, "model": model, "shape": "cifar",
                             "workers": n, "servers": 1 if strategy == "ps_sync" else 0,
                             "batch_size": 32, "steps": 2, "wall_s": 2 * t,
                             "compute_mode": "replay", "replay_s": 0.02, "time_dilation": 100.0,
                             "network": "10GbE", "network_scale": 0.01, "error": ""})
    rows.append(dict(rows[0], compute_mode="real", network="none", network_scale=None))
    for i, row in enumerate(rows):
        d = root / f"cell{i}"
        d.mkdir()
        pd.DataFrame([row]).to_csv(d / "summary.csv", index=False)
    # a chapter-level summary repeating every cell: read once, not twice
    pd.DataFrame(rows).to_csv(root / "summary.csv", index=False)
    return sizes


def test_validate_recovers_constants_on_synthetic_records(tmp_path, monkeypatch, capsys):
    sizes = _write_cells(tmp_path)
    _patch_sizes(monkeypatch, sizes)
    cells = M.read_cells([tmp_path])
    assert len(cells) == 25  # 24 cells + the real-compute one; the chapter copy deduplicated
    table, c = M.validate(cells)
    assert len(table) == 24  # the unshaped real-compute cell is skipped
    assert (table["role"] == "fit").sum() == 24 // 3  # 8 fit cells: all four constants
    assert c.link_factor == pytest.approx(TRUE.link_factor, rel=1e-3)
    assert c.overhead_s == pytest.approx(TRUE.overhead_s, rel=1e-2)
    assert table["rel_error"].abs().max() < 1e-3
    assert M.main(["validate", str(tmp_path)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-3] == "median relative error (held out by configuration): 0.00"
    assert out[-2].startswith("median relative error (published, ")
    assert out[-1].startswith("median relative error (settings alone, no fit): ")
    assert any("ps_sync" in line and " a " in f" {line} " for line in out)


def test_few_fit_cells_fit_few_constants_and_links_never_beat_their_rate(monkeypatch):
    # 4 cells whose steps are 0.8 x the nominal wire time: the link factor stays at its floor 1;
    # 4 cells fit at most 2 constants, so host per byte and per message keep their defaults
    link = M.profile_link("10GbE", 0.01, latency_s=0.0)
    rows = []
    for n in (2, 3, 4, 5):
        st = M.allreduce_step([40 * MIB], n, link, 0.0, M.Constants(host_s_per_byte=0.0),
                              "ring", overlap=False)
        rows.append({"strategy": "allreduce", "algorithm": "ring", "overlap": False,
                     "bucket_mb": 25.0, "model": "a", "shape": "cifar", "workers": n,
                     "servers": 0, "batch_size": 32, "steps": 1, "wall_s": 0.8 * st.wire_s,
                     "network": "10GbE", "network_scale": 0.01, "replay_s": 0.0,
                     "time_dilation": 1.0})
    _patch_sizes(monkeypatch, {}, default=(40 * MIB,))
    c = M.fit_constants(pd.DataFrame(rows))
    assert c.link_factor == 1.0
    assert (c.host_s_per_byte, c.host_s_per_message) == (M.Constants().host_s_per_byte, 0.0)


def test_validate_with_noise_reports_its_error(tmp_path, monkeypatch, capsys):
    sizes = _write_cells(tmp_path, noise=0.1)
    _patch_sizes(monkeypatch, sizes)
    assert M.main(["validate", str(tmp_path)]) == 0
    held = capsys.readouterr().out.strip().splitlines()[-3]
    assert held.startswith("median relative error (held out by configuration): ")
    med = float(held.rsplit(" ", 1)[1])
    assert 0.01 < med < 0.2


def test_validate_bad_input_is_one_line_exit_2(tmp_path, capsys):
    assert M.main(["validate", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: no summary.csv under") and "\n" not in err
    pd.DataFrame([{"strategy": "ps_sync", "model": "a"}]).to_csv(tmp_path / "summary.csv")
    assert M.main(["validate", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "lack column(s)" in err and "\n" not in err
    assert M.main(["validate", str(tmp_path / "nope")]) == 2
    assert "no such folder" in capsys.readouterr().err


# ----------------------------------------------------------------------------- projection
def test_project_efficiency_against_one_worker_alone(monkeypatch):
    sizes = (20 * MIB, 20 * MIB, 4 * MIB)
    _patch_sizes(monkeypatch, {}, default=sizes)
    c = M.Constants(host_s_per_byte=0.0)
    proj = M.project(["resnet50"], ["allreduce", "ps_sync"], [1, 8, 64], ["IB-EDR", "10GbE"], c,
                     shape="imagenet", batch_size=128, servers=[1, 0])
    assert set(proj["source"]) == {"projected"}
    ring = proj[proj["strategy"] == "allreduce"].set_index(["profile", "workers"])
    assert ring.loc[("IB-EDR", 1), "efficiency"] == pytest.approx(1.0)
    # the faster network scales better at 64 (Wang (NCHC)'s order), both below 1
    assert 1 > ring.loc[("IB-EDR", 64), "efficiency"] > ring.loc[("10GbE", 64), "efficiency"]
    ps = proj[proj["strategy"] == "ps_sync"]
    one = ps[ps["servers_rule"] == "1"].set_index(["profile", "workers"])
    per_n = ps[ps["servers_rule"] == "N"].set_index(["profile", "workers"])
    # one server: its link carries 2N models, so the step grows ~N-fold; S = N: the same bytes,
    # but a worker sends one push and one pull per server: 2 latencies per server
    assert one.loc[("10GbE", 64), "step_s"] > 30 * one.loc[("10GbE", 1), "step_s"]
    lat = M.profile_link("10GbE").latency_s
    assert per_n.loc[("10GbE", 64), "step_s"] - per_n.loc[("10GbE", 8), "step_s"] == \
        pytest.approx(2 * (64 - 8) * lat)
    assert per_n.loc[("10GbE", 64), "servers"] == 64
    # images/sec = N x batch / step
    r = ring.loc[("10GbE", 8)]
    assert r["images_per_sec"] == pytest.approx(8 * 128 / r["step_s"])


def test_validation_for_missing_records_is_labelled_not_validated(tmp_path):
    v = M.validation_for([tmp_path / "absent"])
    assert v.n_cells == 0 and math.isnan(v.median_error)
    assert v.label.startswith("projected (model not validated: none of")
    assert v.cluster_constants() == M.Constants(host_s_per_byte=0.0)


def test_validation_for_states_error_and_converts_constants(tmp_path, monkeypatch):
    sizes = _write_cells(tmp_path)
    _patch_sizes(monkeypatch, sizes)
    v = M.validation_for([tmp_path, tmp_path / "absent"])
    assert v.n_cells == 24 - 24 // 3 and v.median_error < 1e-3 and v.scale == 0.01
    assert v.label == ("projected (model validated to 0.0% median relative error on "
                       f"{v.n_cells} held-out cells)")
    cc = v.cluster_constants()
    assert cc.overhead_s == pytest.approx(v.constants.overhead_s * 0.01)
    assert cc.link_factor == v.constants.link_factor
    assert cc.host_s_per_message == 0  # the profile's latency replaces it on a real cluster


def test_host_cost_per_message_counts_ring_segments():
    # 8 MiB, 2 workers, pipelined ring with 1 MiB segments: chunk 4 MiB -> 4 segments per step,
    # 2(N-1) = 2 steps -> 8 messages; PS: push + pull = 2
    c = M.Constants(host_s_per_byte=0.0, host_s_per_message=0.01)
    link = _link_with_beta(1e-9)
    st = M.allreduce_step([8 * MIB], 2, link, 0.1, c, "ring_pipelined", overlap=False)
    assert st.messages == 8
    assert st.total(c) == pytest.approx(0.1 + 8 * MIB * 1e-9 + 0.08)
    assert M.ps_step([MIB], 2, 1, link, 0.1, c).messages == 2


def test_repeats_of_a_cell_become_one_row_with_the_median(tmp_path):
    row = {"strategy": "allreduce", "algorithm": "ring", "overlap": True, "bucket_mb": 25.0,
           "model": "a", "shape": "cifar", "workers": 2, "servers": 0, "batch_size": 32,
           "steps": 2, "compute_mode": "replay", "replay_s": 0.01, "time_dilation": 100.0,
           "network": "10GbE", "network_scale": 0.01, "replay_source": "gpu"}
    for i, wall in enumerate((2.0, 3.0, 10.0)):
        d = tmp_path / f"r{i}"
        d.mkdir()
        pd.DataFrame([dict(row, wall_s=wall, repeat=i)]).to_csv(d / "summary.csv", index=False)
    cells = M.read_cells([tmp_path])
    assert len(cells) == 1
    assert cells["wall_s"].iloc[0] / cells["steps"].iloc[0] == pytest.approx(1.5)  # 3.0 / 2
    assert cells["repeats"].iloc[0] == 3


def _link_bench(alpha: float, rate: float, noise: dict[str, float] | None = None) -> pd.DataFrame:
    """Synthetic all-reduce points on a shaped link: alpha per message + bytes at rate x
    goodput, each algorithm's time scaled by its `noise` factor."""
    rows = []
    for alg in ("ring", "tree", "ps", "recursive_doubling"):
        for p in (2, 4):
            for n in (1 << 16, 1 << 18, 1 << 20, 1 << 22):
                msgs, nbytes, _ = M.terms(alg, n, p)
                t = (msgs * alpha + nbytes * 8 / (rate * M.GOODPUT)) * (noise or {}).get(
                    alg, 1.0)
                rows.append({"algorithm": alg, "ranks": p, "size_bytes": n, "time_p50_s": t,
                             "link_bps": rate, "repeat": 0, "error": ""})
    rows.append({"algorithm": "reference", "ranks": 4, "size_bytes": 1 << 20,
                 "time_p50_s": 9.0, "link_bps": rate, "repeat": 0, "error": ""})
    return pd.DataFrame(rows)


def test_collectives_on_shaped_links_recover_alpha_and_predict_exactly() -> None:
    table, alpha = M.validate_collectives(_link_bench(2e-3, 1e8))
    assert alpha == pytest.approx(2e-3, rel=1e-6)
    assert "reference" not in set(table["algorithm"])  # gloo's schedule is not modelled
    assert table["rel_error"].abs().max() < 1e-6
    assert (table["role"] == "fit").sum() == len(range(1, len(table), 3))  # every third


def test_collectives_validation_error_follows_the_records(tmp_path: Path, capsys) -> None:
    bench = _link_bench(1e-3, 1e8, noise={"ps": 0.5, "tree": 1.3})
    table, _ = M.validate_collectives(bench)
    held = table[table["role"] == "validate"].set_index("algorithm")["rel_error"]
    assert held.loc["ps"].abs().min() > 0.3 and held.loc["ring"].abs().max() < 0.3
    (tmp_path / "05").mkdir()
    bench.to_csv(tmp_path / "05" / "collectives_emulated.csv", index=False)
    assert M.main(["validate-collectives", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    med = float(out.strip().splitlines()[-1].split(": ")[1])
    assert med == pytest.approx(table.loc[table["role"] == "validate", "rel_error"].abs()
                                .median(), abs=0.005)
    assert M.main(["validate-collectives", str(tmp_path / "none")]) == 2
    with pytest.raises(M.RecordsError, match="link_bps"):
        M.validate_collectives(bench.drop(columns="link_bps"))


def test_whatif_sliders_build_and_draw_the_projection() -> None:
    """Chapter 06's sliders: built headless with no output, and a redraw projects both setups."""
    import matplotlib

    matplotlib.use("Agg")
    from ddlstudy.chapters import explore

    c = M.Constants(host_s_per_byte=0.0)
    ui = explore.sliders(["resnet50", "alexnet"], c, [1, 8, 64], "imagenet", 128,
                         "ring_pipelined", "analytic", start=dict(
                             model="resnet50", profile="10GbE", replay_source="gpu",
                             latency_s=None, servers=1, bucket_mb=25.0, compute_scale=1.0))
    out = ui.children[-1]
    assert out.outputs == ()  # nothing drawn until a reader acts
    fig = explore.draw("resnet50", "10GbE", "gpu", None, 0, 25.0, 1.0, c, [1, 8, 64],
                       "imagenet", 128, "ring_pipelined", "analytic")
    ring, ps = fig.axes[0].get_lines()
    assert list(ring.get_xdata()) == [1, 8, 64] and ring.get_ydata()[0] == pytest.approx(1.0)
    assert "S = N" in ps.get_label()


def test_committed_reference_meets_the_validation_goal():
    """The issue's goal on the committed make-reference cells: constants fitted on at most a
    third of the cells, median relative error <= 0.10 on the held-out rest (fails when a change
    to the model or a new batch of cells breaks it)."""
    from ddlstudy.records import reference

    v = M.validation_for([reference.reference_dir()])
    if v.n_cells == 0:
        pytest.skip(f"no committed reference cells: {v.note}")
    roles = v.table["role"].value_counts()
    assert roles.get("fit", 0) * 3 <= len(v.table) and roles["validate"] == v.n_cells
    assert v.median_error <= 0.10, v.table.sort_values("rel_error").to_string()
