"""``loadgen workload show FILE``: what a reviewer needs of a workload file, in the terminal and as
an HTML page.

Per tenant (or for the whole file): requests, prompt length asked for (``context_tokens``) and
prompt characters as sent, output tokens asked for (``max_tokens``), as percentiles and histograms;
per step: its load, requests, users or the arrivals' rate and burstiness (the coefficient of
variation of the gaps: 1 for Poisson); prefix sharing: the share of prompt characters, in 64-character
blocks, that an earlier request of the file already began with (what an unbounded prefix cache
could serve); conversations and turns. Everything from one pass over the file.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from loadgen.workload.wfile import BLOCK_CHARS, WorkloadFile, redact_body


@dataclass(slots=True)
class Side:
    """One group's lengths (a tenant's, or the file's)."""

    requests: int = 0
    context_tokens: list[int] = field(default_factory=list)
    prompt_chars: list[int] = field(default_factory=list)
    max_tokens: list[int] = field(default_factory=list)


@dataclass(slots=True)
class Stats:
    path: str
    header: dict[str, Any]
    requests: int
    size: int
    sha256: str
    groups: dict[str, Side]
    steps: list[dict[str, Any]]
    shared_chars: int = 0
    prompt_chars: int = 0
    conversations: int = 0
    turns_max: int = 0
    continued: int = 0

    @property
    def prefix_share(self) -> float:
        return self.shared_chars / self.prompt_chars if self.prompt_chars else 0.0


def _blocks(body: dict[str, Any]) -> tuple[list[str], int]:
    """A request's prompt text as chained block hashes, and its characters (redacted or not)."""
    red = body if _is_redacted(body) else redact_body(body)
    hashes: list[str] = []
    chars = 0

    def walk(v: Any) -> None:
        nonlocal chars
        if isinstance(v, dict):
            r = v.get("redacted")
            if isinstance(r, dict) and set(v) == {"redacted"}:
                hashes.extend(r.get("blocks") or [])
                chars += int(r.get("chars") or 0)
                return
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(red)
    return hashes, chars


def _is_redacted(body: dict[str, Any]) -> bool:
    msgs = body.get("messages")
    if isinstance(msgs, list) and msgs and isinstance(msgs[0], dict):
        return isinstance(msgs[0].get("content"), dict)
    return isinstance(body.get("prompt"), dict)


def summarise(wf: WorkloadFile) -> Stats:
    h = wf.header
    head = {k: v for k, v in h.to_dict().items() if k != "steps"}
    stats = Stats(str(wf.path), head, wf.requests, wf.size, wf.sha256, {}, [])
    seen: set[str] = set()
    conversations: dict[str, int] = {}
    for i, step in enumerate(h.steps):
        keys = sorted(k for k in wf.streams if k[0] == i)
        times: list[float] = []
        n = 0
        for key in keys:
            for line in wf.lines(*key):
                n += 1
                body = line["body"]
                tenant = line.get("tenant")
                targets = [stats.groups.setdefault("*", Side())]
                if tenant:
                    targets.append(stats.groups.setdefault(tenant, Side()))
                mt = body.get("max_tokens", body.get("max_completion_tokens", body.get("max_output_tokens")))
                ctx = line.get("context_tokens")
                hashes, chars = _blocks(body)
                for g in targets:
                    g.requests += 1
                    g.prompt_chars.append(chars)
                    if isinstance(ctx, int):
                        g.context_tokens.append(ctx)
                    if isinstance(mt, int):
                        g.max_tokens.append(mt)
                if not line.get("cont"):  # a continued turn resends history the file does not hold
                    shared = 0
                    for b in hashes:
                        if b not in seen:
                            break
                        shared += 1
                    stats.shared_chars += min(shared * BLOCK_CHARS, chars)
                    stats.prompt_chars += chars
                    seen.update(hashes)
                else:
                    stats.continued += 1
                conv = line.get("conversation")
                if conv is not None:
                    conversations[conv] = max(conversations.get(conv, 0), int(line.get("turn") or 0) + 1)
                if "at_s" in line:
                    times.append(float(line["at_s"]))
        row: dict[str, Any] = {**step, "step": i, "requests": n}
        if h.mode == "closed":
            row["users"] = len(keys)
        elif len(times) > 2:
            gaps = np.diff(np.asarray(times))
            span = times[-1] - times[0]
            row["rate_measured"] = (len(times) - 1) / span if span > 0 else math.inf
            row["gap_cv"] = float(gaps.std() / gaps.mean()) if gaps.mean() > 0 else 0.0
        stats.steps.append(row)
    stats.conversations = len(conversations)
    stats.turns_max = max(conversations.values(), default=0)
    return stats


def _pct(values: list[int]) -> str:
    if not values:
        return "-"
    a = np.asarray(values)
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return f"mean {a.mean():,.0f}, p50 {p50:,.0f}, p90 {p90:,.0f}, p99 {p99:,.0f}, max {a.max():,}"


