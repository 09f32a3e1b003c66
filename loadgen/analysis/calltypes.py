"""Runs that mix call types, and the kinds of requests newer records describe (README, "Metrics").

Per step, over the same rows as the step's own figures (its requests sent in the steady window
``[steady_ns, end_ns)``; latencies over the successful ones):

- ``by_call`` (when the run has more than one ``endpoint`` or any that is not chat): per call type,
  requests ok / failed, errors by class and E2E. A *generative* call type (chat, completions,
  responses) adds TTFT, ITL, TPOT and ``output_tok_s`` (its output tokens that arrived in the
  window / window length, as the step's aggregate). A *pooling* call type (embeddings, rerank, or
  any whose records carry ``inputs``) has no TTFT and no chunks: ``inputs_s`` = inputs of its
  successful calls, of the whole run, that *ended* in the window / window length. Both have
  ``prompt_tok_s`` = prompt tokens (usage) of successful calls that ended in the window / window.
- Kinds of output (when any record has ``first_reasoning_ns``, ``first_answer_ns``,
  ``first_tool_ns``, ``reasoning_tokens`` or tool calls): ``ttft_reasoning_ms``, ``ttft_answer_ms``,
  ``ttft_tool_ms`` = first output of that kind - intended send, over the requests that had one;
  TTFT itself stays the first output of any kind. ``reasoning_tokens_mean`` over the requests whose
  usage reports them, ``reasoning_share`` = their reasoning tokens / their output tokens;
  ``tool_calls`` the calls made, ``tool_args_chars_mean`` the argument characters per request that
  made any.
- ``agent`` (records with ``max_turns``): per turn index, TTFT and prompt tokens (the growth of a
  task's context); tasks (records grouped by ``conversation``) are counted in the step whose window
  their first turn was sent in. A task is *complete* when a successful turn made no tool call, a turn
  failed (not cancelled), or a turn was its last allowed (``turn + 1 >= max_turns``); else it was
  *cut* (the run or step ended first, or the client cancelled it) and is counted apart, never in
  ``task_ms`` = last end - first intended send of a complete task.
- ``images`` (requests with ``images > 0``): image tokens per image = (``prompt_tokens`` -
  ``context_tokens``) / ``images``, the mean over the requests with both counts; an estimate unless
  the run counted its prompts with a tokenizer (the manifest's ``tokenizer``).

The knee and the plan are about one call type (:func:`knee_call_type`): the one named, else the one
that served the most tokens (prompt + output tokens of its successful calls over the run; ties: more
requests, then the name). :func:`call_type_steps` gives the steps as that call type saw them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np

from loadgen.analysis.contracts import (
    AgentStats,
    AgentTurn,
    CallTypeStats,
    ImageStats,
    LatencyStats,
    RunSummary,
    StepSummary,
)
from loadgen.analysis.load import MISSING, Step
from loadgen.analysis.steps import NS_PER_S, BArr, IArr, StepAnalysis, dist_ms
from loadgen.spec.calls import ITEMS

POOLING_ENDPOINTS: Final = ITEMS  # the call types whose answer is items (spec.calls)
NO_LATENCY: Final[LatencyStats] = {"mean": None, "p50": None, "p90": None, "p99": None}


class CallTypeError(ValueError):
    """A call type was asked for that the run does not have; the message names those it has."""


def subset_stats(a: StepAnalysis, mask: BArr, rows: IArr, lo: int, hi: int, pooling: bool) -> CallTypeStats:
    """The figures of the requests of ``rows`` (a step's window) that ``mask`` picks (a call type,
    a tenant): counts, errors, E2E, prompt tok/s, and TTFT, ITL, TPOT and output tok/s (generative)
    or inputs/s (pooling)."""
    req = a.req
    mine = rows[mask[rows]]
    ok_rows = mine[a.ok[mine]]
    bad_rows = mine[~a.ok[mine] & ~a.cancelled[mine]]
    window_s = (hi - lo) / NS_PER_S
    if window_s > 0:
        ended = np.flatnonzero(mask & a.ok & (req.end_ns >= lo) & (req.end_ns < hi))
    else:
        ended = np.empty(0, dtype=np.int64)
    prompt = req.prompt_tokens[ended]
    prompt_sum = float(prompt[prompt != MISSING].sum())
    out: CallTypeStats = {
        "kind": "pooling" if pooling else "generative",
        "requests_ok": len(ok_rows),
        "requests_failed": len(bad_rows),
        "errors": a.error_counts(bad_rows),
        "e2e_ms": dist_ms(req.end_ns[ok_rows] - req.intended_ns[ok_rows]),
        "prompt_tok_s": prompt_sum / window_s if window_s > 0 else None,
    }
    if pooling:
        inputs = req.inputs[ended]
        out["inputs_s"] = float(inputs[inputs != MISSING].sum()) / window_s if window_s > 0 else None
        return out
    first = req.first_chunk_ns[ok_rows]
    has_first = first != MISSING
    end = req.end_ns[ok_rows]
    n_out = a.out_eff[ok_rows]
    tpot = has_first & (n_out > 1)
    out["ttft_ms"] = dist_ms((first - req.intended_ns[ok_rows])[has_first])
    out["itl_ms"] = a.itl_ms(ok_rows)
    out["tpot_ms"] = dist_ms((end - first)[tpot] / (n_out[tpot] - 1))
    out["output_tok_s"] = a.tokens_arrived(lo, hi, mask) / window_s if window_s > 0 else None
    return out


def _mean(values: IArr) -> float | None:
    return float(values.mean()) if len(values) else None


class CallTypes:
    """Per-run masks computed once, then the extra keys of each step row (:meth:`add_to`)."""

    def __init__(self, analysis: StepAnalysis, *, tokenizer: bool = False) -> None:
        self.a = analysis
        req = analysis.req
        self.req = req
        self.tokenizer = tokenizer
        codes = req.endpoint.codes
        present = np.unique(codes).tolist()
        self.endpoints: list[str] = sorted(str(req.endpoint.names[c] or "chat") for c in present)
        self.endpoint_mask: dict[str, BArr] = {}
        for c in present:
            name = str(req.endpoint.names[c] or "chat")
            mask = codes == c
            prev = self.endpoint_mask.get(name)
            self.endpoint_mask[name] = mask if prev is None else prev | mask
        has_inputs = req.inputs != MISSING
        self.pooling = {e: e in POOLING_ENDPOINTS or bool(has_inputs[m].any()) for e, m in self.endpoint_mask.items()}
        self.breakdown = len(self.endpoints) > 1 or any(e != "chat" for e in self.endpoints)
        self.kinds = bool(
            (req.first_reasoning_ns != MISSING).any()
            or (req.first_answer_ns != MISSING).any()
            or (req.first_tool_ns != MISSING).any()
            or (req.reasoning_tokens != MISSING).any()
            or (req.tool_calls > 0).any()
        )
        self.agent: BArr = req.max_turns != MISSING
        self.has_images = bool((req.images > 0).any())
        self._tasks = self._task_table() if self.agent.any() else None

    # -- the run ----------------------------------------------------------------------------

    def served_tokens(self) -> dict[str, int]:
        """Prompt + output tokens of each call type's successful calls over the whole run."""
        prompt = np.clip(self.req.prompt_tokens, 0, None)
        out = np.clip(self.a.out_eff, 0, None)
        ok = self.a.ok
        return {e: int(prompt[m & ok].sum() + out[m & ok].sum()) for e, m in self.endpoint_mask.items()}

    def default_call_type(self) -> str | None:
        """The call type that served the most tokens (ties: more requests, then the name)."""
        if not self.endpoints:
            return None
        served = self.served_tokens()
        ok = self.a.ok
        return min(self.endpoints, key=lambda e: (-served[e], -int((self.endpoint_mask[e] & ok).sum()), e))

    # -- one step ---------------------------------------------------------------------------

    def add_to(self, row: StepSummary, step: Step) -> None:
        """Add ``by_call``, the kinds of output, ``agent`` and ``images`` to ``row`` (each only when
        the run has such requests)."""
        req, a = self.req, self.a
        lo, hi = step.steady_ns, step.end_ns
        in_window = (req.step == step.step) & (req.sent_ns >= lo) & (req.sent_ns < hi)
        rows = np.flatnonzero(in_window)
        ok_rows = rows[a.ok[rows]]
        if self.breakdown:
            row["by_call"] = {e: self._call(e, rows, lo, hi) for e in self.endpoints}
        if self.kinds:
            self._kinds(row, ok_rows)
        if self._tasks is not None:
            row["agent"] = self._agent(ok_rows, in_window)
        if self.has_images:
            row["images"] = self._images(ok_rows)

    def _call(self, name: str, rows: IArr, lo: int, hi: int) -> CallTypeStats:
        return subset_stats(self.a, self.endpoint_mask[name], rows, lo, hi, self.pooling[name])

    def _kinds(self, row: StepSummary, ok_rows: IArr) -> None:
        req = self.req
        intended = req.intended_ns[ok_rows]
        for key, col in (
            ("ttft_reasoning_ms", req.first_reasoning_ns),
            ("ttft_answer_ms", req.first_answer_ns),
            ("ttft_tool_ms", req.first_tool_ns),
        ):
            t = col[ok_rows]
            has = t != MISSING
            row[key] = dist_ms((t - intended)[has])  # type: ignore[literal-required]
        reasoning = req.reasoning_tokens[ok_rows]
        known = reasoning != MISSING
        out = np.clip(self.a.out_eff[ok_rows][known], 0, None)
        row["reasoning_tokens_mean"] = _mean(reasoning[known])
        row["reasoning_share"] = float(reasoning[known].sum() / out.sum()) if out.sum() > 0 else None
        calls = req.tool_calls[ok_rows]
        row["tool_calls"] = int(calls.sum())
        row["tool_args_chars_mean"] = _mean(req.tool_args_chars[ok_rows][calls > 0])

    # -- agent loops ------------------------------------------------------------------------

    def _task_table(self) -> tuple[IArr, BArr, BArr, IArr]:
        """Per agent task: its first record (the earliest intended send), complete, failed, and
        its time (last end - first intended send, ns)."""
        req, a = self.req, self.a
        rows = np.flatnonzero(self.agent)
        conv = req.conversation
        none_code = conv.code_of(None)
        codes = conv.codes[rows].astype(np.int64)
        # a turn without a task id is a task of its own
        alone = codes == none_code
        codes[alone] = len(conv.names) + rows[alone]
        intended = req.intended_ns[rows]
        order = np.lexsort((intended, codes))
        rows, codes = rows[order], codes[order]
        starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
        ok = a.ok[rows]
        failed = ~ok & ~a.cancelled[rows]
        last_turn = (req.turn[rows] + 1) >= req.max_turns[rows]
        ends_task = (ok & (req.tool_calls[rows] == 0)) | failed | last_turn
        complete = np.maximum.reduceat(ends_task.astype(np.int8), starts).astype(bool)
        any_failed = np.maximum.reduceat(failed.astype(np.int8), starts).astype(bool)
        span = np.maximum.reduceat(req.end_ns[rows], starts) - req.intended_ns[rows[starts]]
        return rows[starts], complete, any_failed, span

    def _agent(self, ok_rows: IArr, in_window: BArr) -> AgentStats:
        req = self.req
        mine = ok_rows[self.agent[ok_rows]]
        turn = req.turn[mine]
        turns: list[AgentTurn] = []
        for t in np.unique(turn).tolist():
            at = mine[turn == t]
            first = req.first_chunk_ns[at]
            has = first != MISSING
            prompt = req.prompt_tokens[at]
            turns.append(
                {
                    "turn": int(t),
                    "requests": len(at),
                    "ttft_ms": dist_ms((first - req.intended_ns[at])[has]),
                    "prompt_tokens_mean": _mean(prompt[prompt != MISSING]),
                }
            )
        assert self._tasks is not None
        first_rows, complete, failed, span = self._tasks
        here = in_window[first_rows]
        done = here & complete
        return {
            "turns": turns,
            "tasks_complete": int(done.sum()),
            "tasks_failed": int((done & failed).sum()),
            "tasks_cut": int((here & ~complete).sum()),
            "task_ms": dist_ms(span[done]),
        }

    # -- images -----------------------------------------------------------------------------

    def _images(self, ok_rows: IArr) -> ImageStats:
        req = self.req
        mine = ok_rows[req.images[ok_rows] > 0]
        images = req.images[mine]
        prompt = req.prompt_tokens[mine]
        ctx = req.context_tokens[mine]
        both = (prompt != MISSING) & (ctx != MISSING)
        per_image = (prompt[both] - ctx[both]) / images[both]
        return {
            "requests": len(mine),
            "images": int(images.sum()),
            "prompt_tokens_mean": _mean(prompt[prompt != MISSING]),
            "context_tokens_mean": _mean(ctx[ctx != MISSING]),
            "image_tokens_per_image_mean": float(per_image.mean()) if len(per_image) else None,
            "estimate": not self.tokenizer,
        }


