"""Train one configuration under torchrun or srun, without ipyparallel: every process is a rank.

    torchrun --nproc-per-node 2 -m ddlstudy.cli.torchrun --model mlp --strategy allreduce \\
        --workers 2 --steps 20 --out outputs/train/mlp-ring
    srun -N 2 --ntasks-per-node 4 python -m ddlstudy.cli.torchrun --strategy ps_sync \\
        --workers 7 --model resnet50 --out outputs/train/r50-ps        # MASTER_ADDR: see below

For users with a launcher of their own. The rank comes from torchrun's RANK, LOCAL_RANK,
WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT, or from Slurm's SLURM_PROCID,
SLURM_LOCALID, SLURM_NTASKS, SLURM_NTASKS_PER_NODE (or SLURM_TASKS_PER_NODE) and the first
host of SLURM_JOB_NODELIST (MASTER_ADDR, when set, wins; MASTER_PORT defaults to 29500). The
process group is gloo on CPU and `cpu:gloo,cuda:nccl` on CUDA (ddlstudy.collectives.device); a
side gloo group carries the Python objects the driver logic exchanges.

The launcher must start exactly workers + servers processes (a PS strategy's servers are the
last ranks). Every process runs the same driver logic as `python -m ddlstudy.train` on the
results all ranks gathered (`SpmdCluster`), so they agree on every chunk; rank 0 alone prints
and writes steps.csv, summary.csv, chunks.csv and meta.json, the same records. Emulated
networks (--network), --ipp-profile and fault injection / checkpoints (a launcher restarts its own
processes) are not offered here.

Imports neither ipyparallel nor pydantic: it runs where only torch, numpy, pandas and tqdm are.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import sys
from collections.abc import Callable, Mapping
from typing import Any

from ddlstudy.cli.train import _one_of, _OneLineParser, add_config_arguments, config_from_args
from ddlstudy.collectives.registry import ALGORITHMS
from ddlstudy.strategies import STRATEGIES

DEFAULT_PORT = 29500
LAUNCHER_NOTE = "launched by torchrun/srun (ddlstudy.cli.torchrun): no emulated network"


def first_host(nodelist: str) -> str:
    """The first host of a Slurm node list: 'gpu[03-05,7],cpu1' -> 'gpu03'."""
    head = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if not head:
        raise ValueError(f"cannot read a host from the Slurm node list {nodelist!r}")
    prefix, ranges = head.group(1), head.group(2)
    if not ranges:
        return prefix
    return prefix + ranges.split(",")[0].split("-")[0]


def _tasks_on_this_node(env: Mapping[str, str]) -> int:
    """SLURM_NTASKS_PER_NODE, else the first count of SLURM_TASKS_PER_NODE ('4(x2),3' -> 4)."""
    if env.get("SLURM_NTASKS_PER_NODE"):
        return int(env["SLURM_NTASKS_PER_NODE"])
    per_node = env.get("SLURM_TASKS_PER_NODE", "")
    found = re.match(r"(\d+)", per_node)
    return int(found.group(1)) if found else int(env.get("SLURM_NTASKS", "1"))


def launch_env(env: Mapping[str, str]) -> dict[str, Any]:
    """rank, local_rank, world_size, local_world_size, master_addr, master_port, launcher from
    torchrun's variables, else Slurm's (srun), else a single process on loopback."""
    if "RANK" in env and "WORLD_SIZE" in env:
        world = int(env["WORLD_SIZE"])
        return {"rank": int(env["RANK"]), "local_rank": int(env.get("LOCAL_RANK", 0)),
                "world_size": world,
                "local_world_size": int(env.get("LOCAL_WORLD_SIZE", world)),
                "master_addr": env.get("MASTER_ADDR", "127.0.0.1"),
                "master_port": int(env.get("MASTER_PORT", DEFAULT_PORT)), "launcher": "torchrun"}
    if "SLURM_PROCID" in env:
        nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
        master = env.get("MASTER_ADDR") or (first_host(nodelist) if nodelist else "")
        if not master:
            raise ValueError("srun: set MASTER_ADDR (no SLURM_JOB_NODELIST to take it from)")
        return {"rank": int(env["SLURM_PROCID"]), "local_rank": int(env.get("SLURM_LOCALID", 0)),
                "world_size": int(env.get("SLURM_NTASKS", 1)),
                "local_world_size": _tasks_on_this_node(env), "master_addr": master,
                "master_port": int(env.get("MASTER_PORT", DEFAULT_PORT)), "launcher": "srun"}
    return {"rank": 0, "local_rank": 0, "world_size": 1, "local_world_size": 1,
            "master_addr": env.get("MASTER_ADDR", "127.0.0.1"),
            "master_port": int(env.get("MASTER_PORT", DEFAULT_PORT)), "launcher": "none"}


class SpmdCluster:
    """The cluster interface `ddlstudy.train.trainer.train` drives, for ranks that all run the
    driver logic themselves (SPMD): `run` calls fn here and gathers every rank's result over a
    gloo group, so each rank sees the same list and takes the same decisions; `run_rank` runs
    fn on one rank and broadcasts its result. No restarts: `can_restart` is False."""

    can_restart = False
    emulated_network = None

    def __init__(self, rank: int, world_size: int, infos: list[dict[str, Any]],
                 collective_timeout_s: float, objects: Any, network: dict[str, Any]) -> None:
        self.rank, self.world_size, self.infos = rank, world_size, infos
        self.collective_timeout_s = collective_timeout_s
        self.objects = objects  # the gloo group Python objects travel on
        self.network_info = network

    @property
    def size(self) -> int:
        return self.world_size

    def info(self) -> list[dict[str, Any]]:
        return list(self.infos)

    def init_process_group(self, world_size: int | None = None, backend: str | None = None,
                           timeout_s: float | None = None) -> None:
        """The launcher made the group: only its own size is possible."""
        if world_size not in (None, self.world_size):
            raise ValueError(f"the launcher started {self.world_size} processes, the run needs "
                             f"{world_size}: start workers + servers processes")

    def run(self, fn: Callable[..., Any], *args: Any, world_size: int | None = None,
            timeout: float | None = None, **kwargs: Any) -> list[Any]:
        """fn on every rank at once; every rank gets all results in rank order."""
        import torch.distributed as dist

        self.init_process_group(world_size)
        result = fn(*args, **kwargs)
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, result, group=self.objects)
        return out

    def run_rank(self, rank: int, fn: Callable[..., Any], *args: Any,
                 timeout: float | None = None, **kwargs: Any) -> Any:
        """fn on `rank` alone; every rank gets its result."""
        import torch.distributed as dist

        box = [fn(*args, **kwargs) if self.rank == rank else None]
        dist.broadcast_object_list(box, src=rank, group=self.objects)
        return box[0]

    def submit(self, fn: Callable[..., Any], *args: Any, world_size: int | None = None,
               **kwargs: Any) -> list[Any]:
        """Runs at once (SPMD has no background engines); `wait` hands the results back."""
        return self.run(fn, *args, world_size=world_size, **kwargs)

    def wait(self, pending: list[Any], timeout: float | None = None) -> list[Any]:
        return pending

    def dead_ranks(self) -> list[int]:
        return []


def start(device: str, timeout_s: float = 120.0,
          env: Mapping[str, str] | None = None) -> SpmdCluster:
    """Join the launcher's process group on `device` ('auto': the local CUDA device if any):
    backend from ddlstudy.collectives.device.backend_for, a gloo group beside it for objects."""
    import torch
    import torch.distributed as dist

    from ddlstudy.cluster.engines import _ENGINE, _engine_info
    from ddlstudy.collectives.device import backend_for

    where = launch_env(os.environ if env is None else env)
    rank, local_rank = where["rank"], where["local_rank"]
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        if not torch.cuda.is_available():
            raise ValueError("--device cuda: no CUDA device is visible to this process")
        device = f"cuda:{local_rank % torch.cuda.device_count()}"
        torch.cuda.set_device(device)
    else:  # the local ranks share the cores
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        torch.set_num_threads(max(1, (cores or 1) // max(1, where["local_world_size"])))
    _ENGINE.update(rank=rank, local_rank=local_rank, device=device)  # engine_device() reads it
    os.environ.setdefault("MASTER_ADDR", where["master_addr"])
    os.environ.setdefault("MASTER_PORT", str(where["master_port"]))
    timeout = dt.timedelta(seconds=timeout_s)
    backend = backend_for(device)
    dist.init_process_group(backend, init_method="env://", rank=rank,
                            world_size=where["world_size"], timeout=timeout)
    objects = dist.new_group(backend="gloo", timeout=timeout)
    mine = dict(_engine_info(), launcher=where["launcher"], backend=backend)
    infos: list[Any] = [None] * where["world_size"]
    dist.all_gather_object(infos, mine, group=objects)
    network = {"profile": "none", "scale": None, "latency_emulated": False,
               "note": LAUNCHER_NOTE, "launcher": where["launcher"], "backend": backend}
    return SpmdCluster(rank, where["world_size"], infos, timeout_s, objects, network)


def _parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(prog="python -m ddlstudy.cli.torchrun", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strategy", default="allreduce", type=_one_of(STRATEGIES, "strategy"),
                        metavar="STRATEGY", help=f"one of {', '.join(STRATEGIES)}")
    parser.add_argument("--algorithm", default="ring", type=_one_of(ALGORITHMS, "algorithm"),
                        metavar="ALGORITHM", help=f"allreduce: one of {', '.join(ALGORITHMS)}")
    add_config_arguments(parser)
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"],
                        help="auto: the local CUDA device (LOCAL_RANK) when there is one")
    parser.add_argument("--out", default=None, help="rank 0 writes steps.csv, summary.csv, "
                        "meta.json here")
    parser.add_argument("--no-progress", dest="progress", action="store_false")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.profile:
        parser.error("--ipp-profile connects to ipyparallel engines; under torchrun/srun the "
                     "launcher's processes are the ranks: drop --ipp-profile")
    if args.checkpoint_every is not None or args.fail_worker is not None:
        parser.error("checkpoints and fault injection need ddlstudy's own engines (python -m "
                     "ddlstudy.train); under torchrun/srun restart with the launcher")
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # before anything initializes CUDA
    try:
        config = config_from_args(args, strategy=args.strategy, algorithm=args.algorithm)
        config.validate()
        where = launch_env(os.environ)
    except ValueError as err:
        parser.error(str(err))
    if where["world_size"] != config.world_size:
        parser.error(f"{config.strategy} with {config.workers} worker(s) and "
                     f"{config.n_servers} server(s) needs {config.world_size} processes; the "
                     f"launcher started {where['world_size']} (--nproc-per-node / --ntasks)")
    from ddlstudy.train.trainer import train

    cluster = start(args.device, args.timeout)
    lead = cluster.rank == 0
    try:
        if lead:
            print(f"Model: {config.model}  Strategy: {config.label}")
            print(f"Launcher: {where['launcher']}, {cluster.world_size} rank(s), backend "
                  f"{cluster.network_info['backend']}, device {cluster.infos[0]['device']} "
                  f"({cluster.infos[0]['device_name']})", flush=True)
        result = train(cluster, config, out_dir=args.out if lead else None,
                       progress=args.progress and lead,
                       announce=(lambda line: print(line, flush=True)) if lead else None)
    except (TimeoutError, RuntimeError, ValueError) as err:
        print(f"python -m ddlstudy.cli.torchrun: rank {cluster.rank}: run failed: {err}",
              file=sys.stderr)
        return 1
    finally:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
    if lead:
        for line in result.horovod_lines():
            print(line)
        if len(result.evals):
            print(f"Test accuracy: {result.row['test_accuracy']:.4f}")
        if result.out_dir is not None:
            print(f"Wrote {result.out_dir}/steps.csv, summary.csv, meta.json")
    return 0


if __name__ == "__main__":
    from ddlstudy.cli.torchrun import main as _main
    from ddlstudy.host import entry

    raise SystemExit(entry.run(_main))
