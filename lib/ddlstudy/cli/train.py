"""Train one configuration on local ipyparallel engines (or a running profile), Horovod-style.

    python -m ddlstudy.train --model resnet50 --strategy allreduce --algorithm ring \\
        --workers 4 --batch-size 32 --steps 50 --dataset synthetic --out outputs/train/r50

Starts workers + servers engines (PS strategies need the extra server ranks), prints
`Iter #k: X img/sec per worker` per chunk of steps under a progress bar and the final
`Img/sec per worker` / `Total img/sec` lines, and writes steps.csv, summary.csv and meta.json.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from ddlstudy.cluster.launchers import LaunchSpec, add_launch_arguments, engine_count_problem
from ddlstudy.collectives.registry import ALGORITHMS
from ddlstudy.records.lock import OutputFolderError, OutputLock, _printable
from ddlstudy.strategies import STRATEGIES
from ddlstudy.workload.catalog import DATASETS, MODELS, SHAPES

if TYPE_CHECKING:  # torch loads with the trainer, only once every flag is checked: a busy
    from ddlstudy.train.config import TrainConfig  # folder or a bad flag is refused in < 1 s


class _OneLineParser(argparse.ArgumentParser):
    """Bad flags: one `error:` line and exit 2 (argparse would print the usage too)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {_printable(message, 600)} (see --help)\n")


def _one_of(registry: Any, what: str) -> Callable[[str], str]:
    """An argparse type for a registry's names: a bad one is one line naming the valid ones."""
    def check(text: str) -> str:
        if text not in registry:
            raise argparse.ArgumentTypeError(f"unknown {what} {text!r}; valid: "
                                             f"{', '.join(registry)}")
        return text

    return check


def _straggler(text: str) -> tuple[int, float]:
    """--straggler RANK:FACTOR (e.g. 1:3); RANK alone means factor 1 (use --straggler-delay)."""
    rank, _, factor = text.partition(":")
    try:
        return int(rank), float(factor or 1.0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected RANK:FACTOR such as 1:3, got {text!r}"
                                         ) from None


def _bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got {text!r}")


def add_config_arguments(parser: argparse.ArgumentParser, defaults: TrainConfig | None = None
                         ) -> None:
    """The TrainConfig flags (shared with `python -m ddlstudy.bench train`)."""
    from ddlstudy.train.config import TrainConfig

    d = defaults or TrainConfig()
    a = parser.add_argument
    # Choices come from the registries (ddlstudy.workload.catalog), read when the parser is built.
    a("--model", default=d.model, type=_one_of(MODELS, "model"), choices=list(MODELS),
      metavar="MODEL",
      help=f"one of {', '.join(MODELS)} (default {d.model})")
    a("--shape", default=d.shape, type=_one_of(SHAPES, "shape"), choices=list(SHAPES),
      metavar="SHAPE",
      help=f"input shape: {', '.join(SHAPES)} (default: the data set's own; synthetic: cifar)")
    a("--dataset", default=d.dataset, type=_one_of(DATASETS, "dataset"),
      choices=list(DATASETS), metavar="DATASET",
      help=f"one of {', '.join(DATASETS)} (default {d.dataset})")
    a("--data-root", default=d.data_root, help="folder with the data files (make data)")
    a("--no-verify-data", dest="verify_data", action="store_false", help="load your own "
      "MNIST/Fashion-MNIST/CIFAR-format files without checking the known checksums")
    a("--workers", type=int, default=d.workers, help="data-parallel workers")
    a("--servers", type=int, default=d.servers, help="PS server processes (default 1; "
      "ps_sharded 2)")
    a("--batch-size", type=int, default=d.batch_size, help="per worker")
    a("--steps", type=int, default=d.steps, help="timed steps")
    a("--warmup-steps", type=int, default=d.warmup_steps,
      help="untimed steps first (raised to the strategy's own minimum where it declares one: "
      "PowerSGD's plain all-reduce steps)")
    a("--epochs", type=int, default=d.epochs, help="train this many epochs instead of --steps "
      "(test accuracy after each)")
    a("--no-eval", dest="eval", action="store_false", help="skip test accuracy")
    a("--lr", type=float, default=d.lr, help="SGD learning rate (Shi 2019: 1e-4)")
    a("--momentum", type=float, default=d.momentum)
    a("--bucket-mb", type=float, default=d.bucket_mb, help="all-reduce / DDP bucket size")
    a("--overlap", type=_bool, default=d.overlap, help="allreduce: overlap buckets with "
      "backward (true/false)")
    a("--dtype", default=d.dtype, choices=["float32", "float64"])
    a("--seed", type=int, default=d.seed)
    a("--hidden", type=int, default=None, help="mlp: width of the second hidden layer")
    a("--ipp-profile", dest="profile", default=None,
      help="connect to a running ipyparallel profile instead of starting local engines")
    a("--timeout", type=float, default=120.0, help="seconds any one communication may block")
    a("--compute", default=d.compute, choices=["real", "replay"], help="real: forward + "
      "backward; replay: wait the reference device's time instead (default real)")
    a("--checkpoint-every", type=int, default=d.checkpoint_every, help="checkpoint every N "
      "steps into OUT/checkpoints (atomic); a rerun with the same --out resumes from it")
    a("--fail-worker", type=int, default=d.fail_worker, help="fault injection: this worker "
      "rank's engine SIGKILLs itself at --fail-at-step; the run recovers (chapter 10)")
    a("--fail-at-step", type=int, default=d.fail_at_step, help="step (from 0, warm-up "
      "included) at whose start --fail-worker dies")
    a("--straggler", type=_straggler, default=None, metavar="RANK:FACTOR",
      help="slow worker RANK down FACTOR x (1-100; replay: FACTOR x the reference wait)")
    a("--straggler-delay", type=float, default=d.straggler_delay_s, metavar="SECONDS",
      help="with --straggler: also wait this long at the start of each of its steps")
    a("--replay-source", default=d.replay_source, help="with --compute replay: measured (this "
      "host), gpu (the stored H100 table) or a CSV path (default measured)")


