"""Journal-like log lines, the way a systemd unit running SGLang or vLLM would leave them.

Each line: ``<ISO-8601 time with microseconds and offset> <host> <unit>[<pid>]: <server line>``;
the server line is SGLang's ``[YYYY-MM-DD HH:MM:SS TP0] message`` or vLLM's
``INFO MM-DD HH:MM:SS [file.py:NN] message``. Lines go to a file (buffered, flushed at least every
0.2 s by the server and at once for warnings and errors) or to stderr.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from typing import IO


class LogSink:
    def __init__(self, path: str | None, style: str) -> None:
        self.style = style
        self.host = socket.gethostname().split(".")[0] or "localhost"
        self.unit = "vllm" if style == "vllm" else "sglang"
        self.pid = os.getpid()
        self._fh: IO[str] = open(path, "a", encoding="utf-8") if path else sys.stderr  # noqa: SIM115

    def _prefix(self, level: str) -> str:
        now = time.time()
        lt = time.localtime(now)
        micros = int((now % 1) * 1e6)
        off = time.strftime("%z", lt)
        iso = time.strftime("%Y-%m-%dT%H:%M:%S", lt) + f".{micros:06d}{off[:3]}:{off[3:]}"
        head = f"{iso} {self.host} {self.unit}[{self.pid}]: "
        if self.style == "vllm":
            return head + f"{level} {time.strftime('%m-%d %H:%M:%S', lt)} [engine.py:1] "
        return head + f"[{time.strftime('%Y-%m-%d %H:%M:%S', lt)} TP0] "

    def info(self, message: str) -> None:
        self._write("INFO", message, flush=False)

    def warning(self, message: str) -> None:
        self._write("WARNING", message, flush=True)

    def error(self, message: str) -> None:
        self._write("ERROR", message, flush=True)

    def _write(self, level: str, message: str, flush: bool) -> None:
        prefix = self._prefix(level)
        for line in message.split("\n"):
            self._fh.write(prefix + line + "\n")
        if flush:
            self._fh.flush()

    def flush(self) -> None:
        try:
            self._fh.flush()
        except ValueError:
            pass

    def close(self) -> None:
        self.flush()
        if self._fh is not sys.stderr:
            self._fh.close()
