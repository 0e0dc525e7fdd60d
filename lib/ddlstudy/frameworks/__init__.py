"""The frameworks the papers measured, on the same engines: Horovod and TensorFlow.

- `horovod` (frameworks.horovod): a Strategy under the torch trainer; Horovod's gloo ring
  through hvd.DistributedOptimizer, started from the engines via Horovod's RendezvousServer.
  Built by scripts/build_horovod.sh (`make setup`).
- `tf_allreduce`, `tf_ps_sync`, `tf_ps_async` (frameworks.tf_strategies): TF's own
  MultiWorkerMirroredStrategy and ParameterServerStrategy with their own driver, writing the
  trainer's records; Keras twins of the torch models in frameworks.keras_models.

Registration is by name in ddlstudy.strategies (STRATEGIES, PS_STRATEGIES), which is what
params, the CLI and TrainConfig validate against; `trainer.train` hands TF runs to
`tf_strategies.train`.
"""

from __future__ import annotations

FRAMEWORK_STRATEGIES = ("horovod", "tf_ps_sync", "tf_ps_async", "tf_allreduce")
TF_STRATEGIES = ("tf_ps_sync", "tf_ps_async", "tf_allreduce")
TF_PS_STRATEGIES = ("tf_ps_sync", "tf_ps_async")


def missing(strategy: str) -> str | None:
    """None when the strategy's framework is installed here, else one line naming the fix.

    Checked by module spec (no import: tensorflow takes seconds and memory in the driver);
    Horovod's compiled torch extension must be there, not just its Python package.
    """
    from importlib.util import find_spec

    def absent(module: str) -> bool:
        try:
            return find_spec(module) is None
        except ImportError:  # the parent package is missing
            return True

    if strategy == "horovod" and absent("horovod.torch.mpi_lib_v2"):
        return ("horovod is not installed (or built without torch); run `make setup` "
                "(scripts/build_horovod.sh builds Horovod 0.28.1 into wheels/)")
    if strategy in TF_STRATEGIES and absent("tensorflow"):
        return (f"{strategy} needs tensorflow, which is not installed; run `make setup` "
                "(it installs tensorflow-cpu, pinned in pyproject.toml)")
    return None


def host_ip() -> str:
    """This engine's address, as ddlstudy.cluster reports it (one implementation, there)."""
    from ddlstudy.cluster import host_ip as cluster_host_ip

    return cluster_host_ip()


def free_port() -> int:
    """A TCP port free right now on this engine (for a TF task's server)."""
    import socket
    from contextlib import closing

    with closing(socket.socket()) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])