def add_network_arguments(parser: argparse.ArgumentParser) -> None:
    """--network / --scale: the emulated cluster network (ddlstudy.network.emulated.netem), as in
    params."""
    parser.add_argument("--network", default="none", help="none (local engines) or an emulated "
                        "link profile: 1GbE, 10GbE, 25GbE, IB-EDR (needs root)")
    parser.add_argument("--scale", type=float, default=None, help="emulated rate = profile rate "
                        "x scale (default: the profile's calibrated scale, see netem)")


def add_node_arguments(parser: argparse.ArgumentParser) -> None:
    """--gpus-per-node / --latency: nodes of several GPUs and emulated per-message latency on the
    emulated network (ddlstudy.network.emulated.nodes, .latency)."""
    parser.add_argument("--gpus-per-node", type=int, default=1, help="engines per emulated node: "
                        "they share the node's shaped link and talk inside the node over its "
                        "loopback, unshaped (needs --network; default 1)")
    parser.add_argument("--latency", action="store_true", help="emulate the profile's one-way "
                        "latency x 1/scale per inter-node message, as a sender-side delay in "
                        "the transport (needs --network)")


def check_node_args(args: argparse.Namespace) -> str | None:
    """None when --gpus-per-node / --latency can be honoured, else the one-line problem."""
    from ddlstudy.network.emulated.nodes import MAX_GPUS_PER_NODE

    k = getattr(args, "gpus_per_node", 1)
    if not 1 <= k <= MAX_GPUS_PER_NODE:
        return f"--gpus-per-node must be in 1..{MAX_GPUS_PER_NODE}, got {k}"
    if (k > 1 or getattr(args, "latency", False)) and args.network == "none":
        return "--gpus-per-node > 1 and --latency need an emulated --network (e.g. 10GbE)"
    return None


def check_network_args(args: argparse.Namespace) -> str | None:
    """None when --network/--scale/--ipp-profile can be honoured here, else the one-line problem."""
    from ddlstudy.network.emulated import netem

    if args.network == "none":
        return "--scale applies only with --network" if args.scale is not None else None
    if args.network not in netem.PROFILES:
        return (f"unknown --network {args.network!r}; choose none or one of "
                f"{', '.join(netem.PROFILES)}")
    from ddlstudy.network.profiles import MIN_SCALE

    if args.scale is not None and not MIN_SCALE <= args.scale <= 1:
        return (f"--scale must be in [{MIN_SCALE:g}, 1] (the emulation's slowest rate is 1GbE x "
                f"{MIN_SCALE:g}), got {args.scale:g}")
    if getattr(args, "profile", None):
        return "--network starts local engines in namespaces; drop --ipp-profile"
    ok, why = netem.available()
    if not ok:
        return f"--network {args.network} cannot be emulated here: {why}; run as root or drop " \
               "--network"
    return None