# ----------------------------------------------------------------------------- knee and plan


def resolve_call_type(types: CallTypes, asked: str | None) -> str | None:
    """The call type the knee and the plan are about: ``asked`` when given (CallTypeError when the
    run has no such call), else the one that served the most tokens; None without a breakdown."""
    if not types.breakdown:
        return None
    if asked is not None:
        if asked not in types.endpoints:
            raise CallTypeError(
                f"call type {asked!r} is not in this run: it has {', '.join(types.endpoints)}; "
                "name one of those (or leave it out for the one that served the most tokens)"
            )
        return asked
    return types.default_call_type()


def call_type_steps(steps: Sequence[StepSummary], call_type: str | None) -> list[StepSummary]:
    """The steps as ``call_type`` saw them, for the knee and the plan: requests, errors and
    latencies of that call type; its throughput under ``output_tok_s`` (output tok/s of a generative
    call type, prompt tok/s of a pooling one, whose TTFT, ITL and TPOT are then unmeasured).
    ``call_type`` None, or a step without it in ``by_call``: the step unchanged."""
    if call_type is None:
        return list(steps)
    out: list[StepSummary] = []
    for s in steps:
        calls = s.get("by_call")
        c = calls.get(call_type) if isinstance(calls, dict) else None
        if not isinstance(c, dict):
            out.append(s)
            continue
        view: StepSummary = {**s}
        view["requests_ok"] = c["requests_ok"]
        view["requests_failed"] = c["requests_failed"]
        view["errors"] = dict(c["errors"])
        view["e2e_ms"] = c["e2e_ms"]
        if c.get("kind") == "pooling":
            view["output_tok_s"] = c.get("prompt_tok_s")
            view["ttft_ms"] = view["itl_ms"] = view["tpot_ms"] = NO_LATENCY
        else:
            view["output_tok_s"] = c.get("output_tok_s")
            view["ttft_ms"] = c.get("ttft_ms", NO_LATENCY)
            view["itl_ms"] = c.get("itl_ms", NO_LATENCY)
            view["tpot_ms"] = c.get("tpot_ms", NO_LATENCY)
        out.append(view)
    return out


def knee_steps(summary: RunSummary) -> list[StepSummary]:
    """The steps the knee verdict and the plan read: those of ``summary["knee_call_type"]``."""
    return call_type_steps(summary["steps"], summary.get("knee_call_type"))


__all__ = [
    "POOLING_ENDPOINTS",
    "CallTypeError",
    "CallTypes",
    "call_type_steps",
    "knee_steps",
    "resolve_call_type",
]
