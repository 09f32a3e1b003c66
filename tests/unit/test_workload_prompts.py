from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

from loadgen.workload.corpus import get_corpus
from loadgen.workload.prompts import build_chat_prompt, build_prompt, estimate_tokens
from loadgen.workload.tokens import PIECE_RE, TokenizerError, load_counter, piece_tokens


def test_estimator_counts_words_and_punctuation() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("The quick brown fox, jumps.") == 7
    # long words cost more than one token; digits go in threes
    assert estimate_tokens("internationalisation") == 3
    assert estimate_tokens("1234567") == 3
    # CJK: about one token per character
    assert estimate_tokens("日本語") == 3


def test_estimator_is_additive_over_runs() -> None:
    text = get_corpus("code").text[:20_000]
    runs = PIECE_RE.findall(text)
    assert "".join(runs) == text
    assert estimate_tokens(text) == sum(piece_tokens(r) for r in runs)


def test_english_prose_is_about_four_characters_per_token() -> None:
    text = get_corpus("prose").text
    ratio = len(text) / estimate_tokens(text)
    assert 3.3 < ratio < 4.6


@pytest.mark.parametrize("source", ["prose", "code", "chat"])
def test_prompt_lengths_land_on_target(source: str) -> None:
    rng = random.Random(7)
    for n in (1, 5, 60, 512, 4000, 32_000):
        text = build_prompt(n, rng, source)
        got = estimate_tokens(text)
        assert n - 2 <= got <= n, (source, n, got)


def test_excerpt_longer_than_corpus_wraps_around() -> None:
    corpus = get_corpus("prose")
    n = corpus.total_tokens * 2 + 1000
    text = corpus.excerpt(corpus.word_starts[100], n)
    assert n - 2 <= estimate_tokens(text) <= n
    assert len(text) > 2 * len(corpus.text)


def test_prompt_longer_than_corpus() -> None:
    n = get_corpus("prose").total_tokens + 5000
    assert n - 2 <= estimate_tokens(build_prompt(n, random.Random(1), "prose")) <= n


class FirstDrawFixed(random.Random):
    """A Random whose first random() is fixed: two of them collide on the first excerpt start."""

    def __init__(self, seed: int, first: float) -> None:
        super().__init__(seed)
        self.first: float | None = first

    def random(self) -> float:
        if self.first is not None:
            value, self.first = self.first, None
            return value
        return super().random()


def test_a_chance_start_collision_shares_one_segment_only() -> None:
    a = build_prompt(16_000, FirstDrawFixed(1, 0.5), "prose")
    b = build_prompt(16_000, FirstDrawFixed(2, 0.5), "prose")
    common = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        common += 1
    assert 900 <= estimate_tokens(a[:common]) <= 1026  # one segment and its separator


def test_prompts_are_real_text_and_differ_by_draw() -> None:
    rng = random.Random(3)
    a = build_prompt(300, rng, "prose")
    b = build_prompt(300, rng, "prose")
    assert a != b
    assert " the " in a  # English, not random tokens
    code = build_prompt(2000, rng, "code")
    assert "def " in code or "class " in code or "import " in code


def test_same_seed_same_prompt() -> None:
    assert build_prompt(1000, random.Random(42), "chat") == build_prompt(1000, random.Random(42), "chat")


def test_chat_prompt_has_instruction_and_question() -> None:
    text = build_chat_prompt(400, random.Random(0), task="answer", corpus="code")
    assert text.startswith("Read the code below")
    assert "```python\n" in text and "\nQuestion: " in text
    assert 398 <= estimate_tokens(text) <= 400


def test_bad_inputs_are_rejected() -> None:
    with pytest.raises(ValueError, match="must be >= 0"):
        build_prompt(-1, random.Random(0))
    with pytest.raises(ValueError, match="unknown prompt source 'poetry'"):
        build_prompt(10, random.Random(0), "poetry")


def test_missing_tokenizer_path_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match="no such file"):
        load_counter(tmp_path / "nope.json")
    with pytest.raises(TokenizerError, match=r"has no tokenizer\.json"):
        load_counter(tmp_path)


def _word_level_tokenizer(path: Path, words: list[str]) -> Path:
    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(words)}}
    spec = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"},
    }
    path.write_text(json.dumps(spec))
    return path


def test_tokenizer_without_package_gives_clear_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    file = _word_level_tokenizer(tmp_path / "tokenizer.json", ["the"])
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # what an installation without it sees
    with pytest.raises(TokenizerError, match="'tokenizers' package is not installed"):
        load_counter(file)


def test_local_tokenizer_cuts_prompts_exactly(tmp_path: Path) -> None:
    pytest.importorskip("tokenizers", reason="the optional 'tokenizers' package is not installed")
    file = _word_level_tokenizer(tmp_path / "tokenizer.json", ["the", "a"])
    counter = load_counter(tmp_path)  # a directory holding tokenizer.json
    text = build_prompt(200, random.Random(5), "prose", counter=counter)
    assert counter.count(text) == 200
    assert file.exists()


class WordCounter:
    """A stand-in tokenizer (one token per whitespace-separated word) for the non-estimator path."""

    name = "words"

    def count(self, text: str) -> int:
        return len(text.split())

    def truncate(self, text: str, n_tokens: int) -> str:
        words = 0
        in_word = False
        for i, ch in enumerate(text):
            if not ch.isspace() and not in_word:
                words += 1
                if words > n_tokens:
                    return text[:i]
            in_word = not ch.isspace()
        return text


@pytest.mark.parametrize("source", ["prose", "code", "chat"])
def test_a_tokenizer_counter_cuts_to_its_own_count(source: str) -> None:
    counter = WordCounter()
    for n in (1, 50, 3000):
        text = build_prompt(n, random.Random(n), source, counter=counter)
        assert counter.count(text) == n, (source, n)


def test_a_tokenizer_counter_drives_request_lengths() -> None:
    from loadgen.workload import Workload
    from loadgen.workload.scenario import parse_scenario

    s = parse_scenario("[prompt]\ninput_tokens = 700\n[shared_prefix]\ntokens = 300\n", "t.toml")
    w = Workload(s, counter=WordCounter())
    spec, _ = w.session(0).next()
    assert spec.messages is not None
    content = str(spec.messages[-1]["content"])
    assert spec.context_tokens == len(content.split())
    assert 995 <= spec.context_tokens <= 1010  # 300 + 700 words, plus the joining words
