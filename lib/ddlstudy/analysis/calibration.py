"""The verdict machinery's calibration: how often `inference.verdict` decides a claim with no
effect behind it (goal <= alpha), and how often it confirms one at its stated margins (power),
on synthetic lognormal runs with the run-to-run spread the records show (`run_spread`).

`python -m ddlstudy.conclusions calibrate` (or `main(["calibrate", ...])`) prints a table whose
last two lines are `false decisions under no effect: 0.NNN` and `power at the stated margins:
0.NN`. Vectorised: the same interval and decision code as `verdict`, on all trials at once.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ddlstudy.analysis.inference import (
    AGREES,
    ALPHA,
    DESIGNS,
    DIFFERS,
    KINDS,
    METHODS,
    MIN_RUNS,
    SEED,
    Values,
    _decide,
    _exp,
    _interval,
    _label,
    _level,
    _needs,
    _positive,
)

DEFAULT_CV = 0.06        # 6 % run-to-run spread (pass the records' value from `run_spread`)
DEFAULT_EFFECT = 1.17    # direction claims: smallest stated effect, Wang (NCHC)'s "17 % faster"
DEFAULT_MARGIN = 0.10    # equivalence / magnitude: within 10 % either way ("the same", "89 %")
DEFAULT_TARGET = 0.89    # magnitude claims: a stated number (Wang's 89 % efficiency)
DEFAULT_TRIALS = 20000   # Monte Carlo standard error of a 0.05 rate: 0.0015


@dataclass(frozen=True)
class Scenario:
    """One calibration scenario: a claim kind, the true value, and how often each verdict came."""

    kind: str
    truth: str
    true_value: float
    agrees: float
    differs: float
    inconclusive: float
    false_rate: float  # how often the verdict here is wrong (every decided verdict counted)
    power: float       # how often it is the right "agrees" (NaN where agreeing is wrong)


@dataclass(frozen=True)
class Calibration:
    """`calibrate`'s result: every scenario, the worst false-decision rate and the least power."""

    cv: float
    n_runs: int
    trials: int
    seed: int
    method: str
    design: str
    min_runs: int
    alpha: float
    scenarios: tuple[Scenario, ...]
    false_decisions: float
    power: float

    @property
    def mc_se(self) -> float:
        """Monte Carlo standard error of a rate of `alpha` estimated from `trials` draws."""
        return math.sqrt(self.alpha * (1 - self.alpha) / self.trials)


# ---------------------------------------------------------------------------------------------
# Spread and calibration


def cv_to_log_sd(cv: float) -> float:
    """Log-scale sd of a lognormal with coefficient of variation cv: sqrt(log(1 + cv^2))."""
    if not cv > 0:
        raise ValueError(f"cv must be > 0, got {cv}")
    return math.sqrt(math.log1p(cv * cv))


def run_spread(values_by_cell: Mapping[object, Values] | Iterable[Values]) -> float:
    """Pooled run-to-run coefficient of variation from cells measured in repeated runs.

    In: per cell (a configuration: strategy, workers, model, ...) its independent runs' values,
    as a mapping or an iterable of sequences. Cells with < 2 finite values add nothing. Out: the
    CV of a lognormal with the pooled log-sd, sum((n_i - 1) s_i^2) / sum(n_i - 1): it uses every
    degree of freedom, where the median of per-cell CVs is erratic at 2-3 runs per cell. Raises
    ValueError when no cell has 2 runs, or a value is <= 0.
    """
    cells = values_by_cell.values() if isinstance(values_by_cell, Mapping) else values_by_cell
    ss, df = 0.0, 0
    for cell in cells:
        y = np.log(_positive(cell, "cell"))
        if len(y) >= 2:
            ss += float(np.sum((y - y.mean()) ** 2))
            df += len(y) - 1
    if df == 0:
        raise ValueError("run_spread needs at least one cell with >= 2 runs")
    return math.sqrt(math.expm1(ss / df))


def _draws(rng: np.random.Generator, truth: float, design: str, n: int, trials: int,
           sigma: float) -> tuple[np.ndarray, np.ndarray | None]:
    """Synthetic log runs whose true ratio (or value) is `truth`: (log a, log b or None)."""
    ya = math.log(truth) + rng.normal(0.0, sigma, (trials, n))
    if design == "single":
        return ya, None
    return ya, rng.normal(0.0, sigma, (trials, n))


def _rates(codes: np.ndarray) -> tuple[float, float, float]:
    return float(np.mean(codes == 1)), float(np.mean(codes == -1)), float(np.mean(codes == 0))


