"""Prefix caching: the KV cache of prompts an engine has prefilled, kept in blocks of token ids so
a later prompt that starts the same way prefills only what is new.

A conversation resends its whole history each turn, and every visitor of a chat shares its
system prompt. `PrefixCache` keeps the keys and values that prefills computed, in blocks of
`BLOCK` positions, each found by a hash of its tokens and of every token before it (a chain, as
vLLM's block hashes: a block's hash names its whole prefix, so equal hashes mean equal
prefixes). `lookup(ids, salt)` walks a prompt's blocks while they are cached and returns their keys
and values (`find` returns the blocks, to copy out later: a burst of prompts does not hold a
copy of every prefix at once); runtime/engine.py then runs only the rest of the prompt over them
(`CausalLM.resume`) and `store`s the prompt's new full blocks. Blocks are shared: the blocks of
a system prompt are held once, whoever's conversation they start, unless the requests carry
different salts (`GenerationConfig.cache_salt`, vLLM's `cache_salt`): a salt is mixed into the
hash of a prompt's first block, and so into every block after it, so prompts with different
salts (or one salted and one not) share nothing, and one client cannot tell from its time to
first token what another sent.

Exactness. Only what a prefill computed is cached, never a decoding step's keys and values:
onnxruntime computes a one-token call with other kernels (matrix-vector rather than matrix-
matrix products), whose results differ in the last bits, and on the int4 flagship by up to ~0.9
in a logit. A prefill over a cached prefix gives bit-identical logits and keys and values to
prefilling the whole prompt at once, as long as it runs at least `MIN_SUFFIX` tokens (measured
on every causal-LM family; tests/test_prefix_cache.py checks it), so a hit always leaves the
prompt's last `MIN_SUFFIX` tokens to run: a request's tokens and log-probabilities are those it
gets without the cache, bit for bit.

Memory. The cache holds at most `max_bytes` of keys and values; when a new block would go
beyond, the least recently used block that no other cached block continues is dropped first
(a prefix outlives its continuations). Blocks only: the last partial block of a prompt is not
kept. This module does not run models; runtime/engine.py decides what to look up and store.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

BLOCK = 16  # positions per cached block: reuse is in whole blocks
MIN_SUFFIX = 2  # prompt tokens a prefill over a cached prefix always runs (see the docstring)
PREFIX_CACHE_BYTES = 2**30  # default budget of one engine's prefix cache (docs/SCALING.md)


@dataclass
class _Block:
    layers: tuple[np.ndarray, ...]  # per cache tensor (key, value of each layer): (H, BLOCK, D)
    parent: bytes | None  # the hash of the block before it, None for a prompt's first
    children: int = 0  # cached blocks that continue this one; only a block with none is dropped


def _chain(parent: bytes | None, tokens: np.ndarray, salt: str | None = None) -> bytes:
    """The hash of a block of `tokens` after the block hashed `parent`; a prompt's first block
    (`parent` None) mixes in its `salt`, so that salted chains share no block with unsalted ones
    or with each other's. Tags keep the three kinds of first input apart (a salt can never pass
    for a parent's hash)."""
    digest = hashlib.blake2b(digest_size=16)
    if parent is not None:
        digest.update(b"block" + parent)
    elif salt is not None:
        digest.update(b"salt" + hashlib.blake2b(salt.encode("utf-8")).digest())
    digest.update(np.ascontiguousarray(tokens, dtype=np.int64).tobytes())
    return digest.digest()


@dataclass(frozen=True)
class CachedPrefix:
    """A prompt's cached prefix as `PrefixCache.find` found it. It holds its blocks, so they
    stay valid if the cache drops them before `layers` copies them out."""

    blocks: tuple[_Block, ...]
    length: int  # positions to reuse: the blocks' first `length`

    def layers(self) -> tuple[np.ndarray, ...]:
        """The keys and values of the prefix, per cache tensor (1, H, length, D)."""
        return tuple(
            np.concatenate([block.layers[i] for block in self.blocks], axis=1)[
                None, :, : self.length
            ]
            for i in range(len(self.blocks[0].layers))
        )


