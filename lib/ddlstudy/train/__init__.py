"""Train: the data-parallel driver loop measured per step and rank, checkpoints, recovery, the
CLI."""
