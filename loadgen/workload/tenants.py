"""Tenants: several workloads on one server in one run, each with its own load, priority and SLO.

A scenario's ``[[tenants]]`` tables (README, "Tenants"; docs/scenarios.md) each name a tenant and
what it sends:

- ``name``: letters, digits, ``-`` and ``_``; the records' ``tenant`` and the report's rows.
- ``scenario``: the tenant's workload, any scenario file it could run on its own (its prompts,
  lengths, call type, conversations, tools); relative to this file. Without it, the tenant sends
  this file's own workload sections.
- its load, one of: ``users`` (closed loop: an integer for every step, or one per step), ``rate``
  (open loop, requests/s: a number or one per step), or ``share`` (of the step's load in ``[load]``:
  its ``concurrency`` or ``rates``). Shares are split with the largest remainder, so the tenants'
  users always add up to the step's; the shares of a scenario must add up to 1.
- ``priority``: an integer sent as the request body's ``priority`` (vLLM and SGLang both read it;
  vLLM: lower is served first). ``headers`` and ``body``: extra request headers and body fields.
- ``slo``: its own limits, as ``--slo`` takes them (``ttft_p99=2s,tpot_p99=50ms``).

The steps of the run are the steps of the tenants' loads (lists of one length; a single value
stands for every step). A tenant's load of 0 in a step sends nothing in it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen.spec.gates import SLOError, parse_slo
from loadgen.workload.errors import NO_VALUE, TableError
from loadgen.workload.tables import Table, type_name, user_path

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
SHARE_TOLERANCE = 1e-6


@dataclass(frozen=True)
class TenantSpec:
    """One ``[[tenants]]`` table, checked."""

    name: str
    scenario: str | None = None  # resolved path of the tenant's own scenario file
    users: tuple[int, ...] | None = None
    rates: tuple[float, ...] | None = None
    share: float | None = None
    priority: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    body: dict[str, Any] = field(default_factory=dict)
    slo: dict[str, float] = field(default_factory=dict)
    slo_text: str | None = None

    @property
    def open_loop(self) -> bool | None:
        """True for a rate, False for users, None for a share (the scenario's ``[load]`` says)."""
        return True if self.rates is not None else False if self.users is not None else None

    def describe(self) -> dict[str, Any]:
        """The manifest's entry (what the report and a reviewer read back)."""
        return {
            "name": self.name,
            "scenario": self.scenario,
            "users": list(self.users) if self.users is not None else None,
            "rate": list(self.rates) if self.rates is not None else None,
            "share": self.share,
            "priority": self.priority,
            "headers": sorted(self.headers),  # names only: values may be secrets
            "body": self.body,
            "slo": self.slo_text,
        }


def parse_tenants(raw: Any, base_dir: Path) -> tuple[TenantSpec, ...]:
    """``[[tenants]]`` as written (the TOML's list of tables) into TenantSpecs; TableError names the
    key (``tenants[1].share``) and what to write instead."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(t, dict) for t in raw):
        raise TableError("tenants", raw, "must be [[tenants]] tables (an array of tables)")
    out: list[TenantSpec] = []
    for i, data in enumerate(raw):
        t = Table(data, f"tenants[{i}]")
        name = t.get_str("name")
        if not _NAME.match(name):
            raise TableError(t.key("name"), name, "use letters, digits, '-' and '_' (at most 64), starting alnum")
        if any(o.name == name for o in out):
            raise TableError(t.key("name"), name, "another tenant has this name")
        scenario = t.get_str("scenario", None)
        if scenario is not None:
            path = user_path(scenario)
            path = path if path.is_absolute() else Path(base_dir) / path
            if not path.is_file():
                raise TableError(t.key("scenario"), scenario, f"no such scenario file ({path})")
            scenario = str(path)
        loads = [k for k in ("users", "rate", "share") if t.has(k)]
        if len(loads) != 1:
            given = " and ".join(loads) if loads else "none"
            raise TableError(t.key("name"), name, f"give the tenant one load: users, rate or share (given: {given})")
        users = _per_step(t, "users", integer=True) if t.has("users") else None
        rates = _per_step(t, "rate", integer=False) if t.has("rate") else None
        share = t.get_float("share", None)
        if share is not None and not 0.0 < share <= 1.0:
            raise TableError(t.key("share"), share, "a share of the step's load: a number in (0, 1]")
        priority = t.raw("priority", None)
        if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
            raise TableError(
                t.key("priority"), priority, f"must be an integer (the body's priority), not {type_name(priority)}"
            )
        headers = _strings(t, "headers")
        body_t = t.sub("body")
        body = dict(body_t.data) if body_t is not None else {}
        if "priority" in body and priority is not None:
            raise TableError(t.key("body.priority"), body["priority"], "set the priority once: the tenant's priority")
        slo_text = t.get_str("slo", None)
        try:
            slo = parse_slo(slo_text) if slo_text is not None else {}
        except SLOError as exc:
            raise TableError(t.key("slo"), slo_text, str(exc)) from None
        t.finish(("name", "scenario", "users", "rate", "share", "priority", "headers", "body", "slo"))
        out.append(
            TenantSpec(name, scenario, users, rates, share, priority, headers, body, slo, slo_text),
        )
    if not out:
        raise TableError("tenants", raw, "give at least one [[tenants]] table")
    return tuple(out)


def check_tenants(tenants: tuple[TenantSpec, ...], mode: str) -> None:
    """What spans the tenants: one kind of loop, step lists of one length, shares adding up to 1."""
    if not tenants:
        return
    for i, t in enumerate(tenants):
        if (t.open_loop is True and mode == "closed") or (t.open_loop is False and mode == "open"):
            kind = "rate" if t.open_loop else "users"
            raise TableError(
                f"tenants[{i}].{kind}",
                NO_VALUE,
                f'tenant {t.name} has a {kind} but [load] mode = "{mode}": give every tenant '
                + ("users" if mode == "closed" else "a rate")
                + " or a share",
            )
    per_step = [t.users if t.users is not None else t.rates for t in tenants]
    lengths = {len(v) for v in per_step if v is not None and len(v) > 1}
    if len(lengths) > 1:
        raise TableError("tenants", NO_VALUE, f"the tenants' per-step loads have different lengths {sorted(lengths)}")
    shares = [t.share for t in tenants if t.share is not None]
    if shares and abs(sum(shares) - 1.0) > SHARE_TOLERANCE:
        named = ", ".join(f"{t.name} {t.share:g}" for t in tenants if t.share is not None)
        raise TableError(
            "tenants",
            NO_VALUE,
            f"the tenants' shares add up to {sum(shares):g} ({named}), not 1: each is its part of the step's load",
        )


def tenant_steps(
    tenants: tuple[TenantSpec, ...], step_loads: list[float], closed: bool
) -> list[tuple[tuple[str, float], ...]]:
    """Each step's load per tenant: users (closed) or requests/s (open), in the tenants' order.

    ``step_loads``: the scenario's own steps (``[load]``), which the shares divide; the steps are as
    many as the longest per-step list, or the scenario's own steps when every tenant has a share."""
    n = max([len(t.users or t.rates or ()) for t in tenants] + [1])
    if all(t.share is not None for t in tenants):
        n = len(step_loads)
    elif any(t.share is not None for t in tenants) and len(step_loads) not in (1, n):
        n = max(n, len(step_loads))
    steps: list[tuple[tuple[str, float], ...]] = []
    for k in range(n):
        fixed: dict[str, float] = {}
        for t in tenants:
            values = t.users if t.users is not None else t.rates
            if values is not None:
                fixed[t.name] = float(values[k] if len(values) > 1 else values[0])
        total = step_loads[min(k, len(step_loads) - 1)] if step_loads else 0.0  # what the shares divide
        sharers = [t for t in tenants if t.share is not None]
        split = _largest_remainder(total, [t.share or 0.0 for t in sharers]) if closed else None
        shared = {
            t.name: (float(split[j]) if split is not None else total * (t.share or 0.0)) for j, t in enumerate(sharers)
        }
        steps.append(tuple((t.name, fixed.get(t.name, shared.get(t.name, 0.0))) for t in tenants))
    return steps


def tenant_of_rank(loads: tuple[tuple[str, float], ...], rank: int) -> str | None:
    """The tenant of the closed-loop user at ``rank`` (0-based, among the process's live users):
    the first tenant's users come first. None past the step's users."""
    edge = 0
    for name, users in loads:
        edge += int(users)
        if rank < edge:
            return name
    return None


def _largest_remainder(total: float, shares: list[float]) -> list[int]:
    n = round(total)
    raw = [n * s for s in shares]
    base = [int(x) for x in raw]
    left = n - sum(base)
    order = sorted(range(len(raw)), key=lambda j: (-(raw[j] - base[j]), j))
    for j in order[:left]:
        base[j] += 1
    return base


def _per_step(t: Table, name: str, *, integer: bool) -> tuple[Any, ...]:
    raw = t.raw(name)
    values = raw if isinstance(raw, list) else [raw]
    if not values:
        raise TableError(t.key(name), raw, "must not be empty")
    for v in values:
        bad = isinstance(v, bool) or not isinstance(v, (int, float)) or (integer and not isinstance(v, int))
        if bad or v < 0:
            what = "a whole number of users >= 0" if integer else "requests/s >= 0"
            raise TableError(t.key(name), raw, f"each value must be {what} (one for every step, or one per step)")
    return tuple(int(v) if integer else float(v) for v in values)


def _strings(t: Table, name: str) -> dict[str, str]:
    sub = t.sub(name)
    if sub is None:
        return {}
    out: dict[str, str] = {}
    for k, v in sub.data.items():
        if not isinstance(v, str):
            raise TableError(sub.key(k), v, "a header's value must be a string")
        out[str(k)] = v
    return out