def _groups(stats: Stats) -> list[tuple[str, Side]]:
    items = [(k, v) for k, v in stats.groups.items() if k != "*"]
    return [("all", stats.groups["*"]), *sorted(items)] if items else [("all", stats.groups.get("*", Side()))]


def _step_line(row: dict[str, Any]) -> str:
    if row.get("users") is not None:
        load = f"{row['users']} users"
    else:
        load = f"rate {row.get('rate') or row.get('rate_measured', 0):.3g}/s"
        if "gap_cv" in row:
            load += f" (measured {row['rate_measured']:.3g}/s, gap CV {row['gap_cv']:.2f})"
    tenants = row.get("tenants")
    extra = f", tenants {tenants}" if tenants else ""
    dur = row.get("duration_s")
    return f"step {row['step']}: {load}, {row['requests']:,} requests, {dur if dur is not None else '-'} s{extra}"


def render_text(stats: Stats) -> str:
    h = stats.header
    scen = h.get("scenario") or {}
    lines = [
        f"{stats.path}: {stats.requests:,} requests, {h['mode']} loop, {h['endpoint']}, {stats.size / 1e6:.1f} MB",
        f"  schema {h['schema']} v{h['version']}, {h.get('source')}, {h.get('created_by')}, sha256 {stats.sha256[:16]}"
        + (", redacted" if h.get("redacted") else ""),
    ]
    if scen:
        lines.append(f"  from scenario {scen.get('name')} ({scen.get('path')}, seed {scen.get('seed')})")
    lines.append("")
    for name, g in _groups(stats):
        lines.append(f"{name}: {g.requests:,} requests")
        lines.append(f"  prompt tokens asked  {_pct(g.context_tokens)}")
        lines.append(f"  prompt characters    {_pct(g.prompt_chars)}")
        lines.append(f"  max output tokens    {_pct(g.max_tokens)}")
    lines.append("")
    lines += [_step_line(r) for r in stats.steps]
    lines.append("")
    lines.append(
        f"prefix sharing: {stats.prefix_share:.1%} of first-turn prompt characters begin as an earlier request did"
    )
    if stats.conversations:
        lines.append(
            f"conversations: {stats.conversations:,}, up to {stats.turns_max} turns; {stats.continued:,} requests "
            "continue one (their history is the server's answers, rebuilt at replay)"
        )
    return "\n".join(lines)


def _histogram_svg(values: list[int], title: str) -> str:
    if not values:
        return ""
    a = np.asarray(values, dtype=float)
    counts, edges = np.histogram(a, bins=min(30, max(1, len(set(values)))))
    w, hgt, pad = 420, 120, 24
    top = counts.max() or 1
    bw = (w - 2 * pad) / len(counts)
    bars = "".join(
        f'<rect x="{pad + i * bw:.1f}" y="{hgt - pad - c / top * (hgt - 2 * pad):.1f}" width="{max(bw - 1, 1):.1f}" '
        f'height="{c / top * (hgt - 2 * pad):.1f}" fill="#4a78b5">'
        f"<title>{edges[i]:,.0f}-{edges[i + 1]:,.0f}: {c}</title></rect>"
        for i, c in enumerate(counts)
    )
    return (
        f'<figure><svg width="{w}" height="{hgt}" role="img" aria-label="{html.escape(title)}">{bars}'
        f'<text x="{pad}" y="{hgt - 6}" font-size="10">{edges[0]:,.0f}</text>'
        f'<text x="{w - pad}" y="{hgt - 6}" font-size="10" text-anchor="end">{edges[-1]:,.0f}</text></svg>'
        f"<figcaption>{html.escape(title)}</figcaption></figure>"
    )


def render_html(stats: Stats) -> str:
    e = html.escape
    parts = [
        "<!doctype html><html lang=en><meta charset=utf-8>",
        f"<title>workload {e(stats.path)}</title>",
        "<style>body{font:14px system-ui,sans-serif;margin:24px;max-width:1100px}figure{display:inline-block;"
        "margin:8px}td,th{padding:2px 10px;text-align:right}th:first-child,td:first-child{text-align:left}</style>",
        f"<h1>Workload file {e(stats.path)}</h1>",
        f"<pre>{e(render_text(stats))}</pre>",
    ]
    for name, g in _groups(stats):
        parts.append(f"<h2>{e(name)}: {g.requests:,} requests</h2>")
        parts.append(_histogram_svg(g.context_tokens, f"{name}: prompt tokens asked"))
        parts.append(_histogram_svg(g.prompt_chars, f"{name}: prompt characters"))
        parts.append(_histogram_svg(g.max_tokens, f"{name}: max output tokens"))
    parts.append("<h2>Steps</h2><table><tr><th>step</th><th>load</th></tr>")
    parts += [f"<tr><td>{r['step']}</td><td>{e(_step_line(r))}</td></tr>" for r in stats.steps]
    parts.append("</table></html>")
    return "\n".join(parts)
