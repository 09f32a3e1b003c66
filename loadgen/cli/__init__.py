"""The ``loadgen`` command (``main``): ``parser`` builds its command line, ``ramp_options`` reads the
ramp's and the demo's flags into ``RampOptions``, ``commands`` runs each subcommand, ``codes`` holds
the exit codes."""

from loadgen.cli.commands import main

__all__ = ["main"]
