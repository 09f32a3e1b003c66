"""A hostile OpenAI-style server for tests: one malicious behaviour per request. Not part of loadgen.

``python tests/integration/hostile_server.py --port-file F [--kinds a,b,c]`` serves on 127.0.0.1
(port 0), writes ``<port> <trap port>`` to F, and answers each POST with the behaviour named by its
``X-Hostile`` header, or else the next of ``--kinds`` in turn. The trap port is where redirects
point; every connection it accepts is appended to ``<port file>.trap`` (a test asserts none came).
It runs as its own process (asyncio, raw bytes) so that a flood from it never shares a loop with
the client under test.

Behaviours (each ``data:`` event is what an OpenAI-style stream would carry, unless said):
  ok               a normal 3-chunk stream with usage and [DONE]
  endless_headers  200 status line, then header lines forever
  huge_chunk       a chunk announced as 10 GB, then role-only events forever
  endless_line     a ``data:`` line that never ends (``x`` forever, no newline)
  huge_body        a non-streamed body announced as 10 GB (Content-Length), ``x`` forever
  tiny_chunks      a normal 2,000-event stream sent one byte per HTTP chunk (~150k chunks)
  bad_utf8         content chunks with invalid UTF-8 in their JSON and in a bare data line
  usage_huge       a normal stream whose usage claims 10^12 completion and prompt tokens
  deep_json        a ``data:`` payload of 100,000 ``[``, then [DONE]
  redirect301/302/307  a redirect to the trap port
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

KINDS = (
    "ok",
    "endless_headers",
    "huge_chunk",
    "endless_line",
    "huge_body",
    "tiny_chunks",
    "bad_utf8",
    "usage_huge",
    "deep_json",
    "redirect301",
    "redirect302",
    "redirect307",
)

_SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def _event(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _content(text: str) -> bytes:
    return _event({"id": "h", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": text}}]})


def _final(completion_tokens: int, prompt_tokens: int = 10) -> bytes:
    stop = {"id": "h", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    usage = {
        "id": "h",
        "choices": [],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens},
    }
    return _event(stop) + _event(usage) + b"data: [DONE]\n\n"


def _chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def normal_stream(n: int, completion_tokens: int | None = None, prompt_tokens: int = 10) -> bytes:
    """The body (not chunk-encoded) of a clean stream of ``n`` content events."""
    body = b"".join(_content(f" w{i}") for i in range(n))
    return body + _final(n if completion_tokens is None else completion_tokens, prompt_tokens)


TINY_EVENTS = 2000
_TINY_BODY = normal_stream(TINY_EVENTS)
TINY_CHUNKS = len(_TINY_BODY)
_TINY = b"".join(b"1\r\n%c\r\n" % b for b in _TINY_BODY) + b"0\r\n\r\n"


class Hostile:
    def __init__(self, kinds: list[str], trap_log: Path) -> None:
        self.kinds = kinds
        self.count = 0
        self.trap_log = trap_log
        self.trap_port = 0

    async def trap(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with self.trap_log.open("a") as fh:
            fh.write("connection\n")
        writer.close()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                kind = ""
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.lower() == b"content-length":
                        length = int(value)
                    elif name.lower() == b"x-hostile":
                        kind = value.strip().decode()
                await reader.readexactly(length)
                if head.startswith(b"GET"):
                    body = b'{"data":[{"id":"hostile"}]}'
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
                    await writer.drain()
                    continue
                if not kind:
                    kind = self.kinds[self.count % len(self.kinds)]
                    self.count += 1
                if not await self.respond(kind, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def respond(self, kind: str, w: asyncio.StreamWriter) -> bool:
        """Write one answer; False when the connection is to be closed after it."""
        if kind == "ok":
            w.write(_SSE_HEAD + _chunked(normal_stream(3)) + b"0\r\n\r\n")
        elif kind == "usage_huge":
            w.write(_SSE_HEAD + _chunked(normal_stream(3, 10**12, 10**12)) + b"0\r\n\r\n")
        elif kind == "tiny_chunks":
            w.write(_SSE_HEAD + _TINY)
        elif kind == "bad_utf8":
            body = (
                b'data: {"id":"h","choices":[{"index":0,"delta":{"content":"\xff\xfe bad"}}]}\n\n'
                b"data: \xc3\x28 not json, not utf-8\n\n" + _content(" fine") + _final(1)
            )
            w.write(_SSE_HEAD + _chunked(body) + b"0\r\n\r\n")
        elif kind == "deep_json":
            w.write(_SSE_HEAD + _chunked(b"data: " + b"[" * 100_000 + b"\n\n" + _final(0)) + b"0\r\n\r\n")
        elif kind.startswith("redirect"):
            code = int(kind[-3:])
            where = f"http://127.0.0.1:{self.trap_port}/v1/chat/completions"
            w.write(b"HTTP/1.1 %d Moved\r\nLocation: %s\r\nContent-Length: 0\r\n\r\n" % (code, where.encode()))
        else:
            return await self.flood(kind, w)
        await w.drain()
        return True

    async def flood(self, kind: str, w: asyncio.StreamWriter) -> bool:
        """Write forever (until the client hangs up): the client's bounds must end the call."""
        if kind == "endless_headers":
            w.write(b"HTTP/1.1 200 OK\r\n")
            block = b"".join(b"X-Junk-%d: %s\r\n" % (i, b"a" * 1000) for i in range(64))
        elif kind == "huge_chunk":
            w.write(_SSE_HEAD + b"%x\r\n" % (10 * 10**9))
            block = _event({"id": "h", "choices": [{"index": 0, "delta": {"role": "assistant"}}]}) * 1000
        elif kind == "endless_line":
            w.write(_SSE_HEAD + b"%x\r\n" % (10 * 10**9) + b"data: ")
            block = b"x" * 65536
        else:  # huge_body
            w.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (10 * 10**9))
            block = b"x" * 65536
        while True:
            w.write(block)
            await w.drain()


async def main(port_file: Path, kinds: list[str]) -> None:
    hostile = Hostile(kinds, Path(str(port_file) + ".trap"))
    trap = await asyncio.start_server(hostile.trap, "127.0.0.1", 0)
    hostile.trap_port = trap.sockets[0].getsockname()[1]
    server = await asyncio.start_server(hostile.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    port_file.write_text(f"{port} {hostile.trap_port}\n")
    async with server, trap:
        await server.serve_forever()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--port-file", type=Path, required=True)
    p.add_argument("--kinds", default=",".join(KINDS))
    a = p.parse_args()
    asyncio.run(main(a.port_file, a.kinds.split(",")))
