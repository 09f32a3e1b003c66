"""Property tests of the telemetry text parsers: the Prometheus exposition parser, nvidia-smi CSV
and the server log scanner. Any text gives a result (odd lines counted or skipped), never an
exception.

Deterministic in CI (see conftest.py); ``HYPOTHESIS_PROFILE=deep`` runs 50x the examples, random.
"""

from __future__ import annotations

import math

from fuzz_strategies import examples
from hypothesis import example, given, settings
from hypothesis import strategies as st

from loadgen.telemetry.logscan import PATTERNS, LogScanner
from loadgen.telemetry.prom import parse, total
from loadgen.telemetry.smi import _FIELDS, SmiParser, is_streaming, query_fields

# --- Prometheus ---------------------------------------------------------------------------------

NUMBERISH = st.one_of(
    st.sampled_from(["0", "1.5", "+Inf", "-Inf", "NaN", "1e400", "abc", "", "0x10", "1_0", "--1"]),
    st.floats().map(repr),
    st.text(max_size=4),
)
NAME = st.sampled_from(["vllm:num_requests_running", "x_bucket", "x_sum", "x_count", "x_total", "", "{", "a b"])
LABEL_VALUE = st.text(max_size=6).map(lambda s: '"' + s + '"') | st.sampled_from(['"\\', '"a\\"', "x", '"'])
LABELS = st.one_of(
    st.just(""),
    st.lists(
        st.tuples(st.sampled_from(["le", "model", "", "a=b", " "]), LABEL_VALUE).map(lambda kv: f"{kv[0]}={kv[1]}"),
        max_size=3,
    ).map(lambda kvs: "{" + ",".join(kvs) + "}"),
    st.sampled_from(["{", "{le=", '{le="1"', "{}", "{,}"]),
)
PROM_LINE = st.one_of(
    st.tuples(NAME, LABELS, NUMBERISH, st.sampled_from(["", " 1700000000000", " x"])).map(
        lambda p: f"{p[0]}{p[1]} {p[2]}{p[3]}"
    ),
    st.sampled_from(["# TYPE x histogram", "# HELP x y", "# TYPE", "#", "# TYPE x"]),
    st.text(max_size=30),
)
PROM_TEXT = st.lists(PROM_LINE, max_size=12).map("\n".join)


@settings(max_examples=examples(400))
@given(PROM_TEXT)
# found by this test: a histogram bucket whose le label is not a number raised ValueError
@example('x_bucket{le="abc"} 1')
def test_prom_any_text_parses(text: str) -> None:
    exp = parse(text)
    assert exp.bad_lines >= 0
    for s in exp.samples:
        assert isinstance(s.value, float)
    total(exp.samples)
    for name in exp.names() | {"x"}:
        for family in (name, name.removesuffix("_bucket"), name.removesuffix("_sum"), name.removesuffix("_count")):
            exp.histogram(family)
    assert parse(text, wanted=lambda n: n.startswith("x")).samples == [s for s in exp.samples if s.name.startswith("x")]


# --- nvidia-smi CSV -----------------------------------------------------------------------------

SMI_FIELD = st.sampled_from([*_FIELDS, "index", "uuid", "name", "timestamp", "clocks_event_reasons.active", "x"])
SMI_CELL = st.one_of(
    st.sampled_from(["12.5 W", "[N/A]", "[Not Supported]", "N/A", "0x0000000000000004", "0x", "80 %", "inf", "nan"]),
    st.sampled_from(["-inf", "1e400", "-1", "GPU-1234", "40 MiB", "1e20", " ", ""]),
    st.floats().map(repr),
    st.text(max_size=5),
)


