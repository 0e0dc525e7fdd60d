"""Workload: what each worker computes. The model and data-set catalog, the networks, data
readers, and compute replay tables (a reference device's step time a worker waits instead of
computing)."""
