"""Loading run directories: worker files merged, torn lines, missing step lines, clear errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from loadgen.analysis.load import MISSING, RunLoadError, load_run
from loadgen.analysis.synthetic import T0_NS, at_ms, make_record, step_lines, write_run_dir


def two_workers(path: Path, tail: dict[str, bytes] | None = None) -> Path:
    w0 = [
        make_record("a", 0, 1000, [10, 30], [1, 2], worker="w0"),
        make_record("b", 0, 1500, [20, 25, 27], [1, 1, 1], worker="w0", prompt_tokens=None),
    ]
    w1 = [
        make_record(
            "c",
            1,
            6000,
            [],
            end_ms=3,
            status=503,
            error_class="http_5xx",
            error="busy",
            output_tokens=None,
            worker="w1",
        )
    ]
    steps = [*step_lines(0, 0, 500, 5000, concurrency=1), *step_lines(1, 5000, 5500, 9000, concurrency=2)]
    return write_run_dir(
        path,
        steps=steps,
        records={"requests-w0.jsonl": w0, "requests-w1.jsonl": w1},
        manifest={"label": "x"},
        tail=tail,
    )


def test_worker_files_are_merged_into_columns(tmp_path: Path) -> None:
    run = load_run(two_workers(tmp_path))
    req = run.requests
    assert req.n == 3
    assert req.ids == ["a", "b", "c"]
    assert req.worker.values() == ["w0", "w0", "w1"]
    assert req.step.tolist() == [0, 0, 1]
    assert req.sent_ns.tolist() == [at_ms(1000), at_ms(1500), at_ms(6000)]
    assert req.chunk_start.tolist() == [0, 2, 5, 5]
    assert req.chunk_offsets_ns.tolist() == [10_000_000, 30_000_000, 20_000_000, 25_000_000, 27_000_000]
    assert req.chunk_tokens.tolist() == [1, 2, 1, 1, 1]
    offs, toks = req.chunks_of(1)
    assert offs.tolist() == [20_000_000, 25_000_000, 27_000_000] and toks.tolist() == [1, 1, 1]
    assert req.prompt_tokens.tolist() == [100, MISSING, 100]
    assert req.output_tokens.tolist() == [3, 3, MISSING]
    assert req.first_chunk_ns[2] == MISSING
    assert req.error_class.values() == [None, None, "http_5xx"]
    assert req.errors == {2: "busy"}
    assert [p.name for p in run.request_files] == ["requests-w0.jsonl", "requests-w1.jsonl"]
    assert run.manifest["label"] == "x"
    assert run.run_id == tmp_path.name


def test_steps_are_folded(tmp_path: Path) -> None:
    run = load_run(two_workers(tmp_path))
    s0, s1 = run.steps
    assert (s0.step, s0.concurrency, s0.start_ns, s0.steady_ns, s0.end_ns, s0.end_reason) == (
        0,
        1,
        T0_NS,
        at_ms(500),
        at_ms(5000),
        "duration",
    )
    assert (s1.step, s1.concurrency, s1.steady_ns) == (1, 2, at_ms(5500))


def test_torn_last_line_is_skipped_and_counted(tmp_path: Path) -> None:
    run = load_run(two_workers(tmp_path, tail={"requests-w1.jsonl": b'{"id":"d","worker":"w1","step":1,"sen'}))
    assert run.requests.n == 3
    assert run.skipped_lines == 1


def test_a_torn_line_in_the_middle_and_blank_lines_do_not_lose_the_rest(tmp_path: Path) -> None:
    path = two_workers(tmp_path)
    good = make_record("e", 1, 7000, [5], worker="w2").to_json()
    (path / "requests-w2.jsonl").write_bytes(b'{"id":"x","ste\n\n' + good + b"\r\n")
    run = load_run(path)
    assert run.requests.ids == ["a", "b", "c", "e"]
    assert run.skipped_lines == 1


def test_missing_end_and_steady_lines(tmp_path: Path) -> None:
    recs = [make_record("a", 0, 3000, [10], end_ms=2000), make_record("b", 1, 9000, [10], end_ms=500)]
    steps = [
        *step_lines(0, 0, None, None, warmup_s=2.0),  # no steady, no end: next step's start ends it
        *step_lines(1, 8000, 8500, None),  # killed: ends at its last record's end (9500 ms)
    ]
    run = load_run(write_run_dir(tmp_path, steps=steps, records={"requests.jsonl": recs}))
    s0, s1 = run.steps
    assert s0.steady_ns == at_ms(2000) and not s0.steady_logged
    assert s0.end_ns == at_ms(8000) and s0.end_reason is None
    assert s1.end_ns == at_ms(9500) and s1.end_reason is None


def test_without_steps_jsonl_each_step_id_spans_its_records(tmp_path: Path) -> None:
    recs = [make_record("a", 3, 1000, [10], end_ms=50), make_record("b", 3, 2000, [10], end_ms=400)]
    run = load_run(write_run_dir(tmp_path, records={"requests.jsonl": recs}))
    (s,) = run.steps
    assert (s.step, s.start_ns, s.steady_ns, s.end_ns) == (3, at_ms(1000), at_ms(1000), at_ms(2400))


def test_samples_are_typed_and_events_exposed_raw(tmp_path: Path) -> None:
    path = two_workers(tmp_path)
    (path / "samples.jsonl").write_bytes(b'{"t_ns": 1, "src": "gpu", "power_w": 400}\n{"t_ns": 2, "sr')
    (path / "events.jsonl").write_bytes(b'{"t_ns": 5, "kind": "log", "line": "KV cache full"}\n')
    run = load_run(path)
    assert [(s["t_ns"], s["src"]) for s in run.samples] == [(1, "gpu")]  # the cut-off line is skipped
    gpu = run.samples[0]
    assert gpu["src"] == "gpu" and (gpu["gpu"], gpu["power_w"], gpu["power_limit_w"]) == (0, 400, None)
    assert run.events == [{"t_ns": 5, "kind": "log", "line": "KV cache full"}]


def test_worker_processes_give_the_same_columns(tmp_path: Path) -> None:
    path = two_workers(tmp_path)
    many = [make_record(f"r{i}", 1, 6000 + i, [1, 2, 3 + i % 5], [1, 2, 1], worker="w3") for i in range(300)]
    write_run_dir(path, records={"requests-w3.jsonl": many})
    serial = load_run(path, workers=1).requests
    parallel = load_run(path, workers=2).requests
    assert parallel.ids == serial.ids
    for name in ("step", "sent_ns", "end_ns", "chunk_start", "chunk_offsets_ns", "chunk_tokens", "output_tokens"):
        assert np.array_equal(getattr(parallel, name), getattr(serial, name)), name
    assert parallel.worker.values() == serial.worker.values()
    assert parallel.errors == serial.errors


def test_not_a_run_directory(tmp_path: Path) -> None:
    with pytest.raises(RunLoadError, match="not a directory"):
        load_run(tmp_path / "nope")
    with pytest.raises(RunLoadError, match="not a run directory"):
        load_run(tmp_path)


def test_a_field_of_the_wrong_type_is_named(tmp_path: Path) -> None:
    path = two_workers(tmp_path)
    (path / "requests-w1.jsonl").write_bytes(
        b'{"id":"z","worker":"w1","step":1,"intended_ns":1,"sent_ns":"soon","end_ns":2,'
        b'"chunk_offsets_ns":[],"chunk_tokens":[]}\n'
    )
    with pytest.raises(RunLoadError, match=r"requests-w1\.jsonl: field 'sent_ns' .* 'soon'"):
        load_run(path)


def test_a_bad_chunk_array_names_the_line(tmp_path: Path) -> None:
    path = two_workers(tmp_path)
    (path / "requests-w1.jsonl").write_bytes(
        make_record("y", 1, 6000, [1]).to_json()
        + b'{"id":"z","worker":"w1","step":1,"sent_ns":1,"end_ns":2,"chunk_offsets_ns":["a"],"chunk_tokens":[1]}\n'
    )
    with pytest.raises(RunLoadError, match=r"requests-w1\.jsonl:2: chunk_offsets_ns"):
        load_run(path)


def test_other_key_orders_and_spacing_read_the_same(tmp_path: Path) -> None:
    import json
    from dataclasses import asdict

    import orjson

    rec = asdict(make_record("k", 0, 1000, [10, 20, 35], [2, 1, 3]))
    reordered = dict(reversed(list(rec.items())))  # chunk_tokens before chunk_offsets_ns
    (tmp_path / "requests-a.jsonl").write_bytes(orjson.dumps(reordered) + b"\n")
    (tmp_path / "requests-b.jsonl").write_text(json.dumps(rec) + "\n")  # ": " and ", " separators
    req = load_run(tmp_path).requests
    assert req.n == 2
    assert req.chunk_offsets_ns.tolist() == [10_000_000, 20_000_000, 35_000_000] * 2
    assert req.chunk_tokens.tolist() == [2, 1, 3] * 2
    assert req.chunk_start.tolist() == [0, 3, 6]
    assert req.output_tokens.tolist() == [6, 6]
