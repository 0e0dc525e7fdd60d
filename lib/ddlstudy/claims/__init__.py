"""Claims: the five papers' claims as data and the engine that judges them against records.

A paper's file (`claims/<paper>.py`) imports what it needs from here, one place: the records
(`Claim`, `Measurement`, `Records`), the per-run helpers and `register_claim`, and reads the
shared names (testbeds, chapter 99's columns, the emulated chapter 03 folder) as
`claims.TESTBED_HOST` etc. (`from ddlstudy import claims`).
"""

from ddlstudy.claims.base import (
    EMULATED_03,
    NOT_MEASURED,
    REPRODUCTION,
    SET_BY_CONFIG,
    TESTBED_EMULATED,
    TESTBED_HOST,
    TESTBED_NONE,
    UPDATE,
    Claim,
    Measurement,
    Records,
    by_testbed,
    emulated_testbed_label,
    host_or_emulated,
    per_run,
    ratio_of_runs,
    runs,
    side,
    values,
)
from ddlstudy.claims.registry import register_claim

__all__ = ["EMULATED_03", "NOT_MEASURED", "REPRODUCTION", "SET_BY_CONFIG", "TESTBED_EMULATED",
           "TESTBED_HOST", "TESTBED_NONE", "UPDATE", "Claim", "Measurement", "Records",
           "by_testbed", "emulated_testbed_label",
           "host_or_emulated", "per_run", "ratio_of_runs", "register_claim", "runs", "side",
           "values"]
