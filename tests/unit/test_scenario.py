from __future__ import annotations

import io
import random
import sys
from pathlib import Path

import pytest

from loadgen.workload.cli import check_main, show_main
from loadgen.workload.lengths import Fixed, LogNormal
from loadgen.workload.scenario import ScenarioError, find_line, load_scenario, parse_scenario
from loadgen.workload.traffic import Workload

REPO = Path(__file__).resolve().parents[2]
# campaign-*.toml files are campaigns (loadgen campaign), not scenarios
SHIPPED = sorted(p for p in (REPO / "scenarios").glob("*.toml") if not p.name.startswith("campaign-"))


def scenario_error(path: Path, expected: list[str]) -> str:
    """The message ``load_scenario`` refuses ``path`` with, once checked to hold each of ``expected``."""
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    message = str(info.value)
    for part in expected:
        assert part in message, f"{part!r} not in {message!r}"
    return message


def test_all_five_scenarios_are_shipped() -> None:
    names = {p.stem for p in SHIPPED}
    assert {"chat", "rag-long-context", "code-completion", "agentic-multi-turn", "matrix"} <= names


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_scenario_is_valid_and_documented(path: Path) -> None:
    assert path.read_text().startswith("# "), "each shipped scenario starts with a comment saying what it is"
    scenario = load_scenario(path)
    assert scenario.name == path.stem
    out, err = io.StringIO(), io.StringIO()
    assert show_main(str(path), 12, out, err) == 0, err.getvalue()
    assert "12 requests drawn" in out.getvalue()
    assert "example 1" in out.getvalue()


def test_shipped_matrix_is_the_story_matrix() -> None:
    s = load_scenario(REPO / "scenarios" / "matrix.toml")
    assert s.context_tokens == (60, 4000, 16000)
    assert s.load.concurrency[0] == 1 and s.load.concurrency[-1] == 256
    assert s.output.max_tokens == Fixed(512)


def test_rag_scenario_has_long_shared_documents() -> None:
    s = load_scenario(REPO / "scenarios" / "rag-long-context.toml")
    assert s.shared_prefix is not None and s.shared_prefix.kind == "document"
    assert s.context_limit > 32000


def test_full_scenario_round_trip(tmp_path: Path) -> None:
    text = """
name = "x"
seed = 9
context_limit = 4096
[prompt]
source = "chat"
tasks = ["answer"]
input_tokens = { dist = "lognormal", median = 300, sigma = 0.5, max = 2000 }
[output]
max_tokens = 128
[sampling]
temperature = 0.0
stop = "END"
[load]
mode = "open"
arrival = "gamma"
burstiness = 2.5
rates = [1, 2.5]
step_seconds = 30
warmup_seconds = 5
warmup_prompts = "same"
"""
    s = parse_scenario(text, "x.toml")
    assert s.seed == 9 and s.prompt.tasks == ("answer",)
    assert s.sampling == {"temperature": 0.0, "stop": ["END"]}
    assert s.load.rates == (1.0, 2.5) and s.load.burstiness == 2.5
    assert s.load.steps() == [1.0, 2.5] and s.load.warmup_prompts == "same"
    inner = s.prompt.input_tokens.inner  # type: ignore[attr-defined]
    assert inner == LogNormal(300, 0.5)


def test_find_line_locates_sections_keys_and_inline_keys() -> None:
    text = """# comment
seed = 1

[prompt]
source = "chat"
input_tokens = { dist = "lognormal", median = 5, sigma = -1 }

[load]
concurrency = [
  1,
  2,
]
mode = "closed"
"""
    assert find_line(text, "seed") == 2
    assert find_line(text, "prompt") == 4
    assert find_line(text, "prompt.source") == 5
    assert find_line(text, "prompt.input_tokens.sigma") == 6
    assert find_line(text, "load.mode") == 13
    assert find_line(text, "load.concurrency[1]") == 9
    assert find_line(text, "load.missing") == 8  # the table, when the key is absent
    assert find_line(text, "nowhere.at_all") is None


