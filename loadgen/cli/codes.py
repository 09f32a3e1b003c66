"""The ``loadgen`` command's exit codes and its usage error."""

from __future__ import annotations

from loadgen.spec.options import OptionError

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_NOT_READY = 3
EXIT_RUN_DIR = 4
EXIT_THRESHOLDS = 5  # a --fail-on / --abort-on threshold was breached (the run and its report are complete)
EXIT_INTERRUPTED = 130  # SIGINT or SIGTERM; the partial report is written


class UsageError(OptionError):
    """Bad command-line input; the message names the flag, the value and what to do."""
