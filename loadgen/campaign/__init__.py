"""``loadgen campaign FILE.toml``: the same ramp against several server configurations, compared.

One module per reason to change: ``spec`` (the campaign file and its validation), ``runner`` (each
variant in turn: apply, start, wait, ramp as a child process, rollback), ``report``
(``campaign.json`` and ``campaign.md``), ``cli`` (the command line). The campaign directory
``<out>/<stamp>-campaign-<name>/`` holds one folder per variant and the report.

Nothing here imports gevent, locust or greenlet, not even indirectly: ramps run as child processes
(``tests/unit/test_import_rules.py``).
"""

from __future__ import annotations

from loadgen.campaign.cli import main
from loadgen.campaign.file import Campaign, CampaignError, LoadSpec, Variant, load_campaign, parse_campaign
from loadgen.campaign.report import build_report, render_markdown, write_report
from loadgen.campaign.runner import CampaignRunner

__all__ = [
    "Campaign",
    "CampaignError",
    "CampaignRunner",
    "LoadSpec",
    "Variant",
    "build_report",
    "load_campaign",
    "main",
    "parse_campaign",
    "render_markdown",
    "write_report",
]