# (scenario text, substrings the error must contain). Line numbers count from the text's first line.
BAD: list[tuple[str, list[str]]] = [
    ('[load]\nmdoe = "closed"\n', [":2:", "load.mdoe", 'did you mean "mode"', "allowed keys here"]),
    ("sed = 1\n", [":1:", "sed: unknown key", 'did you mean "seed"']),
    ('[prompts]\nsource = "chat"\n', [":1:", 'did you mean "prompt"']),
    ('[load]\nmode = "clsed"\n', [":2:", 'load.mode = "clsed"', '"closed", "open"', 'did you mean "closed"']),
    ('seed = "one"\n', [":1:", 'seed = "one": must be an integer, not a string']),
    ("[load]\nconcurrency = 8\n", [":2:", "load.concurrency = 8: must be an array"]),
    ("[load]\nconcurrency = [1, -4]\n", [":2:", "load.concurrency[1] = -4: must be > 0"]),
    ('[load]\nconcurrency = [1, "8"]\n', [":2:", 'load.concurrency[1] = "8": must be an integer']),
    ("[prompt]\ninput_tokens = -100\n", [":2:", "prompt.input_tokens = -100: must be >= 0"]),
    (
        '[output]\nmax_tokens = { dist = "normal", mean = 100, std = -5 }\n',
        [":2:", "output.max_tokens.std = -5: must be >= 0"],
    ),
    (
        '[output]\nmax_tokens = { dist = "uniform", low = 500, high = 100 }\n',
        [":2:", "output.max_tokens.high", "must be >= low"],
    ),
    (
        '[prompt]\ninput_tokens = { dist = "zipf", a = 2 }\n',
        [":2:", 'prompt.input_tokens.dist = "zipf": must be one of'],
    ),
    ("context_limit = 1000\n[prompt]\ninput_tokens = 4000\n", [":3:", "must be below context_limit (1000)"]),
    (
        "[load]\nstep_seconds = 10\nwarmup_seconds = 20\n",
        [":3:", "load.warmup_seconds = 20: must be shorter than step_seconds"],
    ),
    ('[load]\nwarmup_prompts = "primed"\n', [":2:", '"separate", "same"']),
    ('[load]\nmode = "open"\n', [":1:", "load.rates: is required"]),
    ('[load]\nmode = "open"\narrival = "trace"\n', [":3:", "needs a [trace] table"]),
    ('[conversation]\nturns = 3\n[load]\nmode = "open"\nrates = [1]\n', [":4:", 'need mode = "closed"']),
    ("[conversation]\nturns = 0\n", [":2:", "conversation.turns = 0: must be >= 1"]),
    ("[shared_prefix]\ntokens = 100\nratio = 1.5\n", [":3:", "shared_prefix.ratio = 1.5: must be <= 1"]),
    ('[sampling]\ntemperature = "hot"\n', [":2:", 'sampling.temperature = "hot": must be a number']),
    ("[sampling]\ntemprature = 0.5\n", [":2:", 'did you mean "temperature"']),
    ("[output]\nmin_tokens = -1\n", [":2:", 'output.min_tokens = -1: must be an integer >= 0 or "max_tokens"']),
    ('[output]\nignore_eos = "yes"\n', [":2:", 'output.ignore_eos = "yes": must be true or false']),
    ('endpoint = "respones"\n', [":1:", '"chat", "completions", "responses", "embeddings", "rerank"', "did you mean"]),
    ('[load\nmode = "closed"\n', [":1:", "invalid TOML"]),
    ("seed = 1\nseed = 2\n", [":2:", "invalid TOML"]),
    ('[prompt]\nsource = "sharegpt"\npath = "missing.json"\n', [":3:", "prompt.path", "missing.json", "no such file"]),
    ('[trace]\npath = "missing.csv"\n', [":2:", "trace.path", "no such file"]),
    ('tokenizer = "no/such/tokenizer.json"\n', [":1:", "no such file or directory", "nothing is downloaded"]),
    ("[load]\nrates = [1]\n", [":2:", 'load.rates = [1]: applies to mode = "open" only']),
    (
        '[load]\nmode = "open"\nrates = [1]\nburstiness = 2\n',
        [":4:", 'load.burstiness = 2: applies to arrival = "gamma" only'],
    ),
    ("[load]\nconcurrency = []\n", [":2:", "load.concurrency = []: must not be empty"]),
    ("prompt = 5\n", [":1:", "prompt = 5: must be a table, not an integer"]),
    ("[matrix]\ncontext_tokens = [60, 40000]\n", [":2:", "matrix.context_tokens[1] = 40000", "context_limit"]),
]


