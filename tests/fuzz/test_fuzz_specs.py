"""Property tests of the scenario and campaign parsers: any TOML document (written from random
tables shaped like real files, and raw text) gives a ``Scenario`` / ``Campaign`` or the
documented error (``ScenarioError`` / ``CampaignError``), never another exception.

Deterministic in CI (see conftest.py); ``HYPOTHESIS_PROFILE=deep`` runs 50x the examples, random.
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from fuzz_strategies import TOML_ANY, examples, to_toml, toml_table
from hypothesis import example, given, settings
from hypothesis import strategies as st

from loadgen.campaign.file import CampaignError, parse_campaign
from loadgen.workload.scenario import Scenario, ScenarioError, parse_scenario

# Files a scenario or campaign may point at: good ones, and a few that are not what they claim.
_FILES = {
    "prompts.jsonl": '{"prompt": "hi", "output_tokens": 5}\n{"prompt": "there"}\n',
    "bad.jsonl": "{not json\n",
    "trace.jsonl": '{"timestamp": 0, "input_length": 10, "output_length": 5}\n',
    "tools.json": json.dumps([{"type": "function", "function": {"name": "get", "parameters": {"type": "object"}}}]),
    "scenario.toml": "[load]\nconcurrency = [1]\n",
    "img.png": "not a png",
}
_DIR = Path(tempfile.mkdtemp(prefix="loadgen-fuzz-"))
atexit.register(shutil.rmtree, _DIR, True)  # every test process made its own: leave none behind
for _name, _text in _FILES.items():
    (_DIR / _name).write_text(_text)
(_DIR / "folder.jsonl").mkdir()

PATHS = st.sampled_from([*_FILES, "folder.jsonl", "missing.jsonl", "", ".", "~no-such-user-x/a", "a\x00b", "/"])
WORD = st.sampled_from(
    [
        "closed", "open", "poisson", "gamma", "trace", "chat", "completions", "responses", "embeddings",
        "rerank", "prose", "code", "sharegpt", "jsonl", "document", "system", "fixed", "uniform",
        "normal", "lognormal", "exponential", "empirical", "mixture", "input", "output", "max_tokens",
        "previous_response_id", "resend", "low", "high", "png", "auto", "none", "required", "get",
        "separate", "same", "ramp", "knee", "ttft_p99>2", "error_rate>1%", "{port}", "{nope}",
    ]
)  # fmt: skip
NUM = st.one_of(
    st.integers(-2, 5000),
    st.floats(-10, 1e6),
    st.sampled_from([0, 1, 0.5, float("inf"), float("-inf"), float("nan"), 2**63 - 1, 10**400, 1e300]),
)
DIST_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "dist": WORD,
    "value": NUM,
    "low": NUM,
    "high": NUM,
    "mean": NUM,
    "std": NUM,
    "median": NUM,
    "sigma": NUM,
    "min": NUM,
    "max": NUM,
    "values": st.lists(NUM, max_size=4),
    "path": PATHS,
    "format": WORD,
    "field": WORD,
}
DIST = st.one_of(
    NUM,
    toml_table(DIST_FIELDS),
    toml_table(
        {
            "dist": st.just("mixture"),
            "components": st.lists(toml_table({**DIST_FIELDS, "weight": NUM}), max_size=3),
        }
    ),
)
NUMS = st.lists(NUM, max_size=4)
STRS = st.one_of(WORD, st.text(max_size=8))
SECTIONS: dict[str, st.SearchStrategy[Any]] = {
    "name": STRS,
    "seed": NUM,
    "endpoint": WORD,
    "model": STRS,
    "context_limit": NUM,
    "tokenizer": PATHS,
    "prompt": toml_table(
        {
            "source": WORD,
            "input_tokens": DIST,
            "path": PATHS,
            "tasks": st.lists(WORD, max_size=3),
            "corpus": st.lists(WORD, max_size=3),
            "system_prompt": STRS,
        }
    ),
    "output": toml_table(
        {"max_tokens": DIST, "from_dataset": st.booleans(), "ignore_eos": st.booleans(), "min_tokens": NUM}
    ),
    "sampling": toml_table({"temperature": NUM, "top_k": NUM, "seed": NUM, "stop": st.lists(STRS, max_size=2)}),
    "body": toml_table({"n": NUM, "x": STRS}),
    "shared_prefix": toml_table({"tokens": DIST, "ratio": NUM, "pool": NUM, "kind": WORD, "source": WORD}),
    "conversation": toml_table({"turns": DIST, "think_time_s": DIST, "followup_tokens": DIST, "responses_state": WORD}),
    "load": toml_table(
        {
            "mode": WORD,
            "concurrency": NUMS,
            "rates": NUMS,
            "arrival": WORD,
            "burstiness": NUM,
            "time_scales": NUMS,
            "step_seconds": NUM,
            "warmup_seconds": NUM,
            "requests_per_step": NUM,
            "warmup_prompts": WORD,
            "think_time_s": DIST,
        }
    ),
    "trace": toml_table({"path": PATHS, "format": WORD, "offset_s": NUM}),
    "matrix": toml_table({"context_tokens": NUMS}),
    "embeddings": toml_table({"batch": DIST, "input_tokens": DIST}),
    "rerank": toml_table({"documents": DIST, "query_tokens": DIST, "document_tokens": DIST}),
    "tools": toml_table(
        {
            "file": PATHS,
            "choice": WORD,
            "function": st.lists(
                toml_table(
                    {
                        "name": STRS,
                        "description": STRS,
                        "parameters": st.one_of(
                            toml_table({"type": st.sampled_from(["object", "strng"]), "properties": TOML_ANY}),
                            TOML_ANY,
                        ),
                        "strict": st.booleans(),
                    }
                ),
                max_size=2,
            ),
        }
    ),
    "agent": toml_table(
        {
            "max_turns": NUM,
            "tool_result_tokens": DIST,
            "tool_latency_s": DIST,
            "think_time_s": DIST,
            "responses_state": WORD,
        }
    ),
    "reasoning": toml_table({"effort": WORD, "thinking": st.booleans()}),
    "images": toml_table(
        {"count": DIST, "width": DIST, "height": DIST, "format": WORD, "files": st.lists(PATHS, max_size=2)}
    ),
    "gate": toml_table({"fail_on": WORD, "abort_on": WORD}),
}
# whole documents with a few sections, and documents of one section (which get past the others)
SCENARIO = st.one_of(
    toml_table(SECTIONS, keep=6),
    st.sampled_from(sorted(SECTIONS)).flatmap(lambda k: toml_table({k: SECTIONS[k]}, keep=1)),
)


def check_scenario(text: str) -> None:
    try:
        scenario = parse_scenario(text, "fuzz.toml", _DIR)
    except ScenarioError as exc:
        assert str(exc).startswith("fuzz.toml")
        return
    assert isinstance(scenario, Scenario)


@settings(max_examples=examples(500))
@given(SCENARIO.map(to_toml))
# found by this test: a path under a home that does not exist raised RuntimeError from expanduser
@example('tokenizer = "~no-such-user-x/a"\n')
@example('[tools]\nfile = "~no-such-user-x/t.json"\n')
def test_scenario_any_document_parses_or_says_why(text: str) -> None:
    check_scenario(text)


@settings(max_examples=examples(150))
@given(st.one_of(st.text(max_size=60), st.dictionaries(st.text(max_size=8), TOML_ANY, max_size=5).map(to_toml)))
def test_scenario_raw_text_parses_or_says_why(text: str) -> None:
    check_scenario(text)


COMMAND = st.one_of(
    st.sampled_from(["", "echo hi", "'unbalanced", "{python} -m x --port {port}", "run {nope}"]),
    st.lists(STRS, max_size=3),
    TOML_ANY,
)
RAMP = toml_table(
    {
        "mode": WORD,
        "concurrency": NUMS,
        "rate": NUMS,
        "step_seconds": NUM,
        "warmup_seconds": NUM,
        "requests_per_step": NUM,
        "max_tokens": NUM,
        "scenario": PATHS,
        "model": STRS,
        "fail_on": WORD,
        "abort_on": WORD,
        "args": st.lists(st.one_of(STRS, st.just("--api-key=x")), max_size=2),
        "timeout_s": NUM,
    }
)
CAMPAIGN = toml_table(
    {
        "campaign": toml_table(
            {
                "name": STRS,
                "url": st.sampled_from(["http://127.0.0.1:{port}", "", "{bad}"]),
                "status": COMMAND,
                "logs": COMMAND,
                "log_file": STRS,
                "wait_ready_s": NUM,
                "apply_timeout_s": NUM,
                "description": STRS,
            }
        ),
        "ramp": RAMP,
        "variant": st.lists(
            toml_table(
                {
                    "name": STRS,
                    "description": STRS,
                    "url": st.sampled_from(["http://127.0.0.1:{port}", "{bad}"]),
                    "start": COMMAND,
                    "apply": st.lists(COMMAND, max_size=2),
                    "rollback": st.one_of(st.lists(COMMAND, max_size=2), COMMAND),
                    "status": COMMAND,
                    "logs": COMMAND,
                    "log_file": STRS,
                    "wait_ready_s": NUM,
                    "apply_timeout_s": NUM,
                    "ramp": RAMP,
                }
            ),
            max_size=3,
        ),
    }
)


def check_campaign(text: str) -> None:
    try:
        parse_campaign(text, "fuzz.toml", _DIR)
    except CampaignError as exc:
        assert str(exc).startswith("fuzz.toml")


@settings(max_examples=examples(400))
@given(CAMPAIGN.map(to_toml))
def test_campaign_any_document_parses_or_says_why(text: str) -> None:
    check_campaign(text)


@settings(max_examples=examples(100))
@given(st.text(max_size=60))
def test_campaign_raw_text_parses_or_says_why(text: str) -> None:
    check_campaign(text)


# found by this test (parse_scenario raised OverflowError / ValueError, not ScenarioError):
REGRESSIONS = [
    "[prompt]\ninput_tokens = inf\n",  # a fixed length: int(inf) in the whole-number check
    "[prompt]\ninput_tokens = nan\n",  # int(nan)
    "[load]\nthink_time_s = nan\n",  # a fixed duration of nan (was accepted)
    '[prompt]\ninput_tokens = {dist = "empirical", values = [nan]}\n',  # was accepted
    f"[prompt]\ninput_tokens = {10**400}\n",  # TOML integers are not bounded by tomllib
    f"[load]\nstep_seconds = {10**400}\n",  # float(int) overflow in Table.get_float
    f'[load]\nmode = "open"\nrates = [{10**400}]\n',  # and in the open-loop rates
]


@pytest.mark.parametrize("text", REGRESSIONS)
def test_scenario_regressions_say_why(text: str) -> None:
    with pytest.raises(ScenarioError):
        parse_scenario(text, "fuzz.toml", _DIR)


def test_campaign_rate_past_any_float_says_why() -> None:
    # found by this test: float() of a huge rate raised OverflowError
    text = (
        f'[campaign]\nname = "c"\nurl = "http://x"\n[ramp]\nrate = [{10**400}]\n[[variant]]\nname = "a"\nstart = "x"\n'
    )
    with pytest.raises(CampaignError, match="rate"):
        parse_campaign(text, "fuzz.toml")