def _simulate(rng: np.random.Generator, truth: float, kind: str, no_effect: float,
              margin_low: float, margin_high: float, *, design: str, method: str, n: int,
              trials: int, sigma: float, min_runs: int, alpha: float,
              seed: int) -> tuple[float, float, float]:
    """(agrees, differs, inconclusive) rates of `verdict`'s rules over synthetic trials."""
    level = _level(kind, alpha)
    if n < _needs(method, level, min_runs):
        return 0.0, 0.0, 1.0
    ya, yb = _draws(rng, truth, design, n, trials, sigma)
    chunk = trials if method == "t" or method == "median" else 250  # bootstrap memory
    codes = []
    for s in range(0, trials, chunk):
        part_b = None if yb is None else yb[s:s + chunk]
        _, low, high, cov, _ = _exp(_interval(ya[s:s + chunk], part_b, design, method, level,
                                              seed + s))
        code = _decide(low, high, kind, no_effect, margin_low, margin_high, "greater")
        ok = np.isfinite(low) & np.isfinite(high) & (high > low) & (cov >= level - 1e-12)
        codes.append(np.where(ok, code, 0))
    return _rates(np.concatenate(codes))


def calibrate(cv: float = DEFAULT_CV, n_runs: int = MIN_RUNS, trials: int = DEFAULT_TRIALS,
              seed: int = SEED, *, effect: float = DEFAULT_EFFECT,
              margin: float = DEFAULT_MARGIN, target: float = DEFAULT_TARGET,
              method: str = "t", design: str = "ratio", min_runs: int = MIN_RUNS,
              alpha: float = ALPHA, kinds: Sequence[str] = KINDS) -> Calibration:
    """False-decision rate and power of the verdict rules on synthetic lognormal runs.

    In: run-to-run `cv`, `n_runs` per arm, `trials` Monte Carlo draws per scenario, `seed`; the
    claims' margins: `effect` (a direction claim's smallest stated ratio, > 1), `margin`
    (equivalence: [1/(1+m), 1+m] around 1; magnitude: [target(1-m), target(1+m)]); `method`,
    `design` ('ratio' = two independent arms, 'paired', 'single') as `verdict` takes them.
    Scenarios: direction at no effect (any decision is false) and at `effect` (power = agrees);
    equivalence/magnitude with the truth on each margin (agrees is false: the TOST size) and at
    the centre (power = agrees; differs is false); on a margin "differs" (about alpha too) is
    not counted, the truth being on the boundary. Out: `Calibration` with every scenario,
    `false_decisions` = the largest false rate, `power` = the smallest power. The t rules sit
    at or just below alpha by construction, so with many runs (Welch df near exact) the largest
    of several Monte Carlo rates can read a little above 0.05 (`Calibration.mc_se` says how
    much is noise). Raises ValueError for a bad argument.
    """
    if n_runs < 1 or trials < 1:
        raise ValueError(f"n_runs and trials must be >= 1, got {n_runs}, {trials}")
    if not effect > 1:
        raise ValueError(f"effect must be a ratio > 1, got {effect}")
    if not 0 < margin < 1:
        raise ValueError(f"margin must lie in (0, 1), got {margin}")
    if design not in DESIGNS or method not in METHODS:
        raise ValueError(f"design in {DESIGNS}, method in {METHODS}; got {design!r}, {method!r}")
    if method == "median" and design == "ratio":
        raise ValueError("method 'median' needs design 'single' or 'paired'")
    unknown = set(kinds) - set(KINDS)
    if unknown or not kinds:
        raise ValueError(f"kinds must be a non-empty subset of {KINDS}, got {kinds}")
    sigma = cv_to_log_sd(cv)
    rng = np.random.default_rng(seed)
    common = dict(design=design, method=method, n=n_runs, trials=trials, sigma=sigma,
                  min_runs=min_runs, alpha=alpha, seed=seed)
    out: list[Scenario] = []

    def add(kind: str, truth: str, value: float, centre: float, lo: float, hi: float,
            right: str) -> None:
        """Simulate one truth; `right` is the correct verdict there ('' = none is: no effect)."""
        agrees, differs, inc = _simulate(rng, value, kind, centre, lo, hi, **common)
        false = {AGREES: differs, DIFFERS: agrees, "": agrees + differs}[right]
        power = agrees if right == AGREES else math.nan
        out.append(Scenario(kind, truth, value, agrees, differs, inc, false, power))

    for kind in kinds:
        if kind == "direction":
            add(kind, "no effect", 1.0, 1.0, math.nan, math.nan, "")
            add(kind, "stated effect", effect, 1.0, math.nan, math.nan, AGREES)
            continue
        centre, lo, hi = ((1.0, 1 / (1 + margin), 1 + margin) if kind == "equivalence"
                          else (target, target * (1 - margin), target * (1 + margin)))
        add(kind, "lower margin", lo, centre, lo, hi, DIFFERS)
        add(kind, "upper margin", hi, centre, lo, hi, DIFFERS)
        add(kind, "stated value" if kind == "magnitude" else "no effect", centre, centre, lo,
            hi, AGREES)
    false = max(s.false_rate for s in out)
    power = min(s.power for s in out if math.isfinite(s.power))
    return Calibration(cv, n_runs, trials, seed, method, design, min_runs, alpha, tuple(out),
                       false, power)


