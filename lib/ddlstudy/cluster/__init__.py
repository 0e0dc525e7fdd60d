"""Cluster: ipyparallel engines, one rank each; process groups, signals and cleanup of what a run
started."""
