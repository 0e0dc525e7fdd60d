"""Command-line benchmarks in the anchors' units: nccl-tests columns and Horovod-style img/sec."""
