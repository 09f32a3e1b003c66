"""Prefix cache (SGLang's RadixAttention, at block granularity) for the simulated engine.

A prompt is cut into fixed-size blocks of ``block_tokens`` estimated tokens and each block is named
by a hash chained over everything before it (:func:`loadgen.sim.text.prompt_block_hashes`), so two
prompts that share their first k blocks byte for byte share their first k hashes, and a block hash
names a whole prefix. The cache is a tree of such blocks (a node's parent is the block before it):

* :meth:`PrefixCache.match` finds the longest cached prefix of a prompt;
* a running request *locks* the blocks it uses (``ref > 0``); locked blocks are never evicted;
* when a request's prompt has been prefilled its full blocks are *inserted* (the request's own KV
  for them moves into the tree; a block another request inserted meanwhile is used instead and
  the duplicate KV freed, as SGLang does);
* when a request finishes (or is aborted after its prefill) the blocks of its prompt continued by
  its output are inserted too, below its prompt path (the engine asks the request for their
  hashes: :mod:`loadgen.sim.continuation`), so a conversation's next turn hits the reply as well;
* when the request finishes, is retracted or aborted it unlocks its blocks: they stay cached and
  become *evictable*; eviction takes the least recently used evictable leaf first, so a prefix is
  evicted from its tail, and never a block that a running request holds.

Cached blocks live in the engine's KV token pool (the engine does the pool arithmetic; this class
only counts ``total_tokens`` and ``evictable_tokens``). SGLang's token usage counts tokens held by
running requests, i.e. ``pool - free - evictable``: evictable cached blocks count as free.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence


class Block:
    """One cached block: ``key`` is its chained hash, ``parent`` the block before it (or None)."""

    __slots__ = ("children", "key", "last", "parent", "ref")

    def __init__(self, key: int, parent: Block | None, tick: int) -> None:
        self.key = key
        self.parent = parent
        self.children = 0
        self.ref = 0
        self.last = tick


class PrefixCache:
    """Blocks keyed by chained hash, with lock counts and LRU eviction of unlocked leaves."""

    def __init__(self, block_tokens: int) -> None:
        if block_tokens <= 0:
            raise ValueError(f"prefix block size must be positive, got {block_tokens}")
        self.block_tokens = block_tokens
        self.blocks: dict[int, Block] = {}
        self.total_tokens = 0
        self.evictable_tokens = 0
        self.evicted_tokens = 0  # since start
        self._tick = 0
        self._heap: list[tuple[int, int, Block]] = []  # (last access, seq, block) of evictable leaves
        self._seq = 0

    def _next_tick(self) -> int:
        self._tick += 1
        return self._tick

    def match(self, keys: Sequence[int]) -> list[Block]:
        """The cached blocks of the longest cached prefix of ``keys`` (no side effects)."""
        out: list[Block] = []
        blocks = self.blocks
        for key in keys:
            block = blocks.get(key)
            if block is None:
                break
            out.append(block)
        return out

    def lock(self, path: Sequence[Block]) -> int:
        """Mark ``path`` in use by one more request; returns the tokens that stopped being evictable."""
        tick = self._next_tick()
        moved = 0
        for block in path:
            if block.ref == 0:
                moved += self.block_tokens
            block.ref += 1
            block.last = tick
        self.evictable_tokens -= moved
        return moved

    def unlock(self, path: Sequence[Block]) -> None:
        """One request stops using ``path`` (its blocks stay cached, LRU-stamped now)."""
        tick = self._next_tick()
        for block in reversed(path):
            block.ref -= 1
            block.last = tick
            if block.ref == 0:
                self.evictable_tokens += self.block_tokens
                if block.children == 0:
                    self._push(block)

    def insert(self, key: int, parent: Block | None) -> tuple[Block, bool]:
        """The block ``key`` after ``parent``, locked once more for the caller; True if it is new."""
        block = self.blocks.get(key)
        if block is not None:
            self.lock((block,))
            return block, False
        block = Block(key, parent, self._next_tick())
        block.ref = 1
        self.blocks[key] = block
        if parent is not None:
            parent.children += 1
        self.total_tokens += self.block_tokens
        return block, True

    def _push(self, block: Block) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (block.last, self._seq, block))
        if len(self._heap) > 4 * len(self.blocks) + 1024:  # drop stale entries now and then
            live = [e for e in self._heap if self._valid(e)]
            heapq.heapify(live)
            self._heap = live

    def _valid(self, entry: tuple[int, int, Block]) -> bool:
        last, _, block = entry
        return block.ref == 0 and block.children == 0 and self.blocks.get(block.key) is block and block.last == last

    def evict(self, tokens: int) -> int:
        """Evict least recently used unlocked leaves until ``tokens`` are freed (or none is left).

        Returns the tokens freed (a multiple of the block size, possibly more than asked)."""
        freed = 0
        blocks = self.blocks
        while freed < tokens and self._heap:
            entry = heapq.heappop(self._heap)
            if not self._valid(entry):
                continue  # stale entry: locked again, grew a child, or touched since it was pushed
            block = entry[2]
            del blocks[block.key]
            self.total_tokens -= self.block_tokens
            self.evictable_tokens -= self.block_tokens
            freed += self.block_tokens
            parent = block.parent
            if parent is not None:
                parent.children -= 1
                if parent.children == 0 and parent.ref == 0:
                    self._push(parent)
        self.evicted_tokens += freed
        return freed

    def check(self) -> None:
        """Assert the bookkeeping is consistent (tests call it; O(blocks))."""
        b = self.block_tokens
        assert self.total_tokens == b * len(self.blocks), "total_tokens != blocks x block size"
        assert self.evictable_tokens == b * sum(1 for x in self.blocks.values() if x.ref == 0), "evictable mismatch"
        for block in self.blocks.values():
            assert block.ref >= 0, "negative lock count"
            assert block.parent is None or self.blocks.get(block.parent.key) is block.parent, "orphaned block"
            kids = sum(1 for x in self.blocks.values() if x.parent is block)
            assert kids == block.children, "child count mismatch"
            if block.ref > 0 and block.parent is not None:
                assert block.parent.ref > 0, "locked block under an unlocked parent"