def check_fault_args(args: argparse.Namespace, config: TrainConfig) -> str | None:
    """The fault options' one-line refusal before any engine or namespace starts: a sync
    strategy recovers on fresh engines, which only a local cluster can start."""
    from ddlstudy.train.config import continues_without_dead, fault_tolerant

    launcher = getattr(args, "launcher", "local")
    remote = args.network != "none" or getattr(args, "profile", None) or launcher != "local"
    if not remote or not fault_tolerant(config) or continues_without_dead(config):
        return None
    where = (f"--network {args.network}" if args.network != "none" else
             f"--launcher {launcher}" if launcher != "local" else "--ipp-profile")
    return (f"{config.strategy} recovers from a dead worker on fresh engines, which only local "
            f"engines without an emulated network can start: drop {where}, or --fail-worker / "
            "--checkpoint-every (ps_async goes on without restarting)")


def check_launch_args(args: argparse.Namespace, config: TrainConfig
                      ) -> tuple[LaunchSpec | None, TrainConfig, str | None]:
    """--launcher/--hosts/--ifname/... through params' bounded `cluster:` schema, before
    anything starts: (the launch, the config the engines get, None) or (None, config, the
    one-line problem). Launched on other hosts, --data-root is sent as the engines resolve it
    (LaunchSpec.engine_path: relative to each engine's project root)."""
    import shlex

    from ddlstudy.cluster.launchers import LaunchError, env_from_args
    from ddlstudy.config.bounds import ParamsError

    if args.launcher == "local" and not any(
            getattr(args, k) for k in ("hosts", "ifname", "controller_ip", "remote_python",
                                       "remote_root", "ssh_args", "launcher_args", "env")):
        return None, config, None
    try:
        from ddlstudy.config.params import ClusterParams

        params = ClusterParams.checked(
            launcher=args.launcher, workers=config.world_size,
            hosts=args.hosts.split(",") if args.hosts else [], ifname=args.ifname,
            controller_ip=args.controller_ip, remote_python=args.remote_python,
            remote_root=args.remote_root, env=env_from_args(args.env),
            ssh_args=shlex.split(args.ssh_args or ""),
            launcher_args=shlex.split(args.launcher_args or ""), profile=args.profile)
        launch = params.launch_spec()
    except (ParamsError, LaunchError, ValueError) as err:
        return None, config, str(err)
    if launch.slots and launch.slots < config.world_size:
        return None, config, (f"--hosts give {launch.slots} engine slots but {config.label} "
                              f"needs {config.world_size} engines (workers + servers): add "
                              "slots, e.g. node1:2,node2:2")
    if launch.is_remote and args.network != "none":
        return None, config, (f"--network {args.network} emulates nodes on this machine; it "
                              f"cannot use --launcher {args.launcher}'s hosts: drop one")
    from dataclasses import replace

    from ddlstudy.records.store import project_root

    return launch, replace(config, data_root=launch.engine_path(
        str(Path(config.data_root).expanduser()), project_root())), None


def replay_shape(config: TrainConfig) -> tuple[TrainConfig, str | None]:
    """A run on synthetic data without --shape that replays a stored table holding its model at
    one shape only (a testbed's table holds the paper's input size): that shape, and the line
    that says so; else the config unchanged and None. A data set's own shape is never changed."""
    from dataclasses import replace

    if (config.compute != "replay" or config.replay_source == "measured"
            or config.shape is not None or config.real_data):
        return config, None
    from ddlstudy.workload import replay

    try:
        table = replay.load_table(config.replay_source)
    except (OSError, ValueError):
        return config, None  # check_replay names the problem
    has = sorted(table.loc[table["model"] == config.model, "shape"].dropna().astype(str).unique())
    if len(has) != 1 or has[0] == config.input_shape:
        return config, None
    return replace(config, shape=has[0]), (
        f"Shape: {has[0]} (the replay table {config.replay_source} holds {config.model} at "
        f"{has[0]} only; --shape sets another)")


