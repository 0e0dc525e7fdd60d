"""Run a command-line entry point: `raise SystemExit(entry.run(main))` ends every `__main__`.

`python -m ddlstudy.report.coverage | head` closes the pipe while the table is printing; Python
then raises BrokenPipeError at the next write (or at exit, flushing stdout) and prints a
traceback. A reader that stopped reading is not an error of the command: it ends quietly with
the shell's code for SIGPIPE.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

EXIT_PIPE_CLOSED = 141  # 128 + SIGPIPE, what a shell reports for a writer whose reader left


def run(main: Callable[[], int | None]) -> int:
    """Call `main()`, flush stdout, and return its exit code (None counts as 0); returns
    EXIT_PIPE_CLOSED, with no traceback, when stdout's reader closed the pipe."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        # Point stdout at /dev/null so the interpreter's own flush at exit cannot fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_PIPE_CLOSED
    return int(code or 0)
