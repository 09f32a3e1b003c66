"""Following a server log file: appearing late, truncated, rotated; from its end or its start."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from loadgen.telemetry.streams import FileLines, split_command


def follow(path: Path, from_start: bool = False) -> tuple[FileLines, list[str], list[dict[str, Any]]]:
    got: list[str] = []
    events: list[dict[str, Any]] = []
    fl = FileLines(
        "log",
        path,
        lambda line, _t: got.append(line),
        events.append,
        threading.Event(),
        from_start=from_start,
        poll_s=0.02,
    )
    fl.start()
    return fl, got, events


def until(pred: Any, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not pred():
        time.sleep(0.02)
    assert pred()


def append(path: Path, text: str) -> None:
    with open(path, "a") as fh:
        fh.write(text)


def test_follows_from_the_end_through_truncation_and_rotation(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("old line\n")
    fl, got, events = follow(log)
    until(lambda: any(e["kind"] == "started" for e in events))
    append(log, "one\ntw")
    until(lambda: got == ["one"])
    append(log, "o\n")
    until(lambda: got == ["one", "two"])  # a line split across writes arrives whole
    log.write_text("")  # truncated (copytruncate rotation)
    append(log, "three\n")
    until(lambda: got[-1:] == ["three"])
    os.rename(log, tmp_path / "server.log.1")  # rotated: a new file takes the name
    log.write_text("four\n")
    until(lambda: got[-1:] == ["four"])
    fl.stop()
    assert got == ["one", "two", "three", "four"]
    assert not fl.thread.is_alive()


def test_a_file_that_appears_later_is_read_from_its_start(tmp_path: Path) -> None:
    log = tmp_path / "later.log"
    fl, got, events = follow(log)
    until(lambda: any(e["kind"] == "source_unavailable" for e in events))
    log.write_text("first\nsecond\n")
    until(lambda: got == ["first", "second"])
    fl.stop()
    assert "waiting for it to appear" in events[0]["message"]


def test_from_start_reads_existing_lines(tmp_path: Path) -> None:
    log = tmp_path / "s.log"
    log.write_text("a\nb\n")
    fl, got, _ = follow(log, from_start=True)
    until(lambda: got == ["a", "b"])
    fl.stop()


def test_commands_are_split_without_a_shell() -> None:
    assert split_command("journalctl -u 'sglang server' -f -o cat", "--server-logs") == [
        "journalctl",
        "-u",
        "sglang server",
        "-f",
        "-o",
        "cat",
    ]
    # shell syntax stays literal arguments: nothing here ever reaches a shell
    assert split_command("docker logs -f x; rm -rf /", "--server-logs") == [
        "docker",
        "logs",
        "-f",
        "x;",
        "rm",
        "-rf",
        "/",
    ]
    with pytest.raises(ValueError, match="--server-logs: the command is empty"):
        split_command("  ", "--server-logs")
    with pytest.raises(ValueError, match="--gpu-source: cannot split"):
        split_command("ssh 'host", "--gpu-source")
