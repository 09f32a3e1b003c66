"""Micro-benchmark of the parser hot path: ``SSEDecoder.feed`` + ``ChunkAccumulator.add_all`` per
chunk, and ``ChunkAccumulator.finish`` per chunk, on a realistic 256-chunk chat stream.

    PYTHONPATH=. python benchmarks/parse_bench.py [--chunks 256] [--repeat 7] [--shape vllm|sglang|vllm-usage]

Read patterns: one SSE event per read (a paced server at low load), reads of 4 KiB and 16 KiB cut
anywhere (events split across reads, as a kernel coalescing a busy server's writes does) and the
whole response in one read. Prints the best of ``--repeat`` runs in ns per output chunk; then
``--streams`` streams fed round-robin, one event per read, and finished afterwards (cold caches,
as at high concurrency). The last line is one JSON object with the same figures. Pure CPU: no
sockets involved.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable
from functools import partial

import orjson

from loadgen.parse.sse import SSEDecoder
from loadgen.parse.stream import ChunkAccumulator

_WORDS = (
    " the",
    " model",
    " serves",
    " tokens",
    " at",
    " high",
    " concurrency",
    ",",
    " and",
    " its",
    " latency",
    " grows",
    " when",
    " the",
    " KV",
    " cache",
    " fills",
    ".",
    "\n",
    " A",
    " load",
    " generator",
    " must",
    " not",
    " be",
    " the",
    " bottleneck",
    ";",
    " it",
    " measures",
    " é",
    ' "quoted"',
    " 東京",
    " 42",
    "\n\n",
    " —",
    " ok",
)


def build_stream(n_chunks: int, shape: str, seed: int = 7) -> bytes:
    """A chat completion stream as vLLM or SGLang sends it, with include_usage on
    (``vllm-usage``: vLLM with continuous_usage_stats, a usage object in every chunk)."""
    rng = random.Random(seed)
    rid = "chatcmpl-" + "".join(rng.choice("0123456789abcdef") for _ in range(32))
    head = {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": 1764000000,
        "model": "meta-llama/Llama-3.1-8B-Instruct",
    }

    def chunk(
        delta: dict[str, object] | None,
        finish: str | None = None,
        usage: dict[str, object] | None = None,
        empty: bool = False,
    ) -> bytes:
        obj: dict[str, object] = dict(head)
        if empty:
            obj["choices"] = []
        elif shape == "sglang":
            d: dict[str, object] = {"role": None, "content": None, "reasoning_content": None, "tool_calls": None}
            d.update(delta or {})
            obj["choices"] = [{"index": 0, "delta": d, "logprobs": None, "finish_reason": finish, "matched_stop": None}]
        else:
            obj["choices"] = [{"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish}]
        if shape == "sglang" or usage is not None:
            obj["usage"] = usage
        elif shape == "vllm-usage":
            obj["usage"] = {"prompt_tokens": 60, "completion_tokens": count, "total_tokens": 60 + count}
        return b"data: " + orjson.dumps(obj) + b"\n\n"

    count = 0
    parts = [chunk({"role": "assistant", "content": ""})]
    for count in range(1, n_chunks + 1):  # noqa: B007 (read by chunk())
        parts.append(chunk({"content": rng.choice(_WORDS)}))
    parts.append(chunk({}, finish="length"))
    parts.append(
        chunk(
            None, usage={"prompt_tokens": 60, "completion_tokens": n_chunks, "total_tokens": 60 + n_chunks}, empty=True
        )
    )
    parts.append(b"data: [DONE]\n\n")
    return b"".join(parts)


def split_events(stream: bytes) -> list[bytes]:
    return [e + b"\n\n" for e in stream.split(b"\n\n") if e]


def split_fixed(stream: bytes, size: int) -> list[bytes]:
    return [stream[i : i + size] for i in range(0, len(stream), size)]


def hot_path(reads: list[bytes]) -> ChunkAccumulator:
    """What a transport does per read: clock first, then decode and store."""
    clock = time.perf_counter_ns
    dec = SSEDecoder()
    acc = ChunkAccumulator()
    feed = dec.feed
    add_all = acc.add_all
    for data in reads:
        t = clock()
        payloads = feed(data)
        if payloads:
            add_all(payloads, t)
    tail = dec.flush()
    if tail:
        add_all(tail, clock())
    return acc


def interleaved(shape: str, n_chunks: int, n_streams: int) -> tuple[float, float]:
    """``n_streams`` concurrent streams, one event per read, round-robin (a paced server at
    concurrency n_streams): ns per chunk of the hot path, and of finish() afterwards, with the
    caches as cold as a real run leaves them. Pessimistic for the hot path: the read buffers here
    were built in advance (cold), while a socket read returns freshly written bytes."""
    events = [split_events(build_stream(n_chunks, shape, seed=i)) for i in range(n_streams)]
    clock = time.perf_counter_ns
    decs = [SSEDecoder() for _ in range(n_streams)]
    accs = [ChunkAccumulator() for _ in range(n_streams)]
    t0 = clock()
    for k in range(len(events[0])):
        for dec, acc, evs in zip(decs, accs, events, strict=True):
            t = clock()
            payloads = dec.feed(evs[k])
            if payloads:
                acc.add_all(payloads, t)
    t1 = clock()
    for acc in accs:
        acc.finish(t1)
    t2 = clock()
    per = n_streams * n_chunks
    return (t1 - t0) / per, (t2 - t1) / per


def best_ns(fn: Callable[[], object], repeat: int, inner: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        for _ in range(inner):
            fn()
        best = min(best, (time.perf_counter_ns() - t0) / inner)
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chunks", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--inner", type=int, default=20, help="streams per timed run")
    ap.add_argument("--shape", choices=("vllm", "sglang", "vllm-usage"), default="vllm")
    ap.add_argument("--streams", type=int, default=256, help="concurrent streams for the interleaved run")
    args = ap.parse_args(argv)

    stream = build_stream(args.chunks, args.shape)
    n = args.chunks
    patterns = {
        "event_per_read": split_events(stream),
        "reads_4k": split_fixed(stream, 4096),
        "reads_16k": split_fixed(stream, 16384),
        "one_read": [stream],
    }
    res = hot_path(patterns["one_read"]).finish(0)
    assert len(res.chunk_times_ns) == n and res.done, "benchmark stream did not decode"
    figures: dict[str, float] = {}
    print(
        f"{args.shape} stream: {n} output chunks, {len(stream)} bytes, "
        f"{len(stream) / (n + 4):.0f} bytes/event; ns per output chunk (best of {args.repeat})"
    )
    for name, reads in patterns.items():
        ns = best_ns(partial(hot_path, reads), args.repeat, args.inner) / n
        figures[f"hot_{name}_ns"] = round(ns, 1)
        print(f"  feed+add   {name:<15} {len(reads):>4} reads  {ns:8.1f} ns/chunk")
    # finish() is once per accumulator (a second call returns the cached result): fresh ones.
    accs = iter([hot_path(patterns["reads_16k"]) for _ in range(args.repeat * args.inner)])
    ns = best_ns(lambda: next(accs).finish(0), args.repeat, args.inner) / n
    figures["finish_ns"] = round(ns, 1)
    print(f"  finish                                 {ns:8.1f} ns/chunk")
    payloads = [p for p in stream.split(b"\n\n") if p]
    loads = orjson.loads
    ns = best_ns(lambda: [loads(p[6:]) for p in payloads[:-1]], args.repeat, args.inner) / n
    figures["orjson_each_ns"] = round(ns, 1)
    print(f"  reference: orjson.loads of every chunk {ns:8.1f} ns/chunk")
    runs = [interleaved(args.shape, n, args.streams) for _ in range(3)]
    hot, fin = min(runs, key=sum)
    figures["interleaved_hot_ns"] = round(hot, 1)
    figures["interleaved_finish_ns"] = round(fin, 1)
    print(f"  {args.streams} streams interleaved, 1 event/read: feed+add {hot:.1f}, finish {fin:.1f} ns/chunk")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
