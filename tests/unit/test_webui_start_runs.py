"""The web UI's start form data and past-runs list (issue 19), without a browser: the form's fields and
defaults come from the one option table, the scenario list is exactly the folders' usable files, a
Start naming any other path is refused, and the run list reads verdicts from the reports."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import orjson
import pytest

from loadgen.analysis.synthetic import write_bulk_run
from loadgen.report.pipeline import rebuild
from loadgen.spec import flags
from loadgen.webui import runs as runlist
from loadgen.webui.start import ScenarioChoices, form_schema, guard_swarm

REPO = Path(__file__).resolve().parents[2]


def _locust_defaults(**given: str) -> argparse.Namespace:
    """The locustfile's parsed --lg-* options as Locust would have them (``given``: loadgen ui's flags)."""
    parser = argparse.ArgumentParser()
    flags.add_locust_arguments(parser, parser)
    argv: list[str] = []
    for name, value in given.items():
        argv += [f"--lg-{name}", value]
    return parser.parse_args(argv)


def _fields(schema: dict[str, object]) -> dict[str, dict[str, object]]:
    return {f["dest"]: f for s in schema["sections"] for f in s["fields"]}  # type: ignore[attr-defined,index]


def test_the_form_shows_every_form_option_with_loadgen_ramps_defaults(tmp_path: Path) -> None:
    schema = form_schema(_locust_defaults(), "http://127.0.0.1:30000", ScenarioChoices([tmp_path]))
    fields = _fields(schema)
    form_dests = {f.dest for f in flags.FLAGS if "form" in f.surfaces}
    assert set(fields) == form_dests  # nothing of the form left out, nothing invented
    assert fields["concurrency"]["default"] == "1,8,32,64,128" and fields["concurrency"]["name"] == "lg_steps"
    assert fields["step_seconds"]["default"] == "30" and fields["warmup_seconds"]["default"] == "5"
    assert fields["max_tokens"]["default"] == "512" and fields["endpoint"]["default"] == "chat"
    assert fields["slo"]["default"] == "" and fields["fail_on"]["default"] == ""
    assert fields["arrival"]["choices"] == ["poisson", "gamma"]
    assert schema["host"] == "http://127.0.0.1:30000"


def test_loadgen_uis_flags_are_the_forms_defaults(tmp_path: Path) -> None:
    opts = _locust_defaults(steps="1,4", **{"max-tokens": "64", "slo": "ttft_p99=2s"})
    fields = _fields(form_schema(opts, "", ScenarioChoices([tmp_path])))
    assert fields["concurrency"]["default"] == "1,4"
    assert fields["max_tokens"]["default"] == "64"
    assert fields["slo"]["default"] == "ttft_p99=2s"


def test_scenarios_are_the_folders_usable_files_and_nothing_else_starts(tmp_path: Path) -> None:
    folder = tmp_path / "scenarios"
    folder.mkdir()
    shutil.copyfile(REPO / "scenarios" / "chat.toml", folder / "chat.toml")
    shutil.copyfile(REPO / "scenarios" / "embeddings.toml", folder / "embeddings.toml")
    (folder / "broken.toml").write_text("[load]\nmode = 'sideways'\n")
    (folder / "notes.txt").write_text("not a scenario")
    choices = ScenarioChoices([folder, tmp_path / "missing"])
    listed = {c.name: c for c in choices.list()}
    assert set(listed) == {"chat", "embeddings", "broken"}
    assert listed["broken"].error and "mode" in listed["broken"].error
    assert listed["chat"].load == {
        "mode": "closed",
        "concurrency": [1, 4, 16, 32, 64, 128, 256],
        "step_seconds": 60.0,
        "warmup_seconds": 10.0,
        "arrival": None,
    }
    assert guard_swarm({"lg_scenario": str(folder / "chat.toml")}, choices) is None
    assert guard_swarm({"lg_scenario": ""}, choices) is None
    for bad in (str(folder / "broken.toml"), "/etc/passwd", str(folder / ".." / "scenarios" / "chat.toml")):
        reason = guard_swarm({"lg_scenario": bad}, choices)
        assert reason is not None and "not one of the scenario files" in reason and str(folder) in reason
    # the command line's --scenario stays allowed wherever it is
    extra = ScenarioChoices([folder], extra=[str(REPO / "scenarios" / "rerank.toml")])
    assert guard_swarm({"lg_scenario": str(REPO / "scenarios" / "rerank.toml")}, extra) is None


def test_the_run_list_reads_verdicts_from_the_reports_and_compares(tmp_path: Path) -> None:
    out = tmp_path / "reports"
    a, b, partial = out / "20231114-221320-a", out / "20231114-221321-b", out / "20231114-221322-partial"
    for d in (a, b):
        write_bulk_run(d, 600, concurrencies=(1, 4, 16), chunks=8, workers=1)
        rebuild(d)
    write_bulk_run(partial, 60, concurrencies=(1,), chunks=8, workers=1)  # no report yet
    (out / "stray").mkdir()  # not a run directory: not listed
    rows = {r["id"]: r for r in runlist.list_runs(out, current=None)}
    assert set(rows) == {a.name, b.name, partial.name}
    summary = orjson.loads((a / "summary.json").read_bytes())
    verdict = rows[a.name]["verdict"]
    assert verdict["text"] == summary["knee"]["reason"] and verdict["knee"] == summary["knee"]["knee"]
    assert verdict["steps"] == len(summary["steps"])
    assert verdict["peak_tok_s"] == max(s["output_tok_s"] for s in summary["steps"] if s["valid"])
    assert rows[a.name]["status"] == "reported" and "report.html" in rows[a.name]["files"]
    assert rows[partial.name]["status"] == "no report" and rows[partial.name]["hint"].startswith("loadgen report")
    assert runlist.list_runs(out, current=partial)[0]["status"] in ("running", "reported", "no report")
    assert {r["status"] for r in runlist.list_runs(out, current=partial) if r["id"] == partial.name} == {"running"}

    # the counts are summary.json's totals (the report's cards and the live page show the same)
    assert rows[a.name]["counts"] == {
        "requests_ok": summary["totals"]["requests_ok"],
        "requests_failed": summary["totals"]["requests_failed"],
        "requests_cancelled": summary["totals"]["errors"].get("cancelled", 0),
    }
    assert rows[partial.name]["counts"] is None and "loadgen report" in rows[partial.name]["why_not"]

    target = runlist.compare(out, [a.name, b.name])
    assert target.parent == out and (target / "compare.html").is_file() and (target / "compare.md").is_file()
    # a comparison stays listed, as a row of its own (not a run: nothing to compare it with)
    listed = {r["id"]: r for r in runlist.list_runs(out, current=None)}
    assert listed[target.name]["kind"] == "comparison" and listed[target.name]["status"] == "comparison"
    assert "compare.html" in listed[target.name]["files"] and listed[target.name]["verdict"] is None
    with pytest.raises(runlist.RunListError, match="no report yet"):
        runlist.compare(out, [a.name, partial.name])
    with pytest.raises(runlist.RunListError, match="two runs or more"):
        runlist.compare(out, [a.name])
    for bad in ("..", "../x", "a/b", ""):
        with pytest.raises(runlist.RunListError):
            runlist.run_path(out, bad)


def test_an_error_names_the_forms_label_not_the_hidden_field() -> None:
    from loadgen.webui.start import LABELS, in_form_words

    said = in_form_words("--lg-steps '2,x': expected comma-separated whole numbers; see --lg-max-tokens")
    assert said == (
        f"\u201c{LABELS['concurrency']}\u201d '2,x': expected comma-separated whole numbers; "
        f"see \u201c{LABELS['max_tokens']}\u201d"
    )
    # a flag no field of the form has stays as it is (the form cannot name it otherwise)
    assert in_form_words("--gpus 0,1 and --lg-nothing") == "--gpus 0,1 and --lg-nothing"


def test_the_forms_words_are_the_forms(tmp_path: Path) -> None:
    """No flag names, exit codes or fields the form has not, in any help or placeholder."""
    schema = form_schema(_locust_defaults(), "http://127.0.0.1:1", ScenarioChoices([tmp_path]))
    for f in _fields(schema).values():
        text = f"{f['help']} {f['placeholder']}"
        assert "--" not in text and "exit" not in text, (f["dest"], text)