@st.composite
def smi_lines(draw: st.DrawFn) -> list[str]:
    fields = draw(st.lists(SMI_FIELD, min_size=1, max_size=6))
    units = [f + draw(st.sampled_from(["", " [W]", " [MiB]", " [%]"])) for f in fields]
    lines = [", ".join(units)] if draw(st.booleans()) else []
    for _ in range(draw(st.integers(0, 4))):
        n = len(fields) + draw(st.sampled_from([0, 0, 0, 1, -1]))
        lines.append(", ".join(draw(st.lists(SMI_CELL, min_size=n, max_size=n))))
    lines += draw(st.lists(st.text(max_size=20), max_size=2))
    return lines


@settings(max_examples=examples(400))
@given(smi_lines(), st.booleans())
# found by this test: int() of an infinite or NaN reading raised OverflowError / ValueError
@example(["index, utilization.gpu [%]", "0, inf"], False)
@example(["index, memory.used [MiB]", "nan, 1e400"], False)
def test_smi_any_csv_parses(lines: list[str], with_query: bool) -> None:
    parser = SmiParser(["index", "power.draw", "memory.used"] if with_query else None)
    for line in lines:
        for rec in parser.feed(line, 5):
            assert isinstance(rec["gpu"], int)
            for key, value in rec.items():
                if isinstance(value, float):
                    assert math.isfinite(value), key


@settings(max_examples=examples(200))
@given(st.lists(st.one_of(st.text(max_size=12), st.sampled_from(["-l", "--query-gpu", "--query-gpu=", "--loop=1"]))))
def test_smi_command_lines(argv: list[str]) -> None:
    query_fields(argv)
    is_streaming(argv)


# --- log scanner --------------------------------------------------------------------------------

_TEMPLATES = [
    "KV cache pool is full. Retract requests. #retracted_reqs: {}, #new_tokens_gained: {}, #new_token_ratio: {} -> {}",
    "Decode batch. #running-req: {}, #token: {}, token usage: {}, accept len: {}, accept rate: {}, "
    "gen throughput (token/s): {}, #queue-req: {}",
    "Prefill batch [3]. #new-seq: {}, #new-token: {}, #cached-token: {}, x, #running-req: {}, #queue-req: {}",
    "Avg prompt throughput: {} tokens/s, Avg generation throughput: {} tokens/s, Running: {} reqs, "
    "Waiting: {} reqs, GPU KV cache usage: {}%, Prefix cache hit rate: {}%",
    "SpecDecoding metrics: Mean acceptance length: {}",
    "max_total_num_tokens={}, chunked_prefill_size={}, max_prefill_tokens={}, max_running_requests={}, "
    "context_len={}, available_gpu_mem={} GB",
    "GPU KV cache size: {} tokens",
    "Sequence group {} is preempted by PreemptionMode.{}",
]
NUMBER_SLOT = st.one_of(
    st.from_regex(r"\A[\d.]{1,6}\Z"),  # \d: Unicode digits too, as the scanner's patterns read them
    st.sampled_from(["1", "0.5", ".", "..", "1.2.3", "٣", "٣.٣", "-1", "1,000"]),
)


@st.composite
def log_line(draw: st.DrawFn) -> str:
    template = draw(st.sampled_from(_TEMPLATES))
    line = template.format(*(draw(NUMBER_SLOT) for _ in range(template.count("{}"))))
    return draw(st.text(max_size=5)) + line + draw(st.sampled_from(["", "\r\n", "\n", " tail"]))


@settings(max_examples=examples(400))
@given(st.one_of(log_line(), st.text(max_size=40)))
# found by this test: a number slot of dots only ("token usage: .") raised ValueError in float()
@example("Decode batch. #running-req: 1, #token: 2, token usage: ., gen throughput (token/s): 1, #queue-req: 0")
def test_logscan_any_line_scans(line: str) -> None:
    events, samples = LogScanner().scan(line, 5)
    names = {p.name for p in PATTERNS}
    for ev in events:
        assert ev["pattern"] in names and ev["t_ns"] == 5
    for s in samples:
        assert s["src"] == "server" and s["t_ns"] == 5
