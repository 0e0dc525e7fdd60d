"""Experiments: grids of configurations with interleaved repeats and resume; time-series monitors;
the convergence / batch-size grids of chapters 08-09."""
