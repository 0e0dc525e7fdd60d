"""`python -m ddlstudy.bench <collectives|train> [flags]`: one sub-module per benchmark."""

from __future__ import annotations

import importlib
import sys

from ddlstudy.cli.train import _OneLineParser

BENCHMARKS = {
    "collectives": "ddlstudy.bench.collectives",
    "train": "ddlstudy.bench.train",
}


def main(argv: list[str] | None = None) -> int:
    parser = _OneLineParser(prog="python -m ddlstudy.bench")  # bad flags: one line, exit 2
    sub = parser.add_subparsers(dest="benchmark", required=True)
    modules = {}
    # only the benchmark asked for is imported (the collectives one loads torch for its --op
    # choices): `train`'s flags are checked before torch loads; --help or a typo builds all
    argv = sys.argv[1:] if argv is None else argv
    chosen = argv[0] if argv and argv[0] in BENCHMARKS else None
    for name, module_name in BENCHMARKS.items():
        if chosen and name != chosen:
            continue
        module = importlib.import_module(module_name)
        modules[name] = module
        summary = (module.__doc__ or "").strip().split("\n")[0]
        module.add_arguments(sub.add_parser(name, help=summary))
    args = parser.parse_args(argv)
    from ddlstudy.cluster.engines import Interrupted, handle_signals

    handle_signals()  # a signal unwinds the benchmark's `with Cluster`, which stops the engines
    try:
        return int(modules[args.benchmark].main(args) or 0)
    except Interrupted as err:
        print(f"interrupted by {err}; engines stopped", file=sys.stderr)
        return err.exit_code
    except BrokenPipeError:  # the reader of stdout left: host.entry ends quietly
        raise
    except OSError as err:  # run-time I/O (a full disk): one line, temp files already removed
        where = f" {err.filename}" if getattr(err, "filename", None) else ""
        print(f"error: cannot write the records{where}: {err.strerror or err}; free space or "
              "choose another --out", file=sys.stderr)
        return 1


if __name__ == "__main__":
    from ddlstudy.host import entry
    raise SystemExit(entry.run(main))
