"""`ddlstudy <command> [flags]`: one command line over the study's entry points.

Each command is the `main(argv)` of the module that owns it, imported only when that command runs
(so `ddlstudy params ...` never loads torch). `python -m ddlstudy.<command>` keeps working for
every command here. Shared exit codes: 0 done, 1 failed at run time, 2 bad input (one line naming
the problem and the fix), 130 / 143 stopped by SIGINT / SIGTERM, 141 the reader closed stdout's
pipe (`ddlstudy ... | head`: no traceback).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from ddlstudy.host import entry

# command -> (module whose main(argv) runs it, one line of help)
COMMANDS: dict[str, tuple[str, str]] = {
    "report": ("ddlstudy.report.runner", "run the chapters (papermill) and render the book"),
    "reference": ("ddlstudy.report.runner",
                  "the papers' grids into results/reference (params/reference.yaml layered)"),
    "train": ("ddlstudy.cli.train", "one training run on the cluster, records into --out"),
    "bench": ("ddlstudy.bench.__main__", "benchmarks: collectives (nccl-tests columns), train"),
    "cluster": ("ddlstudy.cluster.engines", "start / check / stop the engines; ping-pong table"),
    "netem": ("ddlstudy.network.emulated.measure",
              "the emulated network: check, calibrate, cleanup"),
    "costmodel": ("ddlstudy.analysis.costmodel", "the step-time model: validate, project"),
    "conclusions": ("ddlstudy.claims.engine", "judge the papers' claims against run folders"),
    "params": ("ddlstudy.config.params", "print the merged, validated parameters"),
    "data": ("ddlstudy.workload.data", "fetch and verify the data sets"),
    "replay": ("ddlstudy.workload.replay", "measure a compute table for compute replay"),
    "lab": ("ddlstudy.cli.lab", "JupyterLab on notebooks/ with the project's kernel"),
}
EXIT_BAD_INPUT = 2


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: ddlstudy <command> [flags]   (ddlstudy <command> --help for its flags)", "",
             "commands:"]
    lines += [f"  {name:<{width}}  {about}" for name, (_, about) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns its exit code (2 with one line for an unknown command, 141
    when stdout's reader left: the installed `ddlstudy` script calls this directly)."""
    return entry.run(lambda: _dispatch(list(sys.argv[1:] if argv is None else argv)))


def _dispatch(args: list[str]) -> int:
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if args else EXIT_BAD_INPUT
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(f"error: unknown command {name!r}; commands: {', '.join(COMMANDS)} "
              "(ddlstudy --help)", file=sys.stderr)
        return EXIT_BAD_INPUT
    if name == "reference" and not any(a.startswith("--params") for a in rest):
        rest = ["--params", "params/default.yaml", "--params", "params/reference.yaml",
                "--out", "results/reference", *rest]
    module = importlib.import_module(COMMANDS[name][0])
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    from ddlstudy.host import entry
    raise SystemExit(entry.run(main))
