"""Which replica serves a request: the routing policies ``loadgen fleet`` simulates and ``loadgen router``
serves over HTTP, written once.

A :class:`Router` sees what a real router sees: the requests it has sent to each replica and not yet seen
end (``outstanding``), each replica's KV-cache use as the replica last reported it (``kv_usage``: a
callback; the fleet samples its engines every ``kv_report_s``, the HTTP router polls ``/metrics``), and
the prompt's prefix blocks (chained hashes: equal keys mean an equal prefix up to that block).

Policies (:class:`Policy`):

- ``round-robin``: the replicas in turn.
- ``least-requests``: the fewest outstanding requests (ties in turn), as llm-d's queue scorer and
  SMG's ``power_of_two`` without the sampling.
- ``least-kv``: the lowest reported KV-cache use, then the fewest outstanding (llm-d's
  ``kv-cache-utilization`` scorer).
- ``prefix-aware``: SGLang's cache-aware routing (SMG, ``--policy cache_aware``,
  docs/concepts/routing/cache-aware.md of lightseekorg/smg): the router keeps, per replica, an
  approximate tree of the prefixes it sent there (LRU, bounded by ``tree_blocks``). When the load is
  imbalanced (``max - min > balance_abs`` outstanding and ``max > min * balance_rel``) the least loaded
  replica takes the request; else, when the longest prefix match covers more than ``cache_threshold``
  of the prompt, the matching replica with the fewest outstanding; else the replica with the smallest
  tree (the most room). SMG's defaults: 0.3, 64, 1.5.
- ``session``: a request with a session (a conversation's id) goes where the session's earlier turns
  went, by rendezvous hashing over the active replicas (a replica added or removed moves only its own
  share of sessions); one without a session goes by ``least-requests``.

Replicas can be added and drained (an autoscaler): :meth:`Router.set_active`. Only active replicas take
new requests; a drained one finishes what it holds.
"""

from __future__ import annotations

import enum
import hashlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

CACHE_THRESHOLD = 0.3  # SMG --cache-threshold default
BALANCE_ABS = 64  # SMG --balance-abs-threshold default
BALANCE_REL = 1.5  # SMG --balance-rel-threshold default
TREE_BLOCKS = 1 << 20  # the router's tree per replica, in blocks, unless told the replica's cache size


class Policy(enum.Enum):
    ROUND_ROBIN = "round-robin"
    LEAST_REQUESTS = "least-requests"
    LEAST_KV = "least-kv"
    PREFIX_AWARE = "prefix-aware"
    SESSION = "session"


POLICY_NAMES = tuple(p.value for p in Policy)


def parse_policy(text: str) -> Policy:
    """A policy by name; ValueError naming the accepted ones."""
    for p in Policy:
        if p.value == text.strip():
            return p
    raise ValueError(f"unknown router policy {text!r}: use one of {', '.join(POLICY_NAMES)}")


@dataclass(frozen=True, slots=True)
class RouteInfo:
    """What the router reads of a request: its prompt's chained prefix-block keys (empty: none known),
    the prompt's length in tokens and its session (None: none)."""

    blocks: Sequence[int]
    prompt_tokens: int
    session: str | None = None
    block_tokens: int = 64


