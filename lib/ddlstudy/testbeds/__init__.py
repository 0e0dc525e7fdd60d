"""Testbeds: each paper's devices, GPUs per node, links and framework settings as data, today's
testbeds beside them, and published measurements to validate the step model against
(`ddlstudy.testbeds.catalog`; README.md in this folder gives the sources)."""
