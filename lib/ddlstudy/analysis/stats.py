"""Medians with 95 % intervals, ratio and slope intervals, and verdicts drawn from intervals.

One place for how the study turns repeats into a verdict, so every chapter says the same thing
for the same numbers (Hoefler & Belli, SC15: report the spread, compare ratios measured in the
same run, never state a single run's order as a finding).

Methods (stable names; chapters and `conclusions` import them):

- `median_ci(values)`: the sample median with the distribution-free order-statistic interval
  for the median (binomial: [x_(k), x_(n-k+1)] with the largest k whose coverage is >= 95 %).
  Below 6 values no pair of order statistics reaches 95 %; the interval is then [min, max] and
  `Interval.coverage` says what it really covers (75 % for 3 values, 50 % for 2).
- `ratio_ci(a, b, paired=True)`: median(a) / median(b) with a percentile bootstrap interval
  (`BOOTSTRAP` resamples, fixed `SEED`); paired resamples whole repeats (a_i with b_i, as
  interleaved repeats were measured together), unpaired resamples each arm alone.
- `slope_ci(x, y)`: least-squares slope of y on x with a percentile bootstrap interval,
  resampling within each x level so every level stays in every resample.
  With 2-5 repeats a bootstrap can only span the repeats' own range: its interval is
  narrower than a true 95 % one, so read it as "the spread of these repeats", not a guarantee.
- `diff_ci(a, b, paired=True)`: median(a) - median(b), bootstrap as in `ratio_ci`.
- `ratio_of_ratios_ci(a_hi, a_lo, b_hi, b_lo)`: one speed-up over another, each of the four
  arms resampled alone (their units, e.g. timed chunks of separate runs, were not paired).
- `verdict(low, high, no_effect, expected_direction)`: "agrees" / "differs" only when the
  interval excludes `no_effect`; "inconclusive" when it contains it; "not measured" when an end
  is missing or NaN (too few repeats give NaN ends).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

LEVEL = 0.95          # nominal coverage of every interval here
SEED = 20151115       # fixed: the same records always give the same bootstrap interval
BOOTSTRAP = 2000      # resamples per bootstrap interval
MIN_REPEATS = 2       # fewer values than this: no interval, verdict "not measured"

AGREES, DIFFERS, INCONCLUSIVE, NOT_MEASURED = "agrees", "differs", "inconclusive", "not measured"
VERDICTS = (AGREES, DIFFERS, INCONCLUSIVE, NOT_MEASURED)

Values = Sequence[float] | np.ndarray | pd.Series


@dataclass(frozen=True)
class Interval:
    """A point estimate, its interval, how many repeats fed it and what the interval covers."""

    value: float
    low: float
    high: float
    n: int
    method: str
    coverage: float = LEVEL

    @property
    def measured(self) -> bool:
        """True when value and both ends are finite numbers."""
        return all(_finite(v) for v in (self.value, self.low, self.high))

    def text(self, fmt: str = ".3g") -> str:
        """'1.32 [1.10, 1.55], 3 repeats, 75 % order-statistic' style, for reasons and captions."""
        if not self.measured:
            return f"{self.value:{fmt}} (no interval: {self.n} repeat{'s' * (self.n != 1)})" \
                if _finite(self.value) else f"not measured ({self.n} usable repeats)"
        cover = f"{self.coverage:.0%} " if _finite(self.coverage) else ""
        return (f"{self.value:{fmt}} [{self.low:{fmt}}, {self.high:{fmt}}], n = {self.n}, "
                f"{cover}{self.method}")


def _finite(v: object) -> bool:
    try:
        return math.isfinite(float(v))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False


def _clean(values: Values) -> np.ndarray:
    """Finite values only: a NaN repeat (failed run) is dropped, not averaged in."""
    arr = np.asarray(values, dtype=float).ravel()
    return arr[np.isfinite(arr)]


def _few(n: int) -> str:
    """Label for a bootstrap on so few repeats that it only spans their range."""
    return " (nominal: < 6 repeats)" if n < 6 else ""


def _missing(n: int, method: str, value: float = math.nan) -> Interval:
    return Interval(value, math.nan, math.nan, n, method, math.nan)


def order_stat_coverage(n: int, k: int) -> float:
    """Coverage of [x_(k), x_(n-k+1)] (1-based) for the median: P(k <= Bin(n, 1/2) <= n-k)."""
    return sum(math.comb(n, i) for i in range(k, n - k + 1)) / 2 ** n


def median_ci(values: Values, level: float = LEVEL) -> Interval:
    """Median and its distribution-free order-statistic interval (see module docstring)."""
    x = np.sort(_clean(values))
    n = len(x)
    method = "order-statistic"
    if n == 0:
        return _missing(0, method)
    med = float(np.median(x))
    if n < MIN_REPEATS:
        return _missing(n, method, med)
    k = 1  # widest pair [min, max]; narrow while coverage stays >= level
    while k + 1 <= n - k and order_stat_coverage(n, k + 1) >= level:
        k += 1
    return Interval(med, float(x[k - 1]), float(x[n - k]), n, method, order_stat_coverage(n, k))


def _bootstrap(stat: Callable[..., float], arms: list[np.ndarray], paired: bool,
               level: float) -> tuple[float, float]:
    """Percentile bootstrap interval of stat(*arms) with a fixed seed."""
    rng = np.random.default_rng(SEED)
    draws = np.empty(BOOTSTRAP)
    for b in range(BOOTSTRAP):
        if paired:
            idx = rng.integers(0, len(arms[0]), len(arms[0]))
            draws[b] = stat(*(a[idx] for a in arms))
        else:
            draws[b] = stat(*(a[rng.integers(0, len(a), len(a))] for a in arms))
    draws = draws[np.isfinite(draws)]
    if len(draws) == 0:
        return math.nan, math.nan
    tail = (1 - level) / 2 * 100
    return float(np.percentile(draws, tail)), float(np.percentile(draws, 100 - tail))


def _two_arms(a: Values, b: Values, paired: bool) -> tuple[np.ndarray, np.ndarray]:
    """Finite values of each arm; paired drops a repeat whose either arm is missing."""
    x, y = np.asarray(a, dtype=float).ravel(), np.asarray(b, dtype=float).ravel()
    if paired:
        if len(x) != len(y):
            raise ValueError(f"paired arms differ in length ({len(x)} vs {len(y)}); "
                             "pass paired=False or align the repeats")
        keep = np.isfinite(x) & np.isfinite(y)
        return x[keep], y[keep]
    return x[np.isfinite(x)], y[np.isfinite(y)]


def _compare(stat: Callable[[np.ndarray, np.ndarray], float], a: Values, b: Values,
             paired: bool, level: float) -> Interval:
    x, y = _two_arms(a, b, paired)
    n = min(len(x), len(y))
    method = f"{'paired' if paired else 'unpaired'} bootstrap" + _few(n)
    if n == 0:
        return _missing(0, method)
    with np.errstate(divide="ignore", invalid="ignore"):
        value = float(stat(x, y))
        if n < MIN_REPEATS or not _finite(value):
            return _missing(n, method, value)
        low, high = _bootstrap(stat, [x, y], paired, level)
    return Interval(value, low, high, n, method, level)


def _ratio(x: np.ndarray, y: np.ndarray) -> float:
    return float(np.median(x) / np.median(y))


def _diff(x: np.ndarray, y: np.ndarray) -> float:
    return float(np.median(x) - np.median(y))


def ratio_ci(a: Values, b: Values, paired: bool = True, level: float = LEVEL) -> Interval:
    """median(a) / median(b) with a percentile bootstrap interval; no effect is 1."""
    return _compare(_ratio, a, b, paired, level)


def diff_ci(a: Values, b: Values, paired: bool = True, level: float = LEVEL) -> Interval:
    """median(a) - median(b) with a percentile bootstrap interval; no effect is 0."""
    return _compare(_diff, a, b, paired, level)


def _ratio_of_ratios(a_hi: np.ndarray, a_lo: np.ndarray, b_hi: np.ndarray,
                     b_lo: np.ndarray) -> float:
    return float(np.median(a_hi) / np.median(a_lo) / (np.median(b_hi) / np.median(b_lo)))


def ratio_of_ratios_ci(a_hi: Values, a_lo: Values, b_hi: Values, b_lo: Values,
                       level: float = LEVEL) -> Interval:
    """(median(a_hi) / median(a_lo)) / (median(b_hi) / median(b_lo)), each arm resampled alone
    (unpaired percentile bootstrap); no effect is 1.

    For speed-ups compared across arms whose units were not measured together (the timed chunks
    of separate runs): the baselines' spread enters the interval too, not only the tops'."""
    arms = [_clean(v) for v in (a_hi, a_lo, b_hi, b_lo)]
    n = min(len(a) for a in arms)
    method = "unpaired bootstrap" + _few(n)
    if n == 0:
        return _missing(0, method)
    with np.errstate(divide="ignore", invalid="ignore"):
        value = _ratio_of_ratios(*arms)
        if n < MIN_REPEATS or not _finite(value):
            return _missing(n, method, value)
        low, high = _bootstrap(_ratio_of_ratios, arms, False, level)
    return Interval(value, low, high, n, method, level)


def _ols_slope(x: np.ndarray, y: np.ndarray) -> float:
    xm = x - x.mean()
    denom = float((xm * xm).sum())
    return float((xm * (y - y.mean())).sum() / denom) if denom > 0 else math.nan


def slope_ci(x: Values, y: Values, level: float = LEVEL) -> Interval:
    """Least-squares slope of y on x, bootstrap resampling within each x level; no effect is 0.

    Needs two or more x levels and MIN_REPEATS points at some level (else "not measured")."""
    xs, ys = np.asarray(x, dtype=float).ravel(), np.asarray(y, dtype=float).ravel()
    keep = np.isfinite(xs) & np.isfinite(ys)
    xs, ys = xs[keep], ys[keep]
    method = "stratified bootstrap"
    levels = np.unique(xs)
    if len(levels) < 2:
        return _missing(len(xs), method)
    value = _ols_slope(xs, ys)
    groups = [ys[xs == lv] for lv in levels]
    reps = min(len(g) for g in groups)
    method += _few(reps)
    if max(len(g) for g in groups) < MIN_REPEATS:
        return _missing(reps, method, value)
    rng = np.random.default_rng(SEED)
    draws = np.empty(BOOTSTRAP)
    xcat = np.concatenate([np.full(len(g), lv) for lv, g in zip(levels, groups, strict=True)])
    for b in range(BOOTSTRAP):
        ycat = np.concatenate([g[rng.integers(0, len(g), len(g))] for g in groups])
        draws[b] = _ols_slope(xcat, ycat)
    tail = (1 - level) / 2 * 100
    return Interval(value, float(np.percentile(draws, tail)),
                    float(np.percentile(draws, 100 - tail)), reps, method, level)


def verdict(low: float, high: float, no_effect: float, expected_direction: int) -> str:
    """Verdict of an interval against the paper's expected side of `no_effect`.

    expected_direction +1: the paper says the quantity is above no_effect; -1: below.
    agrees/differs only when [low, high] excludes no_effect; NaN or missing -> not measured."""
    if expected_direction not in (1, -1):
        raise ValueError(f"expected_direction must be +1 or -1, not {expected_direction!r}")
    if not (_finite(low) and _finite(high) and _finite(no_effect)):
        return NOT_MEASURED
    low, high = float(low), float(high)
    if low > high:
        low, high = high, low
    if low <= no_effect <= high:
        return INCONCLUSIVE
    above = low > no_effect
    return AGREES if above == (expected_direction > 0) else DIFFERS


def interval_verdict(est: Interval, no_effect: float, expected_direction: int) -> str:
    """`verdict` of an Interval (its ends)."""
    return verdict(est.low, est.high, no_effect, expected_direction)


def reason(est: Interval, no_effect: float, expected_direction: int, quantity: str,
           fmt: str = ".3g") -> str:
    """One sentence computed from the numbers: the interval, and where it lies against no_effect."""
    v = interval_verdict(est, no_effect, expected_direction)
    side = "above" if expected_direction > 0 else "below"
    if v == NOT_MEASURED:
        if not _finite(est.value):
            return f"{quantity}: no usable repeats (NaN or missing inputs)"
        return (f"{quantity} = {est.value:{fmt}} from {est.n} repeat(s): fewer than "
                f"{MIN_REPEATS}, no interval")
    where = {INCONCLUSIVE: f"contains the no-effect value {no_effect:{fmt}}",
             AGREES: f"lies wholly {side} {no_effect:{fmt}}, as the paper expects",
             DIFFERS: f"lies wholly on the other side of {no_effect:{fmt}} from the paper's "
                      f"({side})"}[v]
    return f"{quantity} = {est.text(fmt)}; the interval {where}"


def summarize(df: pd.DataFrame, by: list[str], columns: str | list[str]) -> pd.DataFrame:
    """Per group of `by`: each column's median with <col>_ci_low/<col>_ci_high (order-statistic)
    and `repeats` (rows in the group), so a summary keeps the spread beside the median."""
    cols = [columns] if isinstance(columns, str) else list(columns)
    rows = []
    for key, grp in df.groupby(by, sort=True, dropna=False):
        keys = key if isinstance(key, tuple) else (key,)
        row: dict[str, object] = {**dict(zip(by, keys, strict=True)), "repeats": len(grp)}
        for col in cols:
            est = median_ci(grp[col])
            row.update({col: est.value, f"{col}_ci_low": est.low, f"{col}_ci_high": est.high})
        rows.append(row)
    return pd.DataFrame(rows)
