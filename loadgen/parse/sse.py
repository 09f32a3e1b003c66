"""Incremental Server-Sent Events decoder: bytes in, ``data`` payloads out. No I/O.

``SSEDecoder.feed(data)`` takes whatever a socket read returned (any split: inside ``data:``,
inside ``\\r\\n``, one byte at a time) and returns the payloads of every event completed by it, in
order; ``flush()`` ends the stream. Line handling follows the WHATWG "event stream" rules: lines
end with LF, CRLF or a lone CR; a leading UTF-8 BOM is dropped; ``:`` lines are comments
(keep-alives, counted in ``comments``); ``field: value`` loses one leading space; ``data`` lines
of one event are joined with ``\\n``; a blank line dispatches; an event with no ``data`` line
dispatches nothing. ``id`` and ``retry`` are kept in ``last_event_id`` / ``retry_ms``; unknown
fields are ignored.

Events named with ``event:`` other than ``message`` (``event: error``) are not returned by
``feed``: they go to ``named`` as ``(name, payload)`` for the caller to inspect.

Deliberate departure from the spec: at end of stream ``flush()`` also returns a final event that
was not closed by a blank line (a browser drops it). Some servers omit the last blank line, and a
caller that sees a truncated JSON payload can tell "truncated" from "missing" only if it gets it.

Cost: the common read (a clean event boundary, then one or more ``data: ...\\n\\n`` events and
nothing else) is decoded with C-level bytes operations over the whole buffer (one ``find`` for a
single event; one ``split`` and one ``join`` for several), with no per-event Python work. Anything
else (comments, CRs, other fields, partial lines) takes the line-by-line path, which is still
linear: pieces without a newline are only collected, and joined once a line can complete.
"""

from __future__ import annotations

_BOM = b"\xef\xbb\xbf"
_LF = 10
_CR = 13
_COLON = 58


class SSEDecoder:
    """Pure, incremental SSE decoder for one response stream (create one per stream)."""

    __slots__ = (
        "_bom_pending",
        "_data",
        "_dirty",
        "_event",
        "_skip_lf",
        "_tail",
        "comments",
        "last_event_id",
        "named",
        "retry_ms",
    )

    def __init__(self) -> None:
        # _dirty is True whenever the fast path may not run: a partial line in _tail, a CR whose
        # LF may still come, fields of an unfinished event, or the stream start (BOM check).
        self._dirty = True
        self._bom_pending = True
        self._skip_lf = False
        self._tail: list[bytes] = []
        self._data: list[bytes] = []
        self._event = b""
        self.comments = 0
        self.named: list[tuple[str, bytes]] = []
        self.last_event_id: str | None = None
        self.retry_ms: int | None = None

    def feed(self, data: bytes) -> list[bytes]:
        """Decode one read; return the ``data`` payloads of the (unnamed) events it completed."""
        if not self._dirty:
            # Fast paths, at a clean event boundary with no CR anywhere: a read holding exactly one
            # ``data: ...\n\n`` event (first LF at len-2: memchr, no copy but the payload), or
            # several such events and nothing else (no LF left once the separators are cut out).
            first_lf = data.find(_LF)
            if first_lf == len(data) - 2:
                if data[-1] == _LF and data[:6] == b"data: " and _CR not in data:
                    return [data[6:-2]]
            elif first_lf > 0 and data[-2:] == b"\n\n" and data[:6] == b"data: " and _CR not in data:
                parts = data[6:-2].split(b"\n\ndata: ")
                if _LF not in b"".join(parts):
                    return parts
        return self._feed_general(data)

    @property
    def partial(self) -> bool:
        """Bytes of an event that is not complete yet are held (or a CR whose LF may follow)."""
        return self._dirty

    def flush(self) -> list[bytes]:
        """End of stream: complete a pending last line and dispatch a pending event (see module doc)."""
        tail = b"".join(self._tail)
        self._tail = []
        self._skip_lf = False
        out = self._lines(tail + b"\n\n")
        self._data = []
        self._event = b""
        self._dirty = self._bom_pending
        return out

    def _feed_general(self, data: bytes) -> list[bytes]:
        if self._skip_lf and data:
            self._skip_lf = False
            if data[0] == _LF:  # the LF of a CRLF split across reads
                data = data[1:]
        if _CR in data:
            if data[-1] == _CR:
                self._skip_lf = True
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        tail = self._tail
        if _LF not in data:
            if data:
                tail.append(data)
            self._dirty = True
            return []
        if tail:
            tail.append(data)
            data = b"".join(tail)
            self._tail = []
        out = self._lines(data)
        self._dirty = bool(self._tail) or self._skip_lf or bool(self._data) or bool(self._event) or self._bom_pending
        return out

    def _lines(self, buf: bytes) -> list[bytes]:
        """Process LF-only ``buf`` that holds at least one LF; keep the partial last line in _tail."""
        if self._bom_pending:
            self._bom_pending = False
            if buf[:3] == _BOM:
                buf = buf[3:]
        out: list[bytes] = []
        if not self._data and not self._event:
            # At an event boundary: decode the complete events in bulk when they are plain.
            cut = buf.rfind(b"\n\n") + 2
            if cut >= 2 and buf[:6] == b"data: ":
                parts = buf[6 : cut - 2].split(b"\n\ndata: ")
                if _LF not in b"".join(parts):
                    out = parts
                    buf = buf[cut:]
                    if _LF not in buf:
                        if buf:
                            self._tail.append(buf)
                        return out
        lines = buf.split(b"\n")
        last = lines.pop()
        if last:
            self._tail.append(last)
        data = self._data
        for line in lines:
            if not line:
                if data:
                    payload = b"\n".join(data)
                    event = self._event
                    if not event or event == b"message":
                        out.append(payload)
                    else:
                        self.named.append((event.decode("utf-8", "replace"), payload))
                    data = self._data = []
                self._event = b""
                continue
            if line[0] == _COLON:
                self.comments += 1
                continue
            colon = line.find(b":")
            if colon < 0:
                name, value = line, b""
            else:
                name = line[:colon]
                value = line[colon + 1 :]
                if value[:1] == b" ":
                    value = value[1:]
            if name == b"data":
                data.append(value)
            elif name == b"event":
                self._event = value
            elif name == b"id":
                if 0 not in value:
                    self.last_event_id = value.decode("utf-8", "replace")
            elif name == b"retry" and value.isdigit():
                self.retry_ms = int(value)
        return out
