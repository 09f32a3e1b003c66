"""``python -m loadgen.campaign FILE.toml``: the same as ``loadgen campaign FILE.toml``."""

from __future__ import annotations

from loadgen.campaign.cli import main

raise SystemExit(main())
