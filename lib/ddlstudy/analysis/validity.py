"""Which runs measured the emulated cluster rather than this host's load.

Two flags, each a reason to leave a run out of a verdict:
- `cpu_bound` (written by the trainer, `train.results`): the cell asked more of the host than its
  calibrated aggregate link ceiling, so the host, not the emulated links, could set the pace.
- `replay_lag` (computed here from the run's own columns): under compute replay a worker sleeps
  the reference device's step time x the time dilation. Where nothing else happens inside the
  compute window (one worker, a strategy without servers: no gradient leaves the process), the
  measured compute time can exceed that sleep only by the host's own work and any wait for a
  CPU. A lag above REPLAY_LAG_MAX means the host, not the replayed device, set the step: such a
  run is the baseline of every speed-up, so a lagging one inflates them all.
Elsewhere (several workers, or a PS: hooks and pushes share the window) the lag is not judged.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddlstudy.strategies.registry import STRATEGIES

# The host may add up to 10 % to a replayed step before the device no longer sets its pace.
# results/reference on 2026-11-27: of the 80 runs where the lag is judged, 76 lag at most 0.002;
# the other 4 (chapter 03's AlexNet ring at 1 worker, 2026-11-26 07:35-07:42 UTC, 1-minute load
# ~13) lag 0.58-1.58. Any bound between those two groups leaves out the same runs.
REPLAY_LAG_MAX = 0.10


def replay_lag(df: pd.DataFrame) -> pd.Series:
    """Per row: compute_s / (replay_s x time_dilation) - 1 where it is judged (compute_mode
    'replay', one worker, a strategy without servers), else NaN. Records without those columns
    (compute_s, replay_s, compute_mode, workers, strategy): all NaN."""
    need = {"compute_s", "replay_s", "workers", "strategy", "compute_mode"}
    if df.empty or not need <= set(df):
        return pd.Series(np.nan, index=df.index, dtype=float)
    dilation = (df["time_dilation"].fillna(1.0) if "time_dilation" in df
                else pd.Series(1.0, index=df.index)).astype(float)
    replayed = pd.to_numeric(df["replay_s"], errors="coerce").where(
        df["compute_mode"].astype(str) == "replay")

    def alone(strategy: object) -> bool:
        spec = STRATEGIES.get(strategy) if isinstance(strategy, str) else None
        return spec is not None and not spec.needs_servers and not spec.colocated_servers

    judged = (df["workers"] == 1) & df["strategy"].map(alone) & (replayed > 0)
    lag = pd.to_numeric(df["compute_s"], errors="coerce") / (replayed * dilation) - 1
    return lag.where(judged)


def replay_lagged(df: pd.DataFrame) -> pd.Series:
    """Per row: True where the replay lag is judged and above REPLAY_LAG_MAX."""
    return replay_lag(df).fillna(0.0) > REPLAY_LAG_MAX


def host_paced(df: pd.DataFrame) -> pd.Series:
    """Per row: True where the host, not the emulated cluster, set the run's pace (`cpu_bound`
    or replay-lagged). The one filter verdicts, chapter 03's comparisons and the README's tables
    share (the step model lists cpu_bound cells as skipped, with the reason)."""
    # eq(True), as records.store.write_grid_summary: pandas will not fill a float column (every
    # value missing) with a bool
    bound = df["cpu_bound"].eq(True) if "cpu_bound" in df else pd.Series(False, index=df.index)
    return bound | replay_lagged(df)
