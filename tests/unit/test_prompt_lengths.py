"""Prompt lengths hit their target: exactly by a tokenizer, and by the server's count once learned.

The tokenizers are trained here, from the corpora the package builds its prompts from (nothing is
downloaded): a byte-level BPE (the GPT-2 / cl100k family) and a SentencePiece-style BPE with byte
fallback (the Llama family).
"""

from __future__ import annotations

import itertools
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from loadgen.load.client import CallResult
from loadgen.load.runtime import RunState, TargetOptions, prompt_size
from loadgen.parse.stream import ChunkAccumulator
from loadgen.spec.request import RequestSpec
from loadgen.workload import Workload
from loadgen.workload.calibration import CharRatioCounter, LengthCalibrator
from loadgen.workload.corpus import get_corpus
from loadgen.workload.datasets import load_trace
from loadgen.workload.prompts import build_prompt
from loadgen.workload.scenario import parse_scenario
from loadgen.workload.tokens import HFTokenizerCounter, load_counter

REPO = Path(__file__).resolve().parents[2]
TRACES = REPO.parent / "shared" / "data" / "traces"
AZURE = TRACES / "azure-llm-2023-conv.csv"
MOONCAKE = TRACES / "mooncake-conversation.jsonl"


def train_tokenizer(out_dir: Path, kind: str = "byte-bpe") -> Path:
    """A small tokenizer.json trained on the built-in prose and code corpora (about 0.6 s)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    prose, code = get_corpus("prose").text, get_corpus("code").text
    if kind == "byte-bpe":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=4000, min_frequency=2, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
        )
    elif kind == "sentencepiece-bpe":
        tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
        tok.normalizer = normalizers.NFKC()
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
        specials = ["<unk>"] + [f"<0x{i:02X}>" for i in range(256)]
        trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=specials, show_progress=False)
    else:
        raise ValueError(kind)

    def pieces() -> Any:
        for text in (prose[:300_000], code[:300_000]):
            for i in range(0, len(text), 4000):
                yield text[i : i + 4000]

    tok.train_from_iterator(pieces(), trainer=trainer)
    out_dir.mkdir(parents=True, exist_ok=True)
    tok.save(str(out_dir / "tokenizer.json"))
    return out_dir / "tokenizer.json"


@pytest.fixture(scope="module", params=["byte-bpe", "sentencepiece-bpe"])
def tokenizer_file(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("tokenizers", reason="the optional 'tokenizers' package is not installed")
    return train_tokenizer(tmp_path_factory.mktemp(request.param), request.param)


# -- with a tokenizer: exact ------------------------------------------------------------------


@pytest.mark.parametrize("source", ["prose", "code", "chat"])
def test_prompts_have_exactly_the_requested_tokens(tokenizer_file: Path, source: str) -> None:
    counter = load_counter(tokenizer_file)
    for n in (1, 2, 7, 60, 333, 1024, 2500, 9000):
        for seed in range(2):
            text = build_prompt(n, random.Random(f"{seed}:{n}"), source, counter)
            assert counter.count(text) == n, (source, n, seed)


def _trace_workload(trace: Path, fmt: str, tokenizer: Path | None) -> Workload:
    head = f'tokenizer = "{tokenizer}"\n' if tokenizer else ""
    text = f'{head}context_limit = 200000\n[prompt]\nsource = "trace"\n[trace]\npath = "{trace}"\nformat = "{fmt}"\n'
    text += '[load]\nmode = "open"\narrival = "trace"\n'
    return Workload(parse_scenario(text, "t.toml"))


def _user_text(spec: RequestSpec) -> str:
    assert spec.messages is not None
    return "".join(str(m["content"]) for m in spec.messages)


@pytest.mark.skipif(not AZURE.exists(), reason=f"no trace at {AZURE}")
def test_a_trace_scenario_with_a_tokenizer_builds_the_traces_lengths_exactly(tokenizer_file: Path) -> None:
    w = _trace_workload(AZURE, "azure", tokenizer_file)
    assert isinstance(w.counter, HFTokenizerCounter)
    rows = w.scenario.trace.trace.rows[:120] if w.scenario.trace else []
    replay = w.step_targets()[0]
    specs = [spec for _, spec in itertools.islice(w.arrivals(0, replay, duration_s=1e9), len(rows))]
    assert len(specs) == len(rows)
    for row, spec in zip(rows, specs, strict=True):
        assert spec.context_tokens == row.input_tokens
        assert w.counter.count(_user_text(spec)) == row.input_tokens


@pytest.mark.skipif(not MOONCAKE.exists(), reason=f"no trace at {MOONCAKE}")
def test_mooncake_blocks_stay_shared_and_the_length_exact_with_a_tokenizer(tokenizer_file: Path) -> None:
    w = _trace_workload(MOONCAKE, "mooncake", tokenizer_file)
    rows = [r for r in load_trace(MOONCAKE).rows[:200] if r.input_tokens <= 3000 and r.hash_ids][:12]
    assert len(rows) >= 6
    for row in rows:
        text, tokens = w._trace_text(row, row.input_tokens, w.counter)
        assert tokens == w.counter.count(text) == row.input_tokens
    # full blocks are 512 tokens by the tokenizer and the same text in every row that names them,
    # so a prefix cache sees the trace's reuse
    texts = [w._trace_text(row, row.input_tokens, w.counter)[0] for row in rows]
    checked = 0
    for i, j in itertools.combinations(range(len(rows)), 2):
        a, b = rows[i].hash_ids or (), rows[j].hash_ids or ()
        k = 0
        while k < min(len(a), len(b)) - 1 and a[k] == b[k]:
            k += 1
        if k:
            common = _common_prefix(texts[i], texts[j])
            assert w.counter.count(common) >= 512 * k - 2, (i, j, k)
            checked += 1
    assert checked >= 10


def _common_prefix(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


# -- the calibrator ---------------------------------------------------------------------------


def test_the_calibrator_learns_a_known_ratio_and_template() -> None:
    cal = LengthCalibrator()
    assert not cal.ready
    rng = random.Random(0)
    for _ in range(200):
        chars, messages = rng.randrange(100, 40_000), rng.choice((1, 2, 3))
        cal.observe(chars, messages, round(chars * 0.3 + 5 * messages))
    assert cal.ready and cal.observations == 200
    assert cal.tokens_per_char == pytest.approx(0.3, rel=1e-3)
    assert cal.tokens_per_message == pytest.approx(5.0, rel=0.05)  # the ridge pulls it a little
    assert cal.overhead(2) == 10
    assert cal.counter.tokens_per_char == cal.tokens_per_char


def test_the_calibrator_with_one_prompt_size_learns_a_plain_ratio() -> None:
    cal = LengthCalibrator()
    for _ in range(50):
        cal.observe(240, 1, 64)  # every request the same size: template and text cannot be told apart
    assert cal.tokens_per_char == pytest.approx(64 / 240, rel=1e-9)
    assert cal.tokens_per_message == pytest.approx(0.0, abs=1e-9)
    assert cal.predict(240, 1) == pytest.approx(64)


def test_the_calibrator_ignores_responses_without_usage() -> None:
    cal = LengthCalibrator()
    cal.observe(1000, 1, 0)
    cal.observe(0, 1, 10)
    assert not cal.ready and cal.tokens_per_char == 0.0


def test_the_ratio_counter_counts_and_cuts_consistently() -> None:
    counter = CharRatioCounter(1 / 3.3)
    text = get_corpus("prose").text[:50_000]
    for n in (0, 1, 2, 10, 999, 5000):
        cut = counter.truncate(text, n)
        assert counter.count(cut) <= n < counter.count(text[: len(cut) + 1]) or n == 0
    assert counter.count("x" * 33) == 10


# -- without a tokenizer: learned from the server's usage, through the load side ---------------


class CountingServer:
    """A fake transport whose server counts ``ceil(chars / chars_per_token) + per_message * messages``
    (the shape of the simulator's count, with other constants) and says so in ``usage``."""

    def __init__(self, chars_per_token: float, per_message: int) -> None:
        self.chars_per_token = chars_per_token
        self.per_message = per_message
        self.served: list[int] = []

    def call(self, path: str, body: bytes, headers: dict[str, str], stream: bool, decode: str = "chat") -> CallResult:
        messages = orjson.loads(body)["messages"]
        chars = sum(len(m["content"]) for m in messages)
        served = math.ceil(chars / self.chars_per_token) + self.per_message * len(messages)
        self.served.append(served)
        acc = ChunkAccumulator()
        acc.add(orjson.dumps({"id": "x", "choices": [{"index": 0, "delta": {"content": " ok"}}]}), 2)
        acc.add(orjson.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}), 3)
        usage = {"prompt_tokens": served, "completion_tokens": 1}
        acc.add(orjson.dumps({"choices": [], "usage": usage}), 4)
        acc.add(b"[DONE]", 5)
        return CallResult(200, 1, 6, acc.finish(6))

    def close(self) -> None:
        pass