@pytest.mark.parametrize(("text", "expected"), BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_bad_scenarios_get_clear_errors(tmp_path: Path, text: str, expected: list[str]) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    message = scenario_error(path, expected)
    assert message.startswith(str(path))
    # the CLI prints the same message and no traceback, and says the scenario is invalid
    out, err = io.StringIO(), io.StringIO()
    assert check_main(str(path), out, err) == 2
    assert message in err.getvalue() and "Traceback" not in err.getvalue()


BROKEN_FILES: list[tuple[str, str, str, list[str]]] = [
    # (file name, file content, scenario text, expected substrings)
    (
        "s.json",
        '[{"conversations": [{"from": "human", "value": "hi"}]},\n {"conv',
        'source = "sharegpt"',
        ["s.json:2", "not valid JSON"],
    ),
    ("s.json", '{"a": 1}', 'source = "sharegpt"', ["JSON array of conversations"]),
    (
        "p.jsonl",
        '{"prompt": "hello"}\n{"prompt": 5}\n',
        'source = "jsonl"',
        ["p.jsonl:2", 'non-empty string field "prompt"'],
    ),
    (
        "p.jsonl",
        '{"prompt": "hello", "output_tokens": -3}\n',
        'source = "jsonl"',
        ["p.jsonl:1", '"output_tokens" = -3'],
    ),
    ("p.jsonl", '{"prompt": "hello"}\nnot json\n', 'source = "jsonl"', ["p.jsonl:2", "not valid JSON"]),
]


@pytest.mark.parametrize(("name", "content", "source", "expected"), BROKEN_FILES)
def test_broken_prompt_datasets_name_file_and_line(
    tmp_path: Path, name: str, content: str, source: str, expected: list[str]
) -> None:
    (tmp_path / name).write_text(content)
    path = tmp_path / "s.toml"
    path.write_text(f'[prompt]\n{source}\npath = "{name}"\n')
    message = scenario_error(path, expected)
    assert f"{path}:3: prompt.path" in message


BROKEN_TRACES: list[tuple[str, str, str, list[str]]] = [
    (
        "a.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,374,44\n2023-11-16 18:15:47,abc,1\n",
        "azure",
        ["a.csv:3", "must be integers"],
    ),
    (
        "a.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,374,44\n",
        "azure",
        ["a.csv:2", "bad timestamp 'yesterday'"],
    ),
    ("a.csv", "time,in,out\n1,2,3\n", "azure", ["a.csv:1", "header lacks TIMESTAMP"]),
    ("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n", "azure", ["has no requests"]),
    (
        "b.csv",
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,10\n",
        "burstgpt",
        ["b.csv:2", "expected 6 columns"],
    ),
    (
        "m.jsonl",
        '{"timestamp": 0, "input_length": 10, "output_length": 5}\n{"timestamp": 1, "input_length": 10}\n',
        "mooncake",
        ["m.jsonl:2", 'missing field "output_length"'],
    ),
    (
        "m.jsonl",
        '{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1, "x"]}\n',
        "mooncake",
        ["m.jsonl:1", "hash_ids"],
    ),
]


@pytest.mark.parametrize(("name", "content", "fmt", "expected"), BROKEN_TRACES)
def test_broken_traces_name_file_and_line(
    tmp_path: Path, name: str, content: str, fmt: str, expected: list[str]
) -> None:
    (tmp_path / name).write_text(content)
    path = tmp_path / "s.toml"
    path.write_text(f'[trace]\npath = "{name}"\nformat = "{fmt}"\n')
    message = scenario_error(path, expected)
    assert f"{path}:2: trace.path" in message


def test_a_trace_path_with_a_nul_character_is_a_clear_error(tmp_path: Path) -> None:
    # the OS refuses such a path with a ValueError; the scenario says which field and why
    path = tmp_path / "s.toml"
    path.write_text('[trace]\npath = "a\\u0000b"\n')
    message = scenario_error(path, ["trace.path", "NUL character"])
    assert f"{path}:2: trace.path" in message


def test_missing_scenario_file() -> None:
    err = io.StringIO()
    assert check_main("/no/such/scenario.toml", io.StringIO(), err) == 2
    assert "/no/such/scenario.toml: no such scenario file" in err.getvalue()


def test_sharegpt_dataset_is_used_with_its_reply_lengths(tmp_path: Path) -> None:
    import json

    data = [
        {"conversations": [{"from": "human", "value": "What is a list?"}, {"from": "gpt", "value": "A list " * 30}]},
        {"conversations": [{"from": "human", "value": "Explain tuples."}, {"from": "gpt", "value": "Tuples " * 10}]},
        {"conversations": [{"from": "gpt", "value": "no user turn"}]},
    ]
    (tmp_path / "sg.json").write_text(json.dumps(data))
    path = tmp_path / "s.toml"
    path.write_text('[prompt]\nsource = "sharegpt"\npath = "sg.json"\n')
    s = load_scenario(path)
    assert len(s.prompt.dataset) == 2
    from loadgen.workload import Workload

    session = Workload(s).session(0)
    seen = {}
    for _ in range(20):
        spec, _ = session.next()
        assert spec.messages is not None
        seen[spec.messages[-1]["content"]] = spec.max_tokens
    assert seen == {"What is a list?": 60, "Explain tuples.": 10}


def test_show_prints_arrival_statistics_for_open_loop(tmp_path: Path) -> None:
    path = tmp_path / "open.toml"
    path.write_text(
        '[prompt]\ninput_tokens = 100\n[load]\nmode = "open"\narrival = "gamma"\nburstiness = 2.0\nrates = [50]\n'
    )
    out = io.StringIO()
    assert show_main(str(path), 2000, out, io.StringIO()) == 0
    text = out.getvalue()
    assert "gamma (CV 2) arrivals at 50 requests/s" in text
    line = next(x for x in text.splitlines() if "arrivals:" in x and "CV" in x)
    rate = float(line.split("arrivals: ")[1].split(" requests/s")[0])
    cv = float(line.rsplit("CV ", 1)[1])
    assert 40 < rate < 60 and 1.7 < cv < 2.3


def test_show_replays_a_trace(tmp_path: Path) -> None:
    rows = [(0, 300, 20), (500, 400, 30), (2000, 100, 40)]
    (tmp_path / "t.csv").write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        + "".join(f"{t / 1000},ChatGPT,{i},{o},{i + o},Conversation log\n" for t, i, o in rows)
    )
    path = tmp_path / "replay.toml"
    path.write_text(
        '[prompt]\nsource = "trace"\n[trace]\npath = "t.csv"\n[load]\nmode = "open"\narrival = "trace"\n'
        "time_scales = [2.0]\n"
    )
    out = io.StringIO()
    assert show_main(str(path), 10, out, io.StringIO()) == 0
    text = out.getvalue()
    assert "3 requests drawn" in text and "trace replay" in text
    assert "max_tokens: mean 30" in text
    assert "arrivals: 0.5 requests/s over 4 s" in text  # 2 gaps over (2.0 s x 2)


