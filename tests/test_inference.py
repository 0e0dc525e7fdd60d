"""Calibrated intervals and verdicts (ddlstudy.analysis.inference): coverage on synthetic runs,
false decisions under no effect, each verdict kind's agrees / differs / inconclusive / too few
runs, and the calibrate command's two closing lines."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from scipy import stats as sps

from ddlstudy.analysis import calibration as calib
from ddlstudy.analysis import inference as inf

SIGMA = calib.cv_to_log_sd(0.06)  # 6 % run-to-run spread


def runs(rng: np.random.Generator, centre: float, n: int = 5, cv: float = 0.06) -> np.ndarray:
    """n lognormal runs whose geometric mean is `centre`."""
    return centre * np.exp(rng.normal(0.0, calib.cv_to_log_sd(cv), n))


def band(p: float, draws: int) -> tuple[float, float]:
    """p +/- 3.5 binomial standard errors: a coverage outside this is a real miss."""
    se = math.sqrt(p * (1 - p) / draws)
    return p - 3.5 * se, p + 3.5 * se


# ------------------------------------------------------------------------------ coverage


@pytest.mark.parametrize("na, nb, sb", [(5, 5, 1.0), (5, 8, 3.0)])
def test_welch_log_ratio_covers_truth_at_small_n(na: int, nb: int, sb: float) -> None:
    rng = np.random.default_rng(1)
    truth, hits, draws = 1.3, 0, 2000
    for _ in range(draws):
        a = truth * np.exp(rng.normal(0, SIGMA, na))
        b = np.exp(rng.normal(0, SIGMA * sb, nb))  # unequal spreads: Welch, not pooled
        e = inf.log_ratio_ci(a, b)
        hits += e.low <= truth <= e.high
    assert 0.93 <= hits / draws <= 0.97


def test_paired_and_single_log_intervals_cover_truth() -> None:
    rng = np.random.default_rng(2)
    draws, paired_hits, single_hits = 2000, 0, 0
    for _ in range(draws):
        drift = rng.normal(0, 0.2, 5)  # shared by both arms of a pair: pairing removes it
        a = 0.8 * np.exp(drift + rng.normal(0, SIGMA, 5))
        b = np.exp(drift + rng.normal(0, SIGMA, 5))
        p = inf.paired_log_ratio_ci(a, b)
        paired_hits += p.low <= 0.8 <= p.high
        s = inf.log_mean_ci(a / b)
        single_hits += s.low <= 0.8 <= s.high
    assert 0.93 <= paired_hits / draws <= 0.97
    assert 0.93 <= single_hits / draws <= 0.97
    assert p.high / p.low < 1.3  # pairing removed the 20 % drift from the interval


def test_median_interval_reports_its_real_coverage() -> None:
    rng = np.random.default_rng(3)
    five = inf.median_exact_ci(runs(rng, 1.0, 5))
    assert five.coverage == pytest.approx(1 - 2 / 32)  # [min, max] of 5 covers 93.75 %, not 95
    x = runs(rng, 1.0, 5)
    assert (inf.median_exact_ci(x).low, inf.median_exact_ci(x).high) == (x.min(), x.max())
    # n = 12: same interval as scipy.stats.quantile_test, coverage >= 95 % and as reported
    x = runs(rng, 1.0, 12)
    e = inf.median_exact_ci(x)
    q = sps.quantile_test(x, q=1.0, p=0.5).confidence_interval(0.95)
    assert (e.low, e.high) == pytest.approx((q.low, q.high))
    assert e.coverage >= 0.95
    draws = 2000
    y = np.exp(rng.standard_t(3, (draws, 12)))  # heavy tails: still exact (distribution-free)
    ci = [inf.median_exact_ci(row) for row in y]
    hits = sum(c.low <= 1.0 <= c.high for c in ci)
    assert band(e.coverage, draws)[0] <= hits / draws <= band(e.coverage, draws)[1]


def test_bootstrap_refused_below_threshold_and_covers_at_it() -> None:
    rng = np.random.default_rng(4)
    with pytest.raises(ValueError, match="needs >= 30 runs"):
        inf.bootstrap_ci(runs(rng, 1.0, 29))
    with pytest.raises(ValueError, match="needs >= 30 runs"):
        inf.bootstrap_ci(runs(rng, 1.0, 40), runs(rng, 1.0, 10))
    draws, hits = 300, 0
    for _ in range(draws):
        e = inf.bootstrap_ci(runs(rng, 1.2, 30), runs(rng, 1.0, 30))
        hits += e.low <= 1.2 <= e.high
    assert 0.88 <= hits / draws <= 0.99  # ~0.94 measured; wide band for 300 draws


# ------------------------------------------------------------------------------ verdicts


def test_direction_agrees_differs_inconclusive() -> None:
    rng = np.random.default_rng(5)
    base = runs(rng, 100.0)
    agrees = inf.verdict(runs(rng, 150.0), base, kind="direction")
    assert agrees.verdict == "agrees" and agrees.ci_low > 1.0 and agrees.runs == 5
    assert agrees.value == pytest.approx(1.5, rel=0.1)
    assert agrees.method == "welch-t-log" and agrees.reason.startswith("agrees: 95% interval")
    differs = inf.verdict(runs(rng, 60.0), base, kind="direction")
    assert differs.verdict == "differs" and differs.ci_high < 1.0
    less = inf.verdict(runs(rng, 60.0), base, kind="direction", direction="less")
    assert less.verdict == "agrees"
    same = inf.verdict(runs(rng, 100.0), base, kind="direction")
    assert same.verdict == "inconclusive" and same.ci_low < 1.0 < same.ci_high


def test_too_few_runs_is_inconclusive_with_the_count() -> None:
    rng = np.random.default_rng(6)
    v = inf.verdict(runs(rng, 3.0, 3), runs(rng, 1.0, 3), kind="direction")
    assert v.verdict == "inconclusive" and v.reason == "inconclusive: 3 runs (needs 5)"
    assert v.runs == 3 and math.isnan(v.ci_low) and v.value == pytest.approx(3.0, rel=0.15)
    # failed runs (NaN) are not runs; the smaller arm counts
    a = np.r_[runs(rng, 3.0, 4), np.nan]
    v = inf.verdict(a, runs(rng, 1.0, 8), kind="direction")
    assert v.reason == "inconclusive: 4 runs (needs 5)"
    v = inf.verdict(runs(rng, 3.0, 5), kind="direction", method="median")
    assert v.reason.startswith("inconclusive: 5 runs (needs 6 for a 95%")
    assert inf.verdict([], kind="magnitude", margin_low=0.8, margin_high=0.9).reason \
        == "inconclusive: 0 runs (needs 5)"


def test_equivalence_agrees_only_when_the_whole_interval_is_inside() -> None:
    rng = np.random.default_rng(7)
    same = dict(kind="equivalence", no_effect=1.0, margin_low=1 / 1.1, margin_high=1.1)
    tight = inf.verdict(runs(rng, 100.0, 10, 0.02), runs(rng, 100.0, 10, 0.02), **same)
    assert tight.verdict == "agrees" and 1 / 1.1 < tight.ci_low and tight.ci_high < 1.1
    assert tight.reason.startswith("agrees: 90% interval")
    # a 2x slowdown never agrees with "the same performance", however noisy the runs
    for cv in (0.02, 0.06, 0.3, 1.0):
        for _ in range(200):
            v = inf.verdict(runs(rng, 50.0, 5, cv), runs(rng, 100.0, 5, cv), **same)
            assert v.verdict != "agrees"
            if v.verdict == "differs":
                assert v.ci_high < 1 / 1.1
    assert inf.verdict(runs(rng, 50.0), runs(rng, 100.0), **same).verdict == "differs"
    # point estimate inside the margins, interval crossing one: inconclusive, not agrees
    a, b = np.array([1.00, 1.12, 0.95, 1.10, 1.02]), np.array([1.0, 0.97, 1.04, 0.99, 1.01])
    v = inf.verdict(a, b, **same)
    assert 1 / 1.1 < v.value < 1.1 and v.ci_high > 1.1 and v.verdict == "inconclusive"
    # every decided verdict over many draws respects the rule
    for _ in range(300):
        v = inf.verdict(runs(rng, 1.0), runs(rng, rng.uniform(0.8, 1.25)), **same)
        if v.verdict == "agrees":
            assert v.margin_low < v.ci_low and v.ci_high < v.margin_high
        elif v.verdict == "differs":
            assert v.ci_high < v.margin_low or v.ci_low > v.margin_high


def test_magnitude_is_tested_as_a_magnitude() -> None:
    rng = np.random.default_rng(8)
    paper = dict(kind="magnitude", no_effect=1.0, margin_low=0.84, margin_high=0.94)
    measured_017 = inf.verdict(runs(rng, 0.17), **paper)  # 10GbE efficiency vs the paper's 89 %
    assert measured_017.verdict == "differs" and measured_017.method == "t-log"
    close = inf.verdict(runs(rng, 0.89, 8, 0.02), **paper)
    assert close.verdict == "agrees"
    wide = inf.verdict(runs(rng, 0.89, 5, 0.15), **paper)
    assert wide.verdict == "inconclusive"


def test_no_spread_and_malformed_claims() -> None:
    v = inf.verdict([2.0] * 5, [1.0] * 5, kind="direction")
    assert v.verdict == "inconclusive" and "no run-to-run spread" in v.reason
    with pytest.raises(ValueError, match="needs margins"):
        inf.verdict([1.0] * 5, [1.0] * 5, kind="equivalence")
    with pytest.raises(ValueError, match="must contain"):
        inf.verdict([1.0] * 5, kind="equivalence", margin_low=1.1, margin_high=1.2)
    with pytest.raises(ValueError, match="positive"):
        inf.verdict([1.0, 0.0, 1.0, 1.0, 1.0], kind="direction")
    with pytest.raises(ValueError, match="differ in length"):
        inf.verdict([1.0] * 5, [1.0] * 4, kind="direction", paired=True)
    with pytest.raises(ValueError, match="kind"):
        inf.verdict([1.0] * 5, kind="bigger")


@pytest.mark.parametrize(("value", "verdict"), [(1.0, "agrees"), (0.92, "differs"),
                                              (1.02, "inconclusive")])
def test_exact_values_are_decided_against_the_margins(value: float, verdict: str) -> None:
    """A ratio the same in every run whose inputs varied: an exact result, decided as [v, v]."""
    claim = dict(kind="equivalence", margin_low=0.98, margin_high=1.02)
    v = inf.verdict([value] * 5, exact="exact", **claim)
    assert v.verdict == verdict and v.method == "exact", v.reason
    assert v.ci_low == v.ci_high == pytest.approx(value) and v.runs == 5
    assert v.reason.startswith(f"{verdict}: exact in all 5 runs: value {value:.4g}")
    # two independent arms, each constant (ring 0.9186 vs tree 0.9186 per seed): ratio 1
    both = inf.verdict([0.9186] * 6, [0.9186] * 6, exact="counted, exact", **claim)
    assert both.verdict == "agrees" and "counted, exact in all 6 runs" in both.reason
    outside = inf.verdict([1.5] * 5, [1.0] * 5, kind="direction", exact="exact")
    assert outside.verdict == "agrees" and outside.value == pytest.approx(1.5)


def test_exact_needs_the_runs_and_no_spread() -> None:
    claim = dict(kind="magnitude", no_effect=1.0, margin_low=0.90, margin_high=0.93)
    few = inf.verdict([1.0] * 4, exact="exact", **claim)
    assert few.verdict == "inconclusive" and few.reason.startswith("inconclusive: 4 runs")
    assert math.isnan(few.ci_low)
    unmarked = inf.verdict([1.0] * 5, **claim)  # no `exact`: a value the settings fix
    assert unmarked.verdict == "inconclusive" and "no run-to-run spread" in unmarked.reason
    spread = inf.verdict([0.91, 0.915, 0.92, 0.912, 0.918], exact="exact", **claim)
    assert spread.method == "t-log" and spread.ci_low < spread.ci_high  # not the exact path
    assert spread.verdict == "agrees"


def test_paired_verdict_uses_pairs() -> None:
    rng = np.random.default_rng(9)
    drift = rng.normal(0, 0.3, 6)  # large drift across pairs, 5 % effect inside each pair
    a = 1.05 * np.exp(drift + rng.normal(0, 0.01, 6))
    b = np.exp(drift + rng.normal(0, 0.01, 6))
    assert inf.verdict(a, b, kind="direction", paired=True).verdict == "agrees"
    assert inf.verdict(a, b, kind="direction").verdict == "inconclusive"
    med = inf.verdict(a, b, kind="direction", paired=True, method="median")
    assert med.verdict == "agrees" and med.coverage == pytest.approx(1 - 2 / 64)


# ------------------------------------------------------------------------------ calibration


@pytest.mark.parametrize("design, method, n", [("ratio", "t", 5), ("paired", "t", 5),
                                               ("single", "t", 5), ("single", "median", 7)])
def test_false_decisions_under_no_effect_for_each_kind(design: str, method: str, n: int) -> None:
    cal = calib.calibrate(0.06, n, 6000, seed=11, design=design, method=method)
    kinds = {s.kind for s in cal.scenarios}
    assert kinds == set(inf.KINDS)
    tol = 3 * cal.mc_se  # exact tests sit at 0.05; allow only Monte Carlo noise above it
    for s in cal.scenarios:
        assert s.false_rate <= 0.05 + tol, s
    assert cal.false_decisions <= 0.05 + tol


def test_calibration_numbers_at_six_percent_spread() -> None:
    cal = calib.calibrate(0.06, 5, 20000, seed=inf.SEED)
    assert cal.false_decisions <= 0.05  # Welch t on logs is slightly conservative at n = 5
    by = {(s.kind, s.truth): s for s in cal.scenarios}
    no_effect = by[("direction", "no effect")]
    assert 0.035 <= no_effect.false_rate <= 0.05  # not trivially zero: the test can decide
    assert 0.90 <= by[("direction", "stated effect")].power <= 0.97  # 17 % effect, 5 runs
    assert 0.40 <= by[("equivalence", "no effect")].power <= 0.55  # +/-10 % needs ~8 runs
    assert cal.power == pytest.approx(by[("equivalence", "no effect")].power)
    # fewer runs than verdicts need: nothing is decided
    two = calib.calibrate(0.06, 2, 2000, seed=1)
    assert two.false_decisions == 0.0 and two.power == 0.0
    assert all(s.inconclusive == 1.0 for s in two.scenarios)
    # the same machinery with the rule lifted still holds its size at 3 runs, with no power
    three = calib.calibrate(0.06, 3, 6000, seed=1, min_runs=3)
    assert three.false_decisions <= 0.05 + 3 * three.mc_se and three.power < 0.3


def test_run_spread_recovers_the_cv() -> None:
    rng = np.random.default_rng(12)
    cells = {f"cell{i}": runs(rng, rng.uniform(10, 1000), 5, 0.06) for i in range(200)}
    cells["one run"] = [123.0]
    cells["failed"] = [np.nan, 50.0]
    assert calib.run_spread(cells) == pytest.approx(0.06, rel=0.1)  # 800 df: SE 2.5 %
    assert calib.run_spread(list(cells.values())) == calib.run_spread(cells)
    with pytest.raises(ValueError, match=">= 2 runs"):
        calib.run_spread({"a": [1.0], "b": [np.nan, 2.0]})


def test_calibrate_command_prints_the_two_lines(capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(13)
    cv = calib.run_spread([runs(rng, 100.0, 5, 0.04) for _ in range(6)])  # a small spread
    assert calib.main(["calibrate", "--cv", f"{cv:.4f}", "--runs", "5", "--trials", "4000",
                     "--seed", "3"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    false = re.fullmatch(r"false decisions under no effect: (0\.\d{3})", lines[-2])
    power = re.fullmatch(r"power at the stated margins: (0\.\d{2}|1\.00)", lines[-1])
    assert false and power, lines[-2:]
    assert float(false.group(1)) <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 4000)
    assert float(power.group(1)) >= 0.5  # ~4 % spread: +/-10 % equivalence is decidable
    with pytest.raises(SystemExit):
        calib.main(["calibrate", "--cv", "-1"])
