"""Accuracy checks that wait on the wall clock for minutes: run apart from the suite (issue 29).

    .venv/bin/python -m pytest benchmarks/accuracy -n 0 -s

They are tests as the suite's are (real simulators over HTTP, real ramps, the same assertions) and
use the suite's fixtures; they are kept out of the README's test command because together they take
about 15 minutes of a 2-core machine's wall clock alone (test_predict_http.py, ``loadgen predict``
against a real ramp over HTTP to 5 %, joined them from the suite: 17 s of it alone; test_fleet_http.py,
the fleet against four simulators behind loadgen router, replays five minutes of a trace twice: 10
minutes). Their figures are in ../RESULTS.md.
"""

from tests.conftest import sim_factory

__all__ = ["sim_factory"]