def test_check_summarises_a_valid_scenario() -> None:
    out = io.StringIO()
    assert check_main(str(REPO / "scenarios" / "rag-long-context.toml"), out, io.StringIO()) == 0
    text = out.getvalue()
    assert "ok" in text.splitlines()[0]
    assert "shared prefix: document, uniform [8000, 32000], 80% of requests share one of 16" in text


def test_tokenizer_without_the_package_is_a_clear_check_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # what an installation without it sees
    model = tmp_path / "model"
    model.mkdir()
    (model / "tokenizer.json").write_text("{}")
    path = tmp_path / "s.toml"
    path.write_text('tokenizer = "model"\n')
    err = io.StringIO()
    assert check_main(str(path), io.StringIO(), err) == 2
    assert "'tokenizers' package is not installed" in err.getvalue()
    assert "Traceback" not in err.getvalue()


def test_a_trace_replay_sends_its_longest_prompts_unless_a_limit_is_written(tmp_path: Path) -> None:
    # the default context_limit (32,768) once clipped a trace's long prompts silently: an 87 k-token
    # Mooncake prompt went out as 32,767 tokens and one output token
    rows = [(0, 300, 20), (500, 40_000, 100)]
    (tmp_path / "t.csv").write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        + "".join(f"{t / 1000},ChatGPT,{i},{o},{i + o},Conversation log\n" for t, i, o in rows)
    )
    body = '[prompt]\nsource = "trace"\n[trace]\npath = "t.csv"\n[load]\nmode = "open"\narrival = "trace"\n'
    (tmp_path / "replay.toml").write_text(body)
    s = load_scenario(tmp_path / "replay.toml")
    assert s.context_limit >= 40_100
    w = Workload(s)
    assert s.trace is not None
    long_row = s.trace.trace.rows[1]
    spec = w.request(random.Random(0), False, long_row)
    assert spec.max_tokens == 100 and spec.context_tokens is not None and spec.context_tokens >= 39_000
    # a limit written in the file still clips
    (tmp_path / "clipped.toml").write_text("context_limit = 32768\n" + body)
    c = load_scenario(tmp_path / "clipped.toml")
    assert c.context_limit == 32768
    spec = Workload(c).request(random.Random(0), False, long_row)
    assert spec.context_tokens is not None and spec.context_tokens + spec.max_tokens <= 32768