SCENARIO = """
[prompt]
input_tokens = { dist = "lognormal", median = 800, sigma = 0.9, min = 40, max = 12000 }
{extra}
[output]
max_tokens = 4
"""


@pytest.mark.parametrize(
    ("extra", "chars_per_token", "per_message"),
    [
        ("", 3.1, 6),  # chat prompts around prose and code
        ('system_prompt = "You are a careful assistant. Answer briefly."', 4.4, 3),  # two messages
        ('source = "code"', 2.7, 0),
    ],
)
def test_served_lengths_land_on_the_target_after_the_first_responses(
    tmp_path: Path, extra: str, chars_per_token: float, per_message: int
) -> None:
    w = Workload(parse_scenario(SCENARIO.replace("{extra}", extra), "t.toml"))
    state = RunState(tmp_path, TargetOptions(url="http://127.0.0.1:1", model="m"), lambda plan: w)
    assert state.lengths is w.lengths
    server = CountingServer(chars_per_token, per_message)
    session = w.session(0)
    requested: list[int] = []
    for _ in range(160):
        spec, _ = session.next()
        assert spec.context_tokens is not None
        requested.append(spec.context_tokens)
        rec, _ = state.execute(server, spec, 0)
        assert rec.context_tokens == spec.context_tokens and rec.prompt_tokens == server.served[-1]
    state.close()
    err = np.array(server.served, dtype=float) / np.array(requested, dtype=float) - 1
    p10, p50, p90 = np.percentile(err[5:], [10, 50, 90])
    assert abs(p50) <= 0.02 and abs(p10) <= 0.05 and abs(p90) <= 0.05, (p10, p50, p90)
    # the first request, built with the estimator before any response, is off by the disagreement
    assert w.lengths.observations == 160
    assert w.lengths.tokens_per_char == pytest.approx(1 / chars_per_token, rel=0.02)


