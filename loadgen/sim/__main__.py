"""``python -m loadgen.sim``: run the simulated server."""

from __future__ import annotations

from loadgen.sim.cli import main

raise SystemExit(main())
