"""The library's own all-reduce (torch.distributed, gloo on CPU): the reference, no ddlstudy code.

Its bytes are not observable from Python, so they are reported as the analytic ring count
(`Traffic.counted=False`); its cost terms are the ring's (gloo's CPU all_reduce is a ring at
these sizes).
"""

from __future__ import annotations

from ddlstudy.collectives.registry import Algorithm, register_algorithm
from ddlstudy.collectives.ring import ring_terms, ring_traffic

REFERENCE = register_algorithm(Algorithm("reference", None, ring_traffic, ring_terms,
                                         "torch.distributed.all_reduce"))