def check_replay(config: TrainConfig) -> str | None:
    """A stored replay table must hold the run's model at its input shape: checked on the driver
    before any engine starts (the run would otherwise find out after its cluster is up). None,
    or the one-line problem. 'measured' is timed on the engines: None."""
    if config.compute != "replay" or config.replay_source == "measured":
        return None
    from ddlstudy.workload import replay

    shape = config.input_shape
    if not isinstance(shape, str):
        return (f"replay tables are per named shape (cifar, mnist, imagenet); the run's shape is "
                f"{shape!r}: pass --shape, or --replay-source measured")
    try:
        replay.compute_time(replay.load_table(config.replay_source), config.model, shape,
                            config.batch_size)
    except (OSError, ValueError) as err:
        return str(err)
    return None


def check_data(config: TrainConfig, launch: LaunchSpec | None = None) -> str | None:
    """Read (and, unless --no-verify-data, checksum) the data files on the driver before any
    engine starts, labels range-checked: None, or the one-line problem. Synthetic data: None."""
    if not config.real_data:
        return None
    from ddlstudy.workload.data import load_dataset

    if launch is not None and launch.is_remote and not Path(config.data_root).is_absolute():
        from dataclasses import replace

        from ddlstudy.records.store import project_root

        # the engines read it relative to their project root: the driver checks its own
        config = replace(config, data_root=str(project_root() / config.data_root))

    splits = (True, False) if config.eval else (True,)
    try:
        for train in splits:
            load_dataset(config.dataset, root=config.data_root, train=train,
                         verify=config.verify_data)
    except (OSError, ValueError) as err:  # DataError is a ValueError
        text = str(err).strip().splitlines()
        return text[0] if text else type(err).__name__
    return None


def config_from_args(args: argparse.Namespace, **overrides: Any) -> TrainConfig:
    """The TrainConfig the flags ask for (not yet validated)."""
    from ddlstudy.train.config import TrainConfig

    kw = {"hidden": args.hidden} if getattr(args, "hidden", None) else {}
    values = dict(model=args.model, shape=args.shape, dataset=args.dataset,
                  data_root=args.data_root, verify_data=args.verify_data,
                  workers=args.workers, servers=args.servers,
                  batch_size=args.batch_size, steps=args.steps, warmup_steps=args.warmup_steps,
                  epochs=args.epochs, eval=args.eval, lr=args.lr, momentum=args.momentum,
                  bucket_mb=args.bucket_mb, overlap=args.overlap, dtype=args.dtype,
                  seed=args.seed, model_kwargs=kw, timeout_s=args.timeout,
                  compute=args.compute, replay_source=args.replay_source,
                  checkpoint_every=args.checkpoint_every, fail_worker=args.fail_worker,
                  fail_at_step=args.fail_at_step)
    if (slow := getattr(args, "straggler", None)) is not None:
        values.update(straggler_rank=slow[0], straggler_factor=slow[1],
                      straggler_delay_s=args.straggler_delay)
    elif getattr(args, "straggler_delay", 0.0):
        values.update(straggler_delay_s=args.straggler_delay)  # validate names the fix
    values.update(overrides)
    return TrainConfig(**values)


def tier_line(row: Any) -> str | None:
    """One line for a run whose strategy counted bytes per link tier: MB sent per worker per
    step inside its node and to other nodes, with the algorithm's analytic split; else None."""
    import math

    got = [row.get(f"bytes_sent_{t}_per_step", math.nan) for t in ("intra", "inter")]
    if any(v is None or math.isnan(v) for v in got):
        return None
    want = [row.get(f"analytic_bytes_sent_{t}_per_step", math.nan) for t in ("intra", "inter")]
    analytic = ("analytic: " + ", ".join(f"{v / 1e6:.1f}" for v in want)
                if not any(v is None or math.isnan(v) for v in want) else "no analytic split")
    return (f"Bytes sent per worker per step: {got[0] / 1e6:.1f} MB inside its node, "
            f"{got[1] / 1e6:.1f} MB to other nodes ({analytic})")


