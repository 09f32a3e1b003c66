"""Hypothesis settings of the fuzz tests: deterministic in CI, long and random on demand.

``ci`` (the default): derandomized (the same examples on every run, so CI never flakes on a new
one), no example database, no deadline (a 2-core runner's pauses are not bugs); each test sets its
own ``max_examples`` through ``fuzz_strategies.examples`` so the whole folder stays under ~40 s.
``deep``: ``HYPOTHESIS_PROFILE=deep .venv/bin/python -m pytest tests/fuzz`` runs 50x as many
random (not derandomized) examples and keeps failures in ``.hypothesis/`` to replay them.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]

settings.register_profile("ci", deadline=None, derandomize=True, database=None, suppress_health_check=_QUIET)
settings.register_profile("deep", deadline=None, derandomize=False, suppress_health_check=_QUIET)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
