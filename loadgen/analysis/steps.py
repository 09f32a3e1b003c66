"""Per-step statistics over each step's steady window (README, "Metrics").

The window of a step is ``[steady_ns, end_ns)``: warm-up excluded, half-open.

- Latency statistics use the step's requests (``step == id``) *sent* inside the window (they may
  end after it) that succeeded (no ``error_class``, HTTP status 2xx or none):
  TTFT = ``first_chunk_ns - intended_ns``; E2E = ``end_ns - intended_ns``;
  TPOT = (E2E - TTFT) / (output tokens - 1), for requests with at least 2 output tokens;
  ITL = every gap between successive text chunks of a request, pooled over the requests.
  Each as mean, p50, p90, p99 in milliseconds (None without data). Percentiles are numpy's default
  ``linear`` method (interpolation between the two closest ranks; type 7 of Hyndman & Fan).
- Aggregate output tok/s = output tokens that *arrived* inside the window / window length, over
  every request of the run (a request sent in warm-up that streams into the window counts for the
  tokens it received there). A chunk arrives at ``sent_ns + chunk_offsets_ns[i]``; its
  ``chunk_tokens[i]`` are scaled so that a request's chunks sum to its ``output_tokens`` (the
  server's usage is truth when the stream parser could only count chunks). A request without text
  chunks (non-streaming) delivers its output tokens at ``end_ns``.
- Per-request tok/s = output tokens / E2E, the mean over the successful requests above.
- Output tokens of a request: ``output_tokens`` (source in ``tokens_source``); when null, the sum
  of its ``chunk_tokens`` (source "chunks").
- Requests failed / errors: the step's requests sent inside the window that failed, by class.
- Timing (``timing``): of those requests, the share of TTFTs that may read long by more than
  ``TIMING_TOLERANCE_NS`` (the first chunk's bytes came merged with later ones, records'
  ``chunk_late_ns``; or the request went out that much after its send time, ``send_late_ns``),
  the share of ITL gaps with such an end, the largest such bound, and how many requests were timed
  when read rather than when the kernel received them (``chunk_clock`` ``read``); and in a closed
  loop, the share of the users' time in the window that went by between when a user meant to send
  its next request (its previous answer's last bytes in, plus the think time) and when it went out,
  counting sends more than ``LATE_SEND_NS`` late (``user_late_ns``; the load generator could not
  run), with the largest such delay: then fewer requests were in flight than the step's users. The
  analysis of the load generator's own loop lag and the "timing uncertain" mark are in
  ``client_load``.
- A step is invalid when it never reached its steady window ("not steady"; "not steady: ended during
  its warm-up (skipped)" for one that ended early, e.g. steered from the web UI), served no request
  ("server served nothing") or fewer than ``min_ok_requests`` ("too few requests (n < k)").
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final, NamedTuple

import numpy as np
import numpy.typing as npt

from loadgen.analysis.contracts import LatencyStats, StepSummary, TimingSummary
from loadgen.analysis.load import MISSING, TIMING_TOLERANCE_NS, Requests, Run, Step

PERCENTILE_METHOD: Final = "linear"
DEFAULT_MIN_OK_REQUESTS = 5
LATE_SEND_NS = 10_000_000
"""A closed-loop user's send later than this after it was due counts as time the load was not held
(below it: building the request and the loop's turn, ~1 ms)."""
NS_PER_MS = 1e6
NS_PER_S = 1e9
_NOT_A_GAP = np.iinfo(np.int64).max
_SLICE_CHUNKS = 4_000_000  # per-chunk temporaries are built in slices of at most this many chunks

FArr = npt.NDArray[np.float64]
IArr = npt.NDArray[np.int64]
BArr = npt.NDArray[np.bool_]


def dist_ms(values_ns: npt.NDArray[Any]) -> LatencyStats:
    """mean, p50, p90, p99 of nanosecond values, in milliseconds; all None for no values.

    Reorders ``values_ns`` in place (pass a copy to keep the order)."""
    if len(values_ns) == 0:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    p50, p90, p99 = np.percentile(values_ns, [50, 90, 99], method=PERCENTILE_METHOD, overwrite_input=True)
    return {
        "mean": float(np.mean(values_ns, dtype=np.float64)) / NS_PER_MS,
        "p50": float(p50) / NS_PER_MS,
        "p90": float(p90) / NS_PER_MS,
        "p99": float(p99) / NS_PER_MS,
    }


def mark_invalid(row: StepSummary, reason: str) -> None:
    """Mark a summary step row invalid, keeping earlier reasons ("a; b")."""
    row["valid"] = False
    prev = row.get("invalid_reason")
    row["invalid_reason"] = f"{prev}; {reason}" if prev else reason


def not_steady_reason(step: Step) -> str:
    """Why a step has no steady window: one that ended (skipped, load changed, stopped) before its
    warm-up did says so; a killed one is just "not steady"."""
    if step.end_reason is not None and not step.steady_logged:
        return f"not steady: ended during its warm-up ({step.end_reason})"
    return "not steady"


def _gather(starts: IArr, counts: IArr) -> IArr:
    """Indices of the concatenated ranges ``[starts[i], starts[i] + counts[i])``."""
    total = int(counts.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64)
    before = np.cumsum(counts) - counts
    return np.repeat(starts - before, counts) + np.arange(total, dtype=np.int64)


def _slices(rows: IArr, counts: IArr) -> Iterator[IArr]:
    """Split ``rows`` into consecutive groups of at most ~_SLICE_CHUNKS chunks (memory bound)."""
    if len(rows) == 0:
        return
    cum = np.cumsum(counts[rows])
    lo = 0
    while lo < len(rows):
        base = cum[lo - 1] if lo else 0
        hi = int(np.searchsorted(cum, base + _SLICE_CHUNKS, side="right"))
        hi = max(hi, lo + 1)
        yield rows[lo:hi]
        lo = hi


def ok_mask(req: Requests) -> BArr:
    """The success rule, the one place it is written: no error class, and a 2xx status (or none
    recorded). Everything else failed (a cancelled request too; it is also counted on its own)."""
    status = req.status
    status_ok = (status == 0) | ((status >= 200) & (status < 300))
    ok: BArr = (req.error_class.codes == req.error_class.code_of(None)) & status_ok
    return ok


def failure_class_names(req: Requests, rows: IArr) -> list[str]:
    """Error class of each failed row; a failure without a class is named from its status."""
    out: list[str] = []
    for name, status in zip(req.error_class.values(rows), req.status[rows].tolist(), strict=True):
        if name is not None:
            out.append(name)
        elif status >= 500:
            out.append("http_5xx")
        elif status >= 400:
            out.append("http_4xx")
        else:
            out.append("other")
    return out


class _Latencies(NamedTuple):
    """The latencies of a step's successful requests (ns): ``ttft`` of those with a first chunk
    (``has_first``), ``tpot`` of those with one and at least 2 output tokens (``out``)."""

    out: IArr
    has_first: BArr
    ttft: IArr
    e2e: IArr
    tpot: FArr


class StepAnalysis:
    """Per-run arrays computed once, then one summary row per step (:meth:`row`)."""

    def __init__(self, run: Run, min_ok_requests: int = DEFAULT_MIN_OK_REQUESTS) -> None:
        self.run = run
        self.min_ok_requests = min_ok_requests
        req: Requests = run.requests
        self.req = req
        self.counts: IArr = req.chunk_counts
        self.ok: BArr = ok_mask(req)
        # the client stopped these itself (a user stopped at a step change or the end, Ctrl-C):
        # not a failure of the server, counted on their own
        self.cancelled: BArr = req.error_class.codes == req.error_class.code_of("cancelled")
        out = req.output_tokens
        self.out_from_chunks: BArr = out == MISSING
        self.out_eff: IArr = out.copy()
        missing = np.flatnonzero(self.out_from_chunks)
        if len(missing):
            self.out_eff[missing] = self.chunk_sums(missing)

    def chunk_sums(self, rows: IArr) -> IArr:
        """Sum of ``chunk_tokens`` of each row (0 for a row without chunks).

        Computed for the rows asked only: usage is the usual source of a request's token count."""
        n = self.counts[rows]
        sums = np.zeros(len(rows), dtype=np.int64)
        has = n > 0
        if not has.any():
            return sums
        toks = self.req.chunk_tokens[_gather(self.req.chunk_start[rows[has]], n[has])]
        starts = np.cumsum(n[has]) - n[has]
        sums[has] = np.add.reduceat(toks, starts)
        return sums

    def chunk_scale(self, rows: IArr) -> FArr:
        """Factor on each row's chunk tokens so that they sum to its output tokens (1 when either
        is unknown or zero)."""
        sums = self.chunk_sums(rows)
        out = self.out_eff[rows]
        use = (sums > 0) & (out > 0)
        scale = np.ones(len(rows), dtype=np.float64)
        scale[use] = out[use] / sums[use]
        return scale

    # -- pieces -------------------------------------------------------------------------------

    def tokens_arrived(self, a_ns: int, b_ns: int, among: BArr | None = None) -> float:
        """Output tokens (scaled to usage) that arrived in ``[a_ns, b_ns)``, over all requests (or
        the rows ``among`` selects, e.g. one call type).

        A request whose first and last chunk both arrived inside counts whole; only the requests
        that straddle a window edge are looked at chunk by chunk.
        """
        req, counts = self.req, self.counts
        near = (req.sent_ns < b_ns) & (req.end_ns >= a_ns)
        cand = np.flatnonzero(near if among is None else near & among)
        chunked = cand[counts[cand] > 0]
        starts = req.chunk_start[chunked]
        sent = req.sent_ns[chunked]
        first = sent + req.chunk_offsets_ns[starts]
        last = sent + req.chunk_offsets_ns[starts + counts[chunked] - 1]
        whole = chunked[(first >= a_ns) & (last < b_ns)]
        whole_out = self.out_eff[whole]
        total = float(whole_out[whole_out > 0].sum())
        odd = whole[whole_out <= 0]  # chunks but no positive usage: the chunks' own counts
        if len(odd):
            total += float(self.chunk_sums(odd).sum())
        edge = chunked[~((first >= a_ns) & (last < b_ns)) & (last >= a_ns) & (first < b_ns)]
        for rows in _slices(edge, counts):
            n = counts[rows]
            idx = _gather(req.chunk_start[rows], n)
            arrival = np.repeat(req.sent_ns[rows], n)
            arrival += req.chunk_offsets_ns[idx]
            inside = (arrival >= a_ns) & (arrival < b_ns)
            del arrival
            weight = np.repeat(self.chunk_scale(rows), n)
            total += float(np.dot(req.chunk_tokens[idx][inside], weight[inside]))
        plain = cand[counts[cand] == 0]
        end = req.end_ns[plain]
        inside_plain = (end >= a_ns) & (end < b_ns)
        total += float(np.clip(self.out_eff[plain][inside_plain], 0, None).sum())
        return total

    def _runs(self, rows: IArr) -> list[tuple[int, int, IArr]] | None:
        """Runs of consecutive rows as (first chunk, end chunk, indices of the gaps that cross from
        one request to the next within the run); None when the rows are too scattered for runs."""
        cs = self.req.chunk_start
        if len(rows) == 0:
            return []
        breaks = np.flatnonzero(np.diff(rows) != 1) + 1
        if len(breaks) + 1 > max(len(rows) // 16, 64):
            return None
        out: list[tuple[int, int, IArr]] = []
        firsts = rows[np.r_[0, breaks]].tolist()
        lasts = rows[np.r_[breaks - 1, len(rows) - 1]].tolist()
        for r0, r_last in zip(firsts, lasts, strict=True):
            c0, c1 = int(cs[r0]), int(cs[r_last + 1])
            if c1 - c0 < 2:
                continue
            cross = cs[r0 + 1 : r_last + 1] - c0 - 1
            out.append((c0, c1, cross[(cross >= 0) & (cross < c1 - c0 - 1)]))
        return out

    def chunk_gaps(self, rows: IArr) -> IArr:
        """Gaps between successive text chunks of each request in ``rows`` (sorted), pooled (ns).

        Runs of consecutive rows have their chunks side by side in the flat arrays: each run is
        one ``diff`` over a slice, less the gaps that cross from one request to the next. Scattered
        rows (many short runs) are gathered in bounded slices instead.
        """
        runs = self._runs(rows)
        if runs is None:
            return self._gathered_gaps(rows)
        parts: list[IArr] = []
        for c0, c1, cross in runs:
            gaps = np.diff(self.req.chunk_offsets_ns[c0:c1])
            if len(cross):
                keep = np.ones(len(gaps), dtype=bool)
                keep[cross] = False
                gaps = gaps[keep]
            parts.append(gaps)
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)

    def itl_ms(self, rows: IArr) -> LatencyStats:
        """``dist_ms(self.chunk_gaps(rows))``, without building the pooled array twice.

        The gaps of each run are written into one buffer with the crossing gaps set to the largest
        int64; a partition then leaves them above every rank a percentile reads, and the mean is
        the telescoped sum (last - first chunk offset of each request) / number of gaps.
        """
        runs = self._runs(rows)
        if runs is None:
            return dist_ms(self._gathered_gaps(rows))
        offsets = self.req.chunk_offsets_ns
        total = sum(c1 - c0 - 1 for c0, c1, _ in runs)
        buf = np.empty(total, dtype=np.int64)
        pos = 0
        for c0, c1, cross in runs:
            out = buf[pos : pos + c1 - c0 - 1]
            np.subtract(offsets[c0 + 1 : c1], offsets[c0 : c1 - 1], out=out)
            out[cross] = _NOT_A_GAP
            pos += len(out)
        n_gaps = total - int(np.count_nonzero(buf == _NOT_A_GAP))
        if n_gaps == 0:
            return dist_ms(buf[:0])
        many = rows[self.counts[rows] > 1]
        cs = self.req.chunk_start
        span = int((offsets[cs[many + 1] - 1] - offsets[cs[many]]).sum())
        ranks = np.array([0.50, 0.90, 0.99]) * (n_gaps - 1)
        lo = np.floor(ranks).astype(np.int64)
        hi = np.minimum(lo + 1, n_gaps - 1)
        buf.partition(np.unique(np.r_[lo, hi]))
        below, above = buf[lo].astype(np.float64), buf[hi].astype(np.float64)
        p50, p90, p99 = (below + (ranks - lo) * (above - below)).tolist()
        return {
            "mean": span / n_gaps / NS_PER_MS,
            "p50": p50 / NS_PER_MS,
            "p90": p90 / NS_PER_MS,
            "p99": p99 / NS_PER_MS,
        }

    def _gathered_gaps(self, rows: IArr) -> IArr:
        parts: list[IArr] = []
        rows = rows[self.counts[rows] > 1]
        for group in _slices(rows, self.counts):
            n = self.counts[group]
            offs = self.req.chunk_offsets_ns[_gather(self.req.chunk_start[group], n)]
            gaps = np.diff(offs)
            keep = np.ones(len(gaps), dtype=bool)
            keep[np.cumsum(n)[:-1] - 1] = False  # the gap from one request's last chunk to the next's first
            parts.append(gaps[keep])
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)

    # -- one step -----------------------------------------------------------------------------

    def window_rows(self, step: Step) -> IArr:
        """The step's requests sent inside its steady window, ``[steady_ns, end_ns)``."""
        sent = self.req.sent_ns
        return np.flatnonzero((self.req.step == step.step) & (sent >= step.steady_ns) & (sent < step.end_ns))

    def ok_rows(self, step: Step) -> IArr:
        """Of :meth:`window_rows`, those that succeeded: the rows the latency figures are taken over."""
        rows = self.window_rows(step)
        return rows[self.ok[rows]]

    def row(self, step: Step) -> StepSummary:
        """The summary row of one step (see the module docstring for each figure)."""
        req = self.req
        a, b = step.steady_ns, step.end_ns
        window_ns = b - a
        sent = req.sent_ns
        rows = self.window_rows(step)
        ok_rows = rows[self.ok[rows]]
        bad_rows = rows[~self.ok[rows] & ~self.cancelled[rows]]
        lat = self.latencies_ns(ok_rows)
        out = lat.out
        rate_rows = (out > 0) & (lat.e2e > 0)
        per_req = out[rate_rows] / (lat.e2e[rate_rows] / NS_PER_S)  # values.per_request_tok_s, vectorized
        n_chunks = self.counts[ok_rows]
        chunk_total = int(n_chunks.sum())
        prompt_mean, requested_mean, cached_frac = self.prompt_figures(ok_rows)
        lag = (sent[rows] - req.intended_ns[rows]).astype(np.float64) / NS_PER_MS
        tokens_in_window = self.tokens_arrived(a, b) if window_ns > 0 else 0.0
        ok_count, bad_count = len(ok_rows), len(bad_rows)
        row: StepSummary = {
            "step": step.step,
            "concurrency": step.concurrency,
            "context_tokens": step.context_tokens,
            "rate": step.rate,
            "start_ns": step.start_ns,
            "steady_ns": step.steady_ns,
            "end_ns": step.end_ns,
            "end_reason": step.end_reason,
            "wall_s": (step.end_ns - step.start_ns) / NS_PER_S,
            "window_s": max(window_ns, 0) / NS_PER_S,
            "output_tok_s": tokens_in_window / (window_ns / NS_PER_S) if window_ns > 0 else None,
            "per_request_tok_s": float(per_req.mean()) if len(per_req) else None,
            "requests_ok": ok_count,
            "requests_failed": bad_count,
            "requests_cancelled": int(self.cancelled[rows].sum()),
            "requests_warmup": int(((req.step == step.step) & (sent < a)).sum()),
            "errors": self.error_counts(bad_rows),
            "ttft_ms": dist_ms(lat.ttft),
            "itl_ms": self.itl_ms(ok_rows),
            "tpot_ms": dist_ms(lat.tpot),
            "e2e_ms": dist_ms(lat.e2e),
            "tokens_per_chunk_mean": float(out[n_chunks > 0].sum()) / chunk_total if chunk_total else None,
            "prompt_tokens_mean": prompt_mean,
            "prompt_tokens_requested_mean": requested_mean,
            "prefix_cached_frac": cached_frac,
            "output_tokens_total": int(out.sum()),
            "output_tokens_mean": float(out.mean()) if ok_count else None,
            "output_tokens_in_window": tokens_in_window,
            "output_tokens_source": self.source_counts(ok_rows),
            "timing": self.timing(ok_rows, lat.has_first, n_chunks, step, rows),
            "schedule_lag_ms": {
                "mean": float(lag.mean()) if len(lag) else None,
                "max": float(lag.max()) if len(lag) else None,
            },
            "valid": True,
            "invalid_reason": None,
        }
        if step.fields:
            row["step_fields"] = dict(step.fields)
        self.mark_validity(row, step, ok_count)
        return row

    def latencies_ns(self, ok_rows: IArr) -> _Latencies:
        """TTFT, E2E and TPOT of the successful rows (ns), with their output tokens."""
        req = self.req
        intended = req.intended_ns[ok_rows]
        first = req.first_chunk_ns[ok_rows]
        end = req.end_ns[ok_rows]
        out = self.out_eff[ok_rows]
        has_first = first != MISSING
        tpot_rows = has_first & (out > 1)
        return _Latencies(
            out=out,
            has_first=has_first,
            ttft=(first - intended)[has_first],
            e2e=end - intended,
            tpot=(end - first)[tpot_rows] / (out[tpot_rows] - 1),
        )

    def prompt_figures(self, ok_rows: IArr) -> tuple[float | None, float | None, float | None]:
        """Mean prompt tokens (the server's count), mean prompt tokens asked for, and the share of
        prompt tokens the server served from its prefix cache (its usage says so); None without data."""
        req = self.req
        prompt_all = req.prompt_tokens[ok_rows]
        prompt = prompt_all[prompt_all != MISSING]
        cached = req.cached_tokens[ok_rows]
        known_cache = (cached != MISSING) & (prompt_all != MISSING) & (prompt_all > 0)
        requested = req.context_tokens[ok_rows]
        requested = requested[requested != MISSING]
        return (
            float(prompt.mean()) if len(prompt) else None,
            float(requested.mean()) if len(requested) else None,
            float(cached[known_cache].sum() / prompt_all[known_cache].sum()) if known_cache.any() else None,
        )

    def mark_validity(self, row: StepSummary, step: Step, ok_count: int) -> None:
        """Mark a step's row invalid when it had no steady window or too few successful requests."""
        if step.end_ns - step.steady_ns <= 0:
            mark_invalid(row, not_steady_reason(step))
        elif ok_count == 0:
            mark_invalid(row, "server served nothing")
        elif ok_count < self.min_ok_requests:
            mark_invalid(row, f"too few requests ({ok_count} < {self.min_ok_requests})")

    def timing(self, ok_rows: IArr, has_first: BArr, n_chunks: IArr, step: Step, rows: IArr) -> TimingSummary:
        req = self.req
        late_first = req.late_first_ns[ok_rows][has_first]
        n_first = len(late_first)
        gaps = int(np.clip(n_chunks - 1, 0, None).sum())
        late_gaps = int(req.late_gaps[ok_rows].sum())
        read_code = req.chunk_clock.code_of("read")
        users_share, users_max = self.users_late(step, rows)
        return {
            "tolerance_ms": TIMING_TOLERANCE_NS / NS_PER_MS,
            "ttft_late_share": float((late_first > TIMING_TOLERANCE_NS).sum() / n_first) if n_first else None,
            "itl_late_share": late_gaps / gaps if gaps else None,
            "ttft_late_max_ms": float(late_first.max()) / NS_PER_MS if n_first else None,
            "read_clock_requests": int((req.chunk_clock.codes[ok_rows] == read_code).sum()) if read_code >= 0 else 0,
            "users_late_share": users_share,
            "users_late_max_ms": users_max,
        }

    def users_late(self, step: Step, rows: IArr) -> tuple[float | None, float | None]:
        """A closed-loop step's users (``rows``: its requests sent in the window): the share of their
        time in the window lost to sends more than ``LATE_SEND_NS`` after they were due, and the largest
        such delay (ms); None in an open loop."""
        window_ns = step.end_ns - step.steady_ns
        if step.rate is not None or not step.concurrency or window_ns <= 0:
            return None, None
        late = self.req.user_late_ns[rows]
        counted = late > LATE_SEND_NS
        if not counted.any():
            return 0.0, 0.0
        # a delay that began before the window counts from the window's start
        lost = np.minimum(late[counted], self.req.sent_ns[rows][counted] - step.steady_ns)
        return float(lost.sum()) / (step.concurrency * window_ns), float(late[counted].max()) / NS_PER_MS

    def failure_classes(self, rows: IArr) -> list[str]:
        return failure_class_names(self.req, rows)

    def error_counts(self, rows: IArr) -> dict[str, int]:
        counts: dict[str, int] = {}
        for name in self.failure_classes(rows):
            counts[name] = counts.get(name, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    def source_counts(self, rows: IArr) -> dict[str, int]:
        codes = self.req.tokens_source.codes[rows]
        from_chunks = self.out_from_chunks[rows]
        out: dict[str, int] = {}
        if from_chunks.any():
            out["chunks"] = int(from_chunks.sum())
        values, counts = np.unique(codes[~from_chunks], return_counts=True)
        for code, count in zip(values.tolist(), counts.tolist(), strict=True):
            name = self.req.tokens_source.names[code] or "none"
            out[name] = out.get(name, 0) + int(count)
        return out


def steady_windows(a: StepAnalysis, steps: list[StepSummary]) -> Iterator[tuple[StepSummary, Step, IArr]]:
    """Each summary row whose step has a steady window, its step, and the rows of the requests sent
    in that window (``[steady_ns, end_ns)``): what a step's figures are computed over."""
    req = a.req
    by_id = {s.step: s for s in a.run.steps}
    for row in steps:
        step = by_id.get(int(row["step"]))
        if step is None or step.steady_ns is None or step.end_ns <= step.steady_ns:
            continue
        lo, hi = step.steady_ns, step.end_ns
        yield row, step, np.flatnonzero((req.step == step.step) & (req.sent_ns >= lo) & (req.sent_ns < hi))


def step_rows(run: Run, min_ok_requests: int = DEFAULT_MIN_OK_REQUESTS) -> list[StepSummary]:
    """One summary row (a ``StepSummary``) per step of ``run``, in step order."""
    analysis = StepAnalysis(run, min_ok_requests)
    return [analysis.row(step) for step in run.steps]


__all__ = [
    "DEFAULT_MIN_OK_REQUESTS",
    "PERCENTILE_METHOD",
    "StepAnalysis",
    "dist_ms",
    "mark_invalid",
    "not_steady_reason",
    "step_rows",
]