def fault_lines(result: Any) -> list[str]:
    """What failures cost the run, one line each, then the steps completed."""
    row = result.row
    lines = []
    for f in result.failures.to_dict("records"):
        how = (f"restarted on fresh engines from the checkpoint at step "
               f"{int(f['checkpoint_step'])}, {int(f['steps_redone'])} steps redone"
               if f["action"] == "restart" else
               f"went on with {int(f['workers_after'])} workers, no step redone")
        lines.append(f"Failure: rank(s) {f['ranks']} died at step {int(f['step'])}; {how}; "
                     f"time lost {f['time_lost_s']:.1f} s")
    if len(result.failures) or result.config.checkpoint_every:
        lines.append(f"Steps completed: {int(row['steps_completed'])} "
                     f"({int(row['steps'])} timed) with {int(row['failures'])} failure(s), "
                     f"{int(row['restarts'])} restart(s), time lost {row['time_lost_s']:.1f} s")
    return lines


def _parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(prog="python -m ddlstudy.train", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strategy", default="allreduce", choices=list(STRATEGIES),
                        type=_one_of(STRATEGIES, "strategy"), metavar="STRATEGY",
                        help=f"one of {', '.join(STRATEGIES)} (default allreduce)")
    parser.add_argument("--algorithm", default="ring", choices=list(ALGORITHMS),
                        type=_one_of(ALGORITHMS, "algorithm"), metavar="ALGORITHM",
                        help=f"allreduce: one of {', '.join(ALGORITHMS)} (default ring)")
    add_config_arguments(parser)
    add_network_arguments(parser)
    add_node_arguments(parser)
    add_launch_arguments(parser)
    parser.add_argument("--out", default=None, help="write steps.csv, summary.csv, meta.json here")
    parser.add_argument("--no-progress", dest="progress", action="store_false")
    return parser


def out_from_argv(argv: Sequence[str], flag: str = "--out") -> str | None:
    """The value of `flag` in `argv` as argparse will read it (the last one wins; `--out X` or
    `--out=X`), read before the parser is built so the folder is owned before anything heavy
    loads. None when absent."""
    out = None
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == flag and i + 1 < len(argv):
            out = argv[i + 1]
        elif arg.startswith(flag + "="):
            out = arg[len(flag) + 1:]
    return out


class OwnedOutput:
    """An OutputLock on --out, plus whether this run created the folder: a run refused for a
    bad flag leaves no empty folder behind (`release(keep_new=False)`)."""

    def __init__(self, out: str, what: str, argv: Sequence[str]) -> None:
        self.folder = Path(out)
        self.created = not self.folder.exists()
        self.lock = OutputLock(out, f"{what} " + " ".join(argv))

    def acquire(self) -> OwnedOutput:
        self.lock.acquire()
        if self.lock.takeover_note:
            print(f"{self.lock.takeover_note}; its partial records stay in {self.folder}",
                  flush=True)
        return self

    def release(self, keep_new: bool = True) -> None:
        self.lock.release()
        if self.created and not keep_new:
            try:
                self.folder.rmdir()  # only if empty
            except OSError:
                pass


def take_output(out: str | None, what: str, argv: Sequence[str] = ()) -> OwnedOutput | None:
    """Own the --out folder (OutputLock) before any engine starts: None without --out;
    FolderBusy (names the owner's pid) / FolderUnwritable, one line each, when another run
    holds it or it cannot be written. A stale lock left by a dead run is taken over and said so.
    """
    if out is None:
        return None
    return OwnedOutput(out, what, argv or sys.argv[1:]).acquire()