def test_requested_stays_the_sampled_target_when_calibrated() -> None:
    text = SCENARIO.replace("{extra}", "")
    calibrated = Workload(parse_scenario(text, "t.toml"))
    for _ in range(3):
        calibrated.lengths.observe(4000, 1, 800)  # a server that counts 5 characters a token
    plain = Workload(parse_scenario(text, "t.toml"))
    # the same random streams: the same targets, built to different sizes
    a = [spec for spec, _ in _draw(calibrated, 20)]
    b = [spec for spec, _ in _draw(plain, 20)]
    assert [s.context_tokens for s in a] == [s.context_tokens for s in b]
    longer = [len(_user_text(x)) / len(_user_text(y)) for x, y in zip(a, b, strict=True)]
    assert np.median(longer) > 1.15  # 5 characters a token instead of the estimator's ~4


@pytest.mark.skipif(not MOONCAKE.exists(), reason=f"no trace at {MOONCAKE}")
def test_mooncake_blocks_keep_their_text_when_calibrated_and_the_last_one_takes_the_length() -> None:
    w = _trace_workload(MOONCAKE, "mooncake", None)
    w.lengths.observe(4400, 1, 1000)  # 4.4 characters a token: fewer tokens than the estimator's
    counter = w._builder()
    assert counter is w.lengths.counter
    rows = [r for r in load_trace(MOONCAKE).rows[:200] if r.input_tokens <= 6000 and r.hash_ids][:20]
    corpus = get_corpus("prose")
    for row in rows:
        text, tokens = w._trace_text(row, row.input_tokens, counter)
        assert tokens == counter.count(text) == row.input_tokens
        full = ""
        for h in (row.hash_ids or ())[:-1]:
            start = corpus.random_start(random.Random(f"{w.scenario.seed}:block:{h}").random())
            full += corpus.excerpt_counted(start, 511)[0] + "\n"
            if counter.count(full) >= row.input_tokens:
                break
        assert text.startswith(full[: len(text)])


def _draw(w: Workload, n: int) -> list[tuple[RequestSpec, float]]:
    session = w.session(1)
    return [session.next() for _ in range(n)]


def test_prompt_size_is_what_the_server_reads() -> None:
    spec = RequestSpec(messages=[{"role": "system", "content": "abc"}, {"role": "user", "content": "de"}])
    assert prompt_size(spec) == (5, 2)
    assert prompt_size(RequestSpec(endpoint="completions", prompt="hello")) == (5, 1)


def test_matrix_cells_share_one_calibrator() -> None:
    w = Workload(parse_scenario("[matrix]\ncontext_tokens = [100, 2000]\n", "t.toml"))
    assert w.for_context(100).lengths is w.lengths


def test_the_tokenizer_flag_reaches_the_prompt_builder(tokenizer_file: Path) -> None:
    """``loadgen ramp --tokenizer PATH`` without a scenario: the default chat prompts are cut by it."""
    from loadgen.load.compose import base_workload, output_token_counter
    from loadgen.spec.options import RampOptions

    opts = RampOptions(url="http://127.0.0.1:1", model="m", tokenizer=str(tokenizer_file))
    base = base_workload(opts)
    counter = output_token_counter(base)
    assert counter is not None and counter.name != "estimate"
    for ctx in (60, 500, 3000):
        spec, _ = base.for_context(ctx).session(0).next()
        assert spec.context_tokens == ctx
        assert counter.count(_user_text(spec)) == ctx


def test_a_server_whose_usage_ignores_the_prompt_teaches_nothing() -> None:
    """A mock or proxy answering a fixed prompt_tokens must not make the builder build absurd prompts."""
    cal = LengthCalibrator()
    rng = random.Random(1)
    for _ in range(30):
        cal.observe(rng.randrange(150, 400), rng.choice((1, 2)), 10)  # always 10, whatever was sent
    assert not cal.ready  # the fit is outside what any tokenizer does: the estimator stays
    for _ in range(200):  # once usage follows the prompt, it is learned
        chars, messages = rng.randrange(1_000, 40_000), rng.choice((1, 2))
        cal.observe(chars, messages, round(chars * 0.3 + 5 * messages))
    assert cal.ready and cal.tokens_per_char == pytest.approx(0.3, rel=0.05)