class PrefixCache:
    """Blocks of prefilled keys and values, found by the hash chain of their tokens, within
    `max_bytes` (least recently used blocks without continuations dropped first)."""

    def __init__(self, max_bytes: int = PREFIX_CACHE_BYTES):
        if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 0:
            raise ValueError(f"`prefix_cache_bytes` must be an integer >= 0, got {max_bytes!r}")
        self.max_bytes = max_bytes
        self._blocks: OrderedDict[bytes, _Block] = OrderedDict()  # least recently used first
        self.bytes = 0  # keys and values held now
        # for metrics, benchmarks and tests: lookups that found a prefix, the positions they
        # reused, and the positions of every prompt looked up (vLLM's prefix-cache queries)
        self.hits = 0
        self.reused_positions = 0
        self.queried_positions = 0

    def __len__(self) -> int:
        return len(self._blocks)

    def lookup(self, ids: np.ndarray, salt: str | None = None) -> tuple[np.ndarray, ...] | None:
        """The cached keys and values of the longest cached prefix of `ids` (T,) that leaves at
        least `MIN_SUFFIX` tokens to run, per cache tensor (1, H, L, D); None when there is none.
        Only blocks stored with the same `salt` are found. Marks the blocks used."""
        found = self.find(ids, salt)
        return None if found is None else found.layers()

    def find(self, ids: np.ndarray, salt: str | None = None) -> CachedPrefix | None:
        """`lookup` without copying the keys and values out yet: the blocks found, and how many
        of their positions to reuse (`CachedPrefix.layers` copies them)."""
        self.queried_positions += len(ids)
        chain, parent = [], None
        for start in range(0, len(ids) - len(ids) % BLOCK, BLOCK):  # full blocks only
            key = _chain(parent, ids[start : start + BLOCK], salt)
            if key not in self._blocks:
                break
            chain.append(key)
            parent = key
        length = min(len(chain) * BLOCK, len(ids) - MIN_SUFFIX)
        if length < 1:
            return None
        for key in chain:  # a prefix is touched before its continuations: they stay newer
            self._blocks.move_to_end(key)
        self.hits += 1
        self.reused_positions += length
        return CachedPrefix(tuple(self._blocks[key] for key in chain), length)

    def store(
        self, ids: np.ndarray, layers: tuple[np.ndarray, ...], salt: str | None = None
    ) -> None:
        """Keep the full blocks of a prefilled prompt `ids` (T,), whose keys and values are
        `layers` (per cache tensor (H, >= T, D), positions 0..T-1 the prompt's), under `salt`
        (only a lookup with the same salt finds them): blocks already cached are only marked
        used, new ones are copied."""
        parent = None
        for start in range(0, len(ids) - len(ids) % BLOCK, BLOCK):
            key = _chain(parent, ids[start : start + BLOCK], salt)
            if key in self._blocks:
                self._blocks.move_to_end(key)
            else:
                copied = tuple(np.array(layer[:, start : start + BLOCK]) for layer in layers)
                size = sum(layer.nbytes for layer in copied)
                if not self._make_room(size, keep=parent):
                    return
                self._blocks[key] = _Block(copied, parent)
                self.bytes += size
                if parent is not None:
                    self._blocks[parent].children += 1
            parent = key

    def resize(self, max_bytes: int) -> None:
        """Hold at most `max_bytes` from now on, dropping blocks as `store` would to get there
        (runtime/engine.py shrinks it as its batch needs more of their shared budget)."""
        self.max_bytes = max_bytes
        self._make_room(0, keep=None)

    def _make_room(self, size: int, keep: bytes | None) -> bool:
        """Drop least recently used blocks without continuations until `size` more bytes fit;
        never `keep` (the block the new one continues). False when they cannot fit."""
        while self.bytes + size > self.max_bytes:
            victim = next(
                (k for k, b in self._blocks.items() if b.children == 0 and k != keep), None
            )
            if victim is None:
                return False
            block = self._blocks.pop(victim)
            self.bytes -= sum(layer.nbytes for layer in block.layers)
            if block.parent is not None:
                self._blocks[block.parent].children -= 1
        return True