class Router:
    """One router over ``replicas`` backends, indexed from 0. Not thread-safe; one caller drives it."""

    def __init__(
        self,
        policy: Policy,
        replicas: int,
        *,
        kv_usage: Callable[[int], float] | None = None,
        cache_threshold: float = CACHE_THRESHOLD,
        balance_abs: int = BALANCE_ABS,
        balance_rel: float = BALANCE_REL,
        tree_blocks: int = TREE_BLOCKS,
    ) -> None:
        if replicas < 1:
            raise ValueError("a router needs at least one replica")
        self.policy = policy
        self.kv_usage = kv_usage or (lambda i: 0.0)
        self.cache_threshold = cache_threshold
        self.balance_abs = balance_abs
        self.balance_rel = balance_rel
        self.tree_blocks = max(1, tree_blocks)
        self.outstanding: list[int] = []
        self.active: list[bool] = []
        self.routed: list[int] = []  # requests sent to each replica, ever
        self._turn = 0
        # prefix-aware: block key -> bitmask of the replicas whose tree holds it; per replica its keys in
        # LRU order (most recent last)
        self._owners: dict[int, int] = {}
        self._trees: list[OrderedDict[int, None]] = []
        self._session_keys: list[bytes] = []
        for _ in range(replicas):
            self.add_replica()

    # -- the replica set -----------------------------------------------------------------------

    @property
    def replicas(self) -> int:
        return len(self.outstanding)

    def add_replica(self) -> int:
        """A new, active replica; its index."""
        i = len(self.outstanding)
        self.outstanding.append(0)
        self.active.append(True)
        self.routed.append(0)
        self._trees.append(OrderedDict())
        self._session_keys.append(i.to_bytes(4, "little"))
        return i

    def set_active(self, i: int, active: bool) -> None:
        """Let replica ``i`` take new requests again, or drain it (it keeps what it holds)."""
        self.active[i] = active

    # -- routing -------------------------------------------------------------------------------

    def pick(self, req: RouteInfo) -> int:
        """The replica that serves ``req``; counts it outstanding there (call :meth:`done` when it ends).
        ValueError when no replica is active."""
        live = [i for i, a in enumerate(self.active) if a]
        if not live:
            raise ValueError("no active replica to route to")
        policy = self.policy
        if policy is Policy.ROUND_ROBIN:
            choice = self._in_turn(live)
        elif policy is Policy.LEAST_REQUESTS:
            choice = self._least_loaded(live)
        elif policy is Policy.LEAST_KV:
            choice = min(live, key=lambda i: (self.kv_usage(i), self.outstanding[i]))
        elif policy is Policy.PREFIX_AWARE:
            choice = self._prefix_aware(live, req)
        elif policy is Policy.SESSION:
            choice = self._by_session(live, req.session) if req.session is not None else self._least_loaded(live)
        else:  # pragma: no cover - mypy checks the enum is exhausted
            raise AssertionError(policy)
        if req.blocks and policy is Policy.PREFIX_AWARE:
            self._remember(choice, req.blocks)
        self.outstanding[choice] += 1
        self.routed[choice] += 1
        return choice

    def done(self, i: int) -> None:
        """A request sent to replica ``i`` ended (finished, failed or aborted)."""
        self.outstanding[i] -= 1

    def _in_turn(self, live: list[int]) -> int:
        choice = live[self._turn % len(live)]
        self._turn += 1
        return choice

    def _least_loaded(self, live: Sequence[int]) -> int:
        """The fewest outstanding; ties broken in turn, so an idle fleet is not all sent to replica 0."""
        out = self.outstanding
        low = min(out[i] for i in live)
        ties = [i for i in live if out[i] == low]
        if len(ties) == 1:
            return ties[0]
        return self._in_turn(ties)

    def _prefix_aware(self, live: list[int], req: RouteInfo) -> int:
        out = self.outstanding
        loads = [out[i] for i in live]
        high, low = max(loads), min(loads)
        if high - low > self.balance_abs and high > low * self.balance_rel:
            return self._least_loaded(live)
        mask = 0
        for i in live:
            mask |= 1 << i
        matched = 0
        owners = self._owners
        for key in req.blocks:
            m = owners.get(key, 0) & mask
            if not m:
                break
            mask = m
            matched += 1
        rate = matched * req.block_tokens / req.prompt_tokens if req.prompt_tokens > 0 else 0.0
        if matched and rate > self.cache_threshold:
            return self._least_loaded([i for i in live if mask >> i & 1])
        trees = self._trees
        small = min(len(trees[i]) for i in live)
        return self._least_loaded([i for i in live if len(trees[i]) == small])

    def _by_session(self, live: list[int], session: str) -> int:
        """Rendezvous hashing: the live replica whose hash with the session is highest."""
        key = session.encode()
        best, choice = b"", live[0]
        for i in live:
            h = hashlib.blake2b(key + self._session_keys[i], digest_size=8).digest()
            if h > best:
                best, choice = h, i
        return choice

    def _remember(self, i: int, blocks: Sequence[int]) -> None:
        """Replica ``i``'s tree now holds ``blocks`` (most recently used); its oldest go past the bound."""
        tree, owners, bit = self._trees[i], self._owners, 1 << i
        for key in blocks:
            if key in tree:
                tree.move_to_end(key)
            else:
                tree[key] = None
                owners[key] = owners.get(key, 0) | bit
        while len(tree) > self.tree_blocks:
            old, _ = tree.popitem(last=False)
            left = owners.get(old, 0) & ~bit
            if left:
                owners[old] = left
            else:
                owners.pop(old, None)

    def tree_size(self, i: int) -> int:
        """Blocks in replica ``i``'s tree (the router's view of its cache)."""
        return len(self._trees[i])