def report_lines(cal: Calibration) -> list[str]:
    """`calibrate`'s printout; the last two lines are the ones the report and CI read."""
    name = _label(cal.method, cal.design)[1] if (cal.method, cal.design) != ("median", "ratio") \
        else cal.method
    lines = [f"calibration: run-to-run cv {cal.cv:.3f} (log-sd {cv_to_log_sd(cal.cv):.4f}), "
             f"{cal.n_runs} runs per arm (verdicts need {cal.min_runs}), {cal.trials} trials, "
             f"seed {cal.seed}, alpha {cal.alpha}, {name}",
             f"{'kind':<12} {'truth':<14} {'value':>7} {'agrees':>7} {'differs':>8} "
             f"{'inconcl.':>8}  rates"]
    for s in cal.scenarios:
        power = f", power {s.power:.3f}" if math.isfinite(s.power) else ""
        lines.append(f"{s.kind:<12} {s.truth:<14} {s.true_value:>7.4g} {s.agrees:>7.3f} "
                     f"{s.differs:>8.3f} {s.inconclusive:>8.3f}  false {s.false_rate:.3f}{power}")
    lines += [f"Monte Carlo standard error of a {cal.alpha} rate: {cal.mc_se:.4f}",
              f"false decisions under no effect: {cal.false_decisions:.3f}",
              f"power at the stated margins: {cal.power:.2f}"]
    return lines


def add_calibrate_arguments(parser: argparse.ArgumentParser) -> None:
    """The `calibrate` options, for a parent command that exposes this one."""
    parser.add_argument("--cv", type=float, default=DEFAULT_CV,
                        help="run-to-run coefficient of variation (default %(default)s = 6 %%)")
    parser.add_argument("--runs", type=int, default=MIN_RUNS, help="runs per arm")
    parser.add_argument("--trials", type=int, default=DEFAULT_TRIALS)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--effect", type=float, default=DEFAULT_EFFECT,
                        help="direction claims' smallest stated ratio (default 1.17)")
    parser.add_argument("--margin", type=float, default=DEFAULT_MARGIN,
                        help="equivalence/magnitude margin, relative (default 0.10)")
    parser.add_argument("--min-runs", type=int, default=MIN_RUNS,
                        help="runs a verdict needs (default 5)")
    parser.add_argument("--method", choices=METHODS, default="t")
    parser.add_argument("--design", choices=DESIGNS, default="ratio")


def run_calibrate(args: argparse.Namespace) -> int:
    """Print `calibrate`'s report for parsed options; exit status 0 (the numbers are the result)."""
    cal = calibrate(args.cv, args.runs, args.trials, args.seed, effect=args.effect,
                    margin=args.margin, method=args.method, design=args.design,
                    min_runs=args.min_runs)
    print("\n".join(report_lines(cal)))
    return 0


def main(argv: list[str] | None = None) -> int:
    """`calibrate [--cv X] [--runs N] [--trials T] [--seed S] ...`: print the calibration."""
    parser = argparse.ArgumentParser(prog="python -m ddlstudy.analysis.calibration",
                                     description="Calibrate the verdict rules on synthetic runs.")
    sub = parser.add_subparsers(dest="command", required=True)
    add_calibrate_arguments(sub.add_parser(
        "calibrate", help="false decisions under no effect and power at the stated margins"))
    args = parser.parse_args(argv)
    try:
        return run_calibrate(args)
    except ValueError as e:
        parser.error(str(e))
        return 2  # unreachable: parser.error exits


if __name__ == "__main__":
    from ddlstudy.host import entry
    raise SystemExit(entry.run(main))
