"""``python -m loadgen.cli``: the ``loadgen`` command."""

import sys

from loadgen.cli.commands import main

sys.exit(main())
