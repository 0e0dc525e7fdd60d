"""Alpha-beta-gamma formulas against hand-worked values, and the fit recovering known constants."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from ddlstudy import costmodel as M

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
    assert got["gamma"] == pytest.approx(G, rel=1e-6)
    table = M.prediction_error_table(_synthetic(A, B, G), got)
    assert set(table.columns) >= {"algorithm", "ranks", "size_bytes", "measured_s", "predicted_s",
                                  "rel_error"}
    assert table["rel_error"].abs().max() < 1e-6


def test_fit_with_noise_and_zero_gamma_stays_non_negative():
    got = M.fit(_synthetic(A, B, 0.0, noise=0.05))
    assert got["gamma"] >= 0 and got["alpha"] >= 0
    assert got["alpha"] == pytest.approx(A, rel=0.2)
    assert got["beta"] == pytest.approx(B, rel=0.2)


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
    assert not math.isnan(M.predict_table(["ring"], [8], [2], A, B, G)["busbw_gbps"][0])