def main(argv: list[str] | None = None) -> int:
    """`python -m ddlstudy.train`: own --out, check every flag, then start engines and train."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    prog = "python -m ddlstudy.train"
    try:
        owned = take_output(out_from_argv(args_list), "train", args_list)
    except OutputFolderError as err:  # busy (names the owner's pid) or unwritable
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    started = False
    try:
        parser = _parser()
        args = parser.parse_args(args_list)
        try:  # pure Python (ddlstudy.train.config): refused before torch or pandas load
            config = config_from_args(args, strategy=args.strategy, algorithm=args.algorithm)
            config.validate()
        except ValueError as err:
            parser.error(str(err))
        from ddlstudy.cluster.engines import handle_signals

        handle_signals()  # SIGINT/SIGTERM/SIGHUP unwind the `with` below, which stops the engines
        config, shape_note = replay_shape(config)
        if shape_note:
            print(shape_note)
        launch, config, problem = check_launch_args(args, config)
        problem = (problem or check_fault_args(args, config)
                   or (None if args.profile
                       else engine_count_problem(config.world_size, _per_core(config)))
                   or check_network_args(args) or check_node_args(args)
                   or check_replay(config) or check_data(config, launch))
        if problem:
            parser.error(problem)
        started = True
        return _run(args, config, launch)
    finally:
        if owned is not None:
            owned.release(keep_new=started)


def _per_core(config: TrainConfig) -> int:
    """Local engines per core this run may start (more when it replays compute)."""
    from ddlstudy.cluster.launchers import engines_per_core

    return engines_per_core([config.compute])


def _run(args: argparse.Namespace, config: TrainConfig, launch: LaunchSpec | None = None
         ) -> int:
    """Start the engines (or emulated cluster), train, print the results; the exit code."""
    from dataclasses import replace

    from ddlstudy.cluster.engines import ClusterError, Interrupted
    from ddlstudy.experiments.grid import dilation, emulated_cluster
    from ddlstudy.network.emulated.nodes import node_bytes, node_line
    from ddlstudy.train.trainer import train

    print(f"Model: {config.model}  Strategy: {config.label}")
    print(f"Batch size: {config.batch_size} per worker  Workers: {config.workers}"
          + (f"  Servers: {config.n_servers}" if config.n_servers else ""))
    try:
        # offload on: throughput, not packet counts, is what a training run measures
        with emulated_cluster(args.network, config.world_size, args.scale, offload_off=False,
                              profile=args.profile, collective_timeout_s=args.timeout,
                              gpus_per_node=args.gpus_per_node,
                              latency=args.latency, engines_per_core=_per_core(config),
                              **({"launch": launch} if launch is not None else {})) as cluster:
            config = replace(config, time_dilation=dilation(cluster, config.compute)).validate()
            net = cluster.network_info
            if launch is not None and launch.is_remote:
                hosts = ", ".join(f"{i['rank']}:{i['host']}" for i in cluster.info())
                roots = ", ".join(sorted({str(i.get("root")) for i in cluster.info()}))
                print(f"Launcher: {launch.launcher}, ranks on hosts {hosts}; engines work in "
                      f"{roots}", flush=True)
            if net:
                print(f"Network: {net['profile']} x {net['scale']} (emulated), compute "
                      f"x{config.time_dilation:g}", flush=True)
                print(node_line(net), flush=True)
            links = cluster.emulated_network
            before = links.counters() if links is not None else None
            result = train(cluster, config, out_dir=args.out, progress=args.progress,
                           announce=lambda line: print(line, flush=True), network=net)
            per_node = (node_bytes(before, links.counters())
                        if links is not None and before is not None else [])
    except (ClusterError, ValueError) as err:
        print(f"python -m ddlstudy.train: error: {err}", file=sys.stderr)
        return 2
    except (TimeoutError, RuntimeError) as err:
        print(f"python -m ddlstudy.train: run failed: {err}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader of stdout left: host.entry ends quietly
        raise
    except OSError as err:  # run-time I/O (a full disk): one line, the temp files are gone
        where = f" ({_printable(err.filename)})" if getattr(err, "filename", None) else ""
        print(f"python -m ddlstudy.train: run failed: cannot write the records{where}: "
              f"{err.strerror or err}; free space or choose another --out", file=sys.stderr)
        return 1
    except Interrupted as err:
        print(f"interrupted by {err}; engines stopped", file=sys.stderr)
        return err.exit_code
    for line in result.horovod_lines():
        print(line)
    if len(result.evals):
        print(f"Test accuracy: {result.row['test_accuracy']:.4f}")
    for line in fault_lines(result):
        print(line)
    if (line := tier_line(result.row)) is not None:
        print(line)
    for row in per_node:  # whole train() call: group setup, warm-up and timed steps
        print(f"Node {row['node']} link (emulated): sent {row['payload_sent_est'] / 1e6:.1f} MB, "
              f"received {row['payload_recv_est'] / 1e6:.1f} MB (TCP payload est.)")
    if result.out_dir is not None:
        if per_node:
            import pandas as pd

            pd.DataFrame(per_node).to_csv(Path(result.out_dir) / "node_bytes.csv", index=False)
        print(f"Wrote {result.out_dir}/steps.csv, summary.csv, meta.json"
              + (", node_bytes.csv" if per_node else ""))
    return 0


if __name__ == "__main__":
    # Import by name so engines unpickle ddlstudy functions, not copies from __main__.
    from ddlstudy.cli.train import main as _main
    from ddlstudy.host import entry

    raise SystemExit(entry.run(_main))
