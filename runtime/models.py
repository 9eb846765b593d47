"""Run the ONNX graphs of a bundle one decoding step at a time, keeping the KV cache.

`CausalLM` and `Seq2SeqLM` share one interface, which is all the search loops in
`runtime.search` use:

    logits, state = model.start(input_ids, attention_mask)  # prefill; (N, V) at the last position
    logits, state = model.step(next_tokens, state)  # one token per row; the prefix is not re-run
    state = model.select(state, rows)  # reorder / repeat rows (beams, samples)

`CausalLM.resume(prefix, input_ids)` prefills a prompt whose first positions' keys and values
are known (runtime/prefix_cache.py), and `CausalLM.prompt_cache(state, row)` hands a prefilled
row's keys and values back to be kept.

Scoring reads every position instead: `CausalLM.all_logits(input_ids, attention_mask)` and
`Seq2SeqLM.all_logits(source_ids, source_mask, decoder_ids)` return (N, T, V) from one call
with an empty cache (teacher forcing).

`state` holds the KV cache and masks. On CPU the cache is numpy arrays; with IO binding (the
default on CUDA) it stays in OrtValues on the device between steps and only logits come back to
the host. A causal graph whose manifest entry says `"kv_cache": "shared-buffer"` (export/'s lean
GPT-2 graph, built on GroupQueryAttention) keeps its cache in preallocated numpy buffers instead,
bound as both `past` and `present` of each step: the step appends one position in place rather
than copying the whole cache into a new `present` tensor. This module does not pick tokens, apply
processors or decode text.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass, replace

import numpy as np
import onnxruntime as ort

from .manifest import Manifest
from .sessions import io_binding_for

SHARED_BUFFER = "shared-buffer"  # manifest `graphs.decoder.kv_cache`: past and present share memory
_CACHE_HEADROOM = 128  # positions a shared buffer holds beyond the prompt before it must grow
_LAST_POSITION = np.array(1, dtype=np.int64)  # `logits_to_keep` feed: the last position only
_ALL_POSITIONS = np.array(0, dtype=np.int64)  # `logits_to_keep` feed: every position
_LAST_TWO_POSITIONS = np.array(2, dtype=np.int64)  # `logits_to_keep` feed: the last two


class SharedCache:
    """A causal graph's KV cache as preallocated buffers, each bound once as both the past and the
    present of its layer; every call on it appends the new positions in place.

    The IO binding is made once per set of buffers and reused by every step, so a step binds only
    its three small inputs. Logits land in a preallocated buffer too.
    """

    def __init__(
        self,
        session,
        past_names,
        present_names,
        buffers,
        vocab: int,
        adapter=None,
        pool=None,
        pair_lone_row: bool = False,
    ):
        self.session = session
        self.names = (past_names, present_names)
        self.adapter = adapter
        # A lone row's one-token calls run beside a phantom row (`_with_phantom_row`): its cache
        # lives in row 0 of two-row arrays, bound by `self._paired`.
        self._paired = None
        if pair_lone_row and len(buffers[0]) == 1:
            if pool is None or len(pool[0]) < 2:
                pool = tuple(np.concatenate([b, np.zeros_like(b)]) for b in buffers)  # (2, …)
                buffers = tuple(p[:1] for p in pool)
            self._paired = SharedCache(
                session, past_names, present_names, tuple(p[:2] for p in pool), vocab, adapter
            )
        self._rows = None  # one SharedCache per row over its slice of `buffers` (`run_rows`)
        self.buffers = buffers  # per layer key, value: (N, H, capacity, D)
        # The arrays (R >= N, H, capacity, D) whose first N rows `buffers` are, when rows may be
        # added in place (`CausalLM.admit`); else None.
        self.pool = pool
        self.vocab = vocab
        self.binding = session.io_binding()
        for name, value in (adapter.parameters if adapter else {}).items():  # LoRA factors
            self.binding.bind_ortvalue_input(name, value)
        # OrtValues over numpy memory (no copy); kept here so the memory outlives the binding.
        self._values = [ort.OrtValue.ortvalue_from_numpy(buffer) for buffer in buffers]
        for past, present, value in zip(past_names, present_names, self._values):
            self.binding.bind_ortvalue_input(past, value)
            self.binding.bind_ortvalue_output(present, value)
        self._logits = None  # (N, S, V) buffer of the last call, and its OrtValue
        self._logits_value = None

    @property
    def capacity(self) -> int:
        return self.buffers[0].shape[2]

    def run(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        """One graph call; returns logits (N, S, V), or (N, k, V) for a `logits_to_keep` k > 0,
        overwritten by the next call."""
        batch, steps = feeds["input_ids"].shape
        if self._paired is not None and steps == 1:
            return self._paired.run(_with_phantom_row(feeds))[:1]  # (1, 1, V)
        if "logits_to_keep" in feeds:
            steps = min(steps, int(feeds["logits_to_keep"])) or steps
        if self._logits is None or self._logits.shape[1] != steps:
            self._logits = np.empty((batch, steps, self.vocab), dtype=np.float32)
            self._logits_value = ort.OrtValue.ortvalue_from_numpy(self._logits)
            self.binding.bind_ortvalue_output("logits", self._logits_value)
        feeds = {name: np.asarray(value, order="C") for name, value in feeds.items()}
        for name, value in feeds.items():
            self.binding.bind_cpu_input(name, value)
        self.session.run_with_iobinding(self.binding)
        return self._logits

    def run_rows(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        """`run` as one call per row, each on that row's slice of the buffers (no copy): every
        row takes the graph's one-row kernels, as it does alone. Returns logits (N, S, V)."""
        batch = feeds["input_ids"].shape[0]
        if self._rows is None:
            self._rows = [
                SharedCache(
                    self.session,
                    *self.names,
                    tuple(buffer[row : row + 1] for buffer in self.buffers),  # (1, H, capacity, D)
                    self.vocab,
                    self.adapter,
                )
                for row in range(batch)
            ]
        per_row = [
            cache.run(
                {
                    name: value[row : row + 1] if value.ndim else value
                    for name, value in feeds.items()
                }
            )
            for row, cache in enumerate(self._rows)
        ]
        return np.concatenate(per_row)  # (N, S, V)


def _with_phantom_row(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A lone row's one-token feeds of a slot graph (`seqlens_k`) as two rows: the row, and a
    phantom that repeats its token in the first slot of its own cache row and attends to that
    slot alone (cheap), so every matrix product runs on two rows, never one."""
    mask = feeds["attention_mask"]  # (1, T)
    phantom_mask = np.zeros_like(mask)
    phantom_mask[0, 0] = 1
    return {
        **feeds,
        "input_ids": np.repeat(feeds["input_ids"], 2, axis=0),  # (2, 1)
        "attention_mask": np.concatenate([mask, phantom_mask]),  # (2, T)
        "seqlens_k": np.concatenate([feeds["seqlens_k"], np.zeros(1, np.int32)]),  # (2,)
    }


@dataclass(frozen=True)
class CausalState:
    # Per layer key, value: (N, H, T, D); or a SharedCache whose buffers (N, H, capacity >= T, D)
    # hold T valid positions. A step writes position T of a SharedCache in place, so each state
    # is stepped at most once (`select` makes fresh buffers).
    past: tuple[np.ndarray, ...] | SharedCache
    attention_mask: np.ndarray  # (N, T) int64, 0 on left padding (and, for a graph fed
    # `seqlens_k`, after a row's last slot: see `CausalLM.join`)
    next_position: np.ndarray  # (N,) int64, position id of the next token


@dataclass(frozen=True)
class Seq2SeqState:
    self_past: tuple[np.ndarray, ...]  # per decoder layer key, value: (N, H, T, D)
    cross_past: tuple[np.ndarray, ...]  # per decoder layer key, value over the source: (N, H, S, D)
    encoder_hidden: np.ndarray  # (N, S, hidden)
    encoder_mask: np.ndarray  # (N, S) int64
    source_row: np.ndarray  # (N,) the source each row decodes; rows of one source share the above


class GraphRunner:
    """Runs one session; with `io_binding`, outputs stay on the session's device as OrtValues."""

    def __init__(self, session, io_binding: bool | None = None, adapter=None):
        self.session = session
        self.io_binding = io_binding_for(session, io_binding)
        self.device = "cuda" if "CUDAExecutionProvider" in session.get_providers() else "cpu"
        self.adapter = adapter  # runtime.adapters.Adapter fed to every call, or None

    def run(self, outputs: list[str], feeds: dict) -> list:
        """Outputs in order: the first (logits) as numpy, the rest as device values."""
        if not self.io_binding:
            if self.adapter:
                return self.session.run(outputs, feeds, self.adapter.run_options)
            return self.session.run(outputs, feeds)
        binding = self.session.io_binding()
        if self.adapter:  # IO binding ignores active adapters: bind the factors as inputs
            for name, value in self.adapter.parameters.items():  # OrtValues: nothing is copied
                binding.bind_ortvalue_input(name, value)
        for name, value in feeds.items():
            if not isinstance(value, ort.OrtValue):
                value = ort.OrtValue.ortvalue_from_numpy(
                    np.asarray(value, order="C"), self.device, 0
                )
            binding.bind_ortvalue_input(name, value)
        for name in outputs:
            binding.bind_output(name, self.device)
        self.session.run_with_iobinding(binding)
        first, *rest = binding.get_outputs()
        return [first.numpy(), *rest]

    def to_host(self, value) -> np.ndarray:
        """A cache tensor (numpy or OrtValue) as a numpy array."""
        return value if isinstance(value, np.ndarray) else value.numpy()

    def to_device(self, array: np.ndarray):
        """A numpy cache tensor where this runner keeps its cache (as is, or an OrtValue)."""
        if not self.io_binding:
            return array
        return ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(array), self.device, 0)

    def take(self, value, rows: np.ndarray):
        """Rows `rows` of a cache tensor (numpy or OrtValue), on the same device."""
        if isinstance(value, np.ndarray):
            return np.take(value, rows, axis=0)
        picked = np.take(value.numpy(), rows, axis=0)
        return ort.OrtValue.ortvalue_from_numpy(picked, self.device, 0)


def _graph_io(session) -> tuple[list[str], list[str]]:
    return [i.name for i in session.get_inputs()], [o.name for o in session.get_outputs()]


def _positions(attention_mask: np.ndarray) -> np.ndarray:
    """Position ids (N, T) of a left-padded batch: they count real tokens only, so a padded
    prompt starts at 0 like an unpadded one."""
    positions = np.cumsum(attention_mask, axis=1) - 1  # (N, T)
    return np.where(attention_mask == 0, 1, positions).astype(np.int64)


def _past_dtype(session) -> type:
    for node in session.get_inputs():
        if node.name.startswith("past_key_values"):
            return np.float16 if "float16" in node.type else np.float32
    return np.float32


class CausalLM:
    """A decoder-only graph: input_ids, attention_mask, [position_ids], past_key_values.* in;
    with an `adapter` (runtime/adapters.py), its LoRA factors go with every call."""

    def __init__(
        self,
        session,
        manifest: Manifest,
        io_binding: bool | None = None,
        adapter=None,
        pair_lone_rows: bool | None = None,
    ):
        self.adapter = adapter
        self.runner = GraphRunner(session, io_binding, adapter)
        self.inputs, self.outputs = _graph_io(session)
        self.past_names = [n for n in self.inputs if n.startswith("past_key_values")]
        self.present_names = [n for n in self.outputs if n.startswith("present")]
        self.uses_position_ids = "position_ids" in self.inputs
        # Generation reads the last position only; graphs that can skip the others' LM head
        # are asked to.
        self.keeps_last_logits = "logits_to_keep" in self.inputs
        # GroupQueryAttention's per-row cache lengths as inputs (export's lean Llama graph), so a
        # batcher can give each row its own; here every row holds the mask's T positions.
        self.feeds_seqlens = "seqlens_k" in self.inputs
        self.num_heads = manifest.num_heads
        self.head_size = manifest.head_size
        self.dtype = _past_dtype(session)
        kv_cache = manifest.graphs["decoder"].kv_cache
        # The in-place buffers are numpy memory: CPU sessions without device binding only. Bound
        # to a device (CUDA, or CPU with io_binding=True), such a graph takes its cache as
        # separate past and present device tensors instead, which the graph equally accepts.
        cpu_arrays = self.runner.device == "cpu" and not self.runner.io_binding
        self.shared_cache = kv_cache == SHARED_BUFFER and cpu_arrays
        self.vocab_size = manifest.vocab_size
        # Decode steps one row per call (manifest `one_row_steps`: the graph's one-row kernels
        # are its fast ones), so a step's rows are computed as each is alone.
        slots = self.shared_cache and self.feeds_seqlens
        self.one_row_steps = bool(manifest.graphs["decoder"].one_row_steps) and slots
        # Whether a lone row's one-token calls run beside a phantom row (`SharedCache`): None
        # decides by `lone_row_differs`, on this CPU with this session's threads. With one-row
        # steps only a one-token prompt is such a call, and it is always paired: it must take
        # the many-row kernels that every longer prompt takes.
        self.pairs_lone_rows = False
        if pair_lone_rows is None:
            pair_lone_rows = slots and (self.one_row_steps or self.lone_row_differs())
        if pair_lone_rows and not (self.shared_cache and self.feeds_seqlens):
            raise ValueError(
                "`pair_lone_rows` must be False or None for a graph without `seqlens_k` and a "
                "shared-buffer cache on the CPU, got True"
            )
        self.pairs_lone_rows = pair_lone_rows

    def lone_row_differs(self) -> bool:
        """Whether one row's next-token logits, computed alone, differ in any bit from the same
        row's in a batch of two. On some CPUs onnxruntime gives a matrix product of one row its
        own kernel, which sums in another order (docs/RUNTIME.md, "Batch invariance"); that
        kernel's choice depends only on the shapes, so one short prompt tells."""
        prompt = np.random.default_rng(0).integers(0, self.vocab_size, (2, 3))  # (2, 3)
        logits, state = self.start(prompt, np.ones_like(prompt))
        tokens = logits.argmax(axis=-1)  # (2,)
        paired, _ = self.step(tokens, state)
        lone, _ = self.step(tokens[:1], self.select(state, np.array([0])))
        return not np.array_equal(lone[0], paired[0])

    def _run(self, input_ids, attention_mask, positions, past, every_position=False, step=False):
        """One graph call (one per row for a `step` with `one_row_steps`): logits (N, V) at the
        last position, or (N, T, V) at every position with `every_position`, and the new past."""
        feeds = {"input_ids": input_ids, "attention_mask": attention_mask}
        if self.uses_position_ids:
            feeds["position_ids"] = positions
        if self.keeps_last_logits:
            feeds["logits_to_keep"] = _ALL_POSITIONS if every_position else _LAST_POSITION
            lone_prompt = input_ids.shape[0] == 1 and input_ids.shape[1] > 1
            if self.pairs_lone_rows and lone_prompt and not every_position:
                # the LM head of a lone prompt runs on its last two positions, never on one row
                feeds["logits_to_keep"] = _LAST_TWO_POSITIONS
        if self.feeds_seqlens:  # each row's cache length after the call, minus 1
            feeds["seqlens_k"] = (_slots_used(attention_mask) - 1).astype(np.int32)  # (N,)
            feeds["total_sequence_length"] = np.array(attention_mask.shape[1], dtype=np.int32)
        if isinstance(past, SharedCache):
            run = past.run_rows if step and self.one_row_steps else past.run
            logits = run(feeds)  # (N, T or 1, V), overwritten by the next call: copied
            return (logits.copy() if every_position else logits[:, -1, :].copy()), past
        feeds.update(zip(self.past_names, past))
        logits, *present = self.runner.run(["logits", *self.present_names], feeds)
        if not every_position:
            logits = logits[:, -1, :]  # (N, V)
        return logits.astype(np.float32, copy=False), tuple(present)

    def all_logits(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        """Logits (N, T, V) at every position of left-padded `input_ids` (N, T), from an empty
        cache: position t holds the scores of the token after input_ids[:, t]."""
        batch, length = input_ids.shape
        past = self._empty_past(batch, length if self.shared_cache else 0)
        logits, _ = self._run(
            input_ids, attention_mask, _positions(attention_mask), past, every_position=True
        )
        return logits

    def _empty_past(self, batch: int, capacity: int) -> tuple[np.ndarray, ...] | SharedCache:
        shape = (batch, self.num_heads, capacity, self.head_size)  # (N, H, capacity, D)
        if not self.shared_cache:
            return (np.zeros(shape, dtype=self.dtype),) * len(self.past_names)
        if self.pairs_lone_rows and batch == 1:  # room for the phantom row (`SharedCache`)
            pool = tuple(_cache_zeros((2, *shape[1:]), self.dtype) for _ in self.past_names)
            return self._shared(tuple(b[:1] for b in pool), pool)
        return self._shared(tuple(_cache_zeros(shape, self.dtype) for _ in self.past_names))

    def _shared(self, buffers: tuple[np.ndarray, ...], pool=None) -> SharedCache:
        session = self.runner.session
        return SharedCache(
            session,
            self.past_names,
            self.present_names,
            buffers,
            self.vocab_size,
            self.adapter,
            pool,
            self.pairs_lone_rows,
        )

    def start(self, input_ids: np.ndarray, attention_mask: np.ndarray):
        batch, length = input_ids.shape
        past = self._empty_past(batch, length + _CACHE_HEADROOM if self.shared_cache else 0)
        positions = _positions(attention_mask)
        logits, past = self._run(input_ids, attention_mask, positions, past)
        state = CausalState(past, attention_mask, positions[:, -1] + 1)
        return logits, state

    def resume(self, prefix: tuple[np.ndarray, ...], input_ids: np.ndarray):
        """`start` for one prompt whose first L positions' keys and values are known: `prefix`
        per cache tensor (1, H, L, D) (runtime/prefix_cache.py), `input_ids` (1, S) the rest
        of the prompt. Returns what `start` returns for the whole prompt (1, L + S)."""
        length = prefix[0].shape[2] + input_ids.shape[1]
        mask = np.ones((1, length), dtype=np.int64)  # (1, L + S)
        positions = np.arange(prefix[0].shape[2], length, dtype=np.int64)[None]  # (1, S)
        if self.shared_cache:
            past = self._empty_past(1, length + _CACHE_HEADROOM)
            for buffer, known in zip(past.buffers, prefix):
                buffer[:, :, : known.shape[2]] = known
        else:
            past = tuple(self.runner.to_device(np.ascontiguousarray(p)) for p in prefix)
        logits, past = self._run(input_ids, mask, positions, past)
        return logits, CausalState(past, mask, np.array([length], dtype=np.int64))

    def prompt_cache(self, state: CausalState, row: int) -> tuple[np.ndarray, ...]:
        """The keys and values of row `row` of a prefill's state (`start` or `resume`, so no
        padding), per cache tensor (H, T, D) on the host: what runtime/prefix_cache.py keeps."""
        length = state.attention_mask.shape[1]
        past = state.past.buffers if isinstance(state.past, SharedCache) else state.past
        return tuple(self.runner.to_host(layer)[row, :, :length] for layer in past)

    def step(self, tokens: np.ndarray, state: CausalState):
        batch = tokens.shape[0]
        if self.feeds_seqlens:  # each row's token goes to the slot after its own last one
            used = _slots_used(state.attention_mask)  # (N,)
            mask = np.zeros((batch, int(used.max()) + 1), dtype=np.int64)  # (N, T + 1)
            mask[:, : state.attention_mask.shape[1]] = state.attention_mask
            mask[np.arange(batch), used] = 1
        else:
            mask = np.concatenate(
                [state.attention_mask, np.ones((batch, 1), dtype=np.int64)], axis=1
            )  # (N, T + 1)
        past = state.past
        if isinstance(past, SharedCache) and past.capacity < mask.shape[1]:
            past = self._grown(past, valid=state.attention_mask.shape[1])
        logits, past = self._run(
            tokens.reshape(batch, 1).astype(np.int64),  # (N, 1)
            mask,
            state.next_position.reshape(batch, 1),  # (N, 1)
            past,
            step=True,
        )
        return logits, CausalState(past, mask, state.next_position + 1)

    def _grown(self, cache: SharedCache, valid: int) -> SharedCache:
        """New shared buffers with twice the capacity, holding the first `valid` positions. A
        pool (`admit`) grows into a pool with as many spare rows, so the batch goes on adding and
        dropping rows in place; otherwise its next `retain` would copy every row twice (`select`,
        then `join`), three copies of the batch's cache alive at once."""
        if cache.pool is None:
            grown = self._empty_past(cache.buffers[0].shape[0], 2 * cache.capacity)
            for new, old in zip(grown.buffers, cache.buffers):
                new[:, :, :valid] = old[:, :, :valid]
            return grown
        rows = len(cache.buffers[0])
        shape = (len(cache.pool[0]), self.num_heads, 2 * cache.capacity, self.head_size)
        pool = []  # (R, H, 2C, D) per cache tensor
        for old, old_whole in zip(cache.buffers, cache.pool):
            pool.append(_cache_zeros(shape, self.dtype))
            pool[-1][:rows, :, :valid] = old[:, :, :valid]
            # the old cache is dropped once grown: its memory goes back tensor by tensor, so
            # growing never holds two copies of the batch's keys and values at once
            _release_rows((old_whole,), 0, len(old_whole))
        return self._shared(tuple(b[:rows] for b in pool), tuple(pool))

    def select(self, state: CausalState, rows: np.ndarray) -> CausalState:
        if isinstance(state.past, SharedCache):
            past = self._shared(tuple(np.take(b, rows, axis=0) for b in state.past.buffers))
        else:
            past = tuple(self.runner.take(p, rows) for p in state.past)
        return CausalState(
            past,
            np.take(state.attention_mask, rows, axis=0),
            np.take(state.next_position, rows, axis=0),
        )

    def join(self, states: list[CausalState], align: int = 1) -> CausalState:
        """One state holding the rows of `states` in order, each left-padded to the longest row
        (runtime/engine.py: requests of different lengths step as one batch). Leading positions
        that are padding in every row are dropped, so `join([select(state, rows)])` also trims
        what the rows left behind no longer need. With `align`, padding is added and dropped in
        multiples of `align` positions only (the states' widths must then agree modulo `align`).

        A graph fed `seqlens_k` (export's lean Llama graph) has no position ids: a token's rotary
        position is its slot in the row's cache. Its rows keep their slots (each row's cache
        first, zeros after it, up to the longest row), so a row joining longer ones keeps its
        positions, and each row's next token goes to its own next slot (`step`)."""
        if self.feeds_seqlens:
            return self._join_slots(states)
        widths = [_real_width(s.attention_mask, align) for s in states]
        width = max(widths)
        mask = np.concatenate(
            [
                np.pad(
                    s.attention_mask[:, s.attention_mask.shape[1] - w :], ((0, 0), (width - w, 0))
                )
                for s, w in zip(states, widths)
            ]
        )  # (N, width)
        positions = np.concatenate([s.next_position for s in states])  # (N,)
        if self.shared_cache:
            past = self._empty_past(mask.shape[0], width + _CACHE_HEADROOM)
            row = 0
            for s, w in zip(states, widths):
                valid, rows = s.attention_mask.shape[1], s.attention_mask.shape[0]
                for new, old in zip(past.buffers, s.past.buffers):
                    new[row : row + rows, :, width - w : width] = old[:, :, valid - w : valid]
                row += rows
            return CausalState(past, mask, positions)
        layers = []
        for layer in range(len(self.past_names)):
            values = [self.runner.to_host(s.past[layer]) for s in states]  # (n, H, T, D) each
            parts = [v[:, :, v.shape[2] - w :] for v, w in zip(values, widths)]
            layers.append(self.runner.to_device(_stacked(parts, width, left_padded=True)))
        return CausalState(tuple(layers), mask, positions)

    def admit(self, state: CausalState | None, new: list[CausalState], align: int = 1):
        """`join([state, *new], align)` (just `new` when `state` is None), for runtime/engine.py.

        A graph whose rows keep their slots, with its cache in shared buffers, joins in place:
        the batch lives in the first rows of a pool of buffers with spare rows and slots (what
        `join` makes for it), and only the new rows are copied in (a row's slots after its last
        are never read, so they need no clearing). Other graphs, or a pool without room, copy
        every row (`join`)."""
        if state is None or not self._pooled(state):
            return self.join([state, *new] if state is not None else new, align)
        width = max(int(_slots_used(s.attention_mask).max()) for s in [state, *new])
        cache, rows = state.past, len(state.attention_mask)
        total = rows + sum(len(s.attention_mask) for s in new)
        if total > cache.pool[0].shape[0] or width >= cache.capacity:
            return self.join([state, *new], align)
        mask = np.zeros((total, width), dtype=np.int64)  # (N, width)
        mask[:rows, : min(width, state.attention_mask.shape[1])] = state.attention_mask[:, :width]
        for s in new:
            used = s.attention_mask.shape[1]
            mask[rows : rows + len(s.attention_mask), :used] = s.attention_mask
            for pool, old in zip(cache.pool, s.past.buffers):
                pool[rows : rows + len(old), :, :used] = old[:, :, :used]
            rows += len(s.attention_mask)
        positions = np.concatenate([state.next_position, *(s.next_position for s in new)])
        past = self._shared(tuple(b[:total] for b in cache.pool), cache.pool)
        return CausalState(past, mask, positions)

    def retain(self, state: CausalState, rows: np.ndarray, align: int = 1) -> CausalState:
        """`join([select(state, rows)], align)`, for runtime/engine.py: row i of the result is
        row `rows[i]` of `state`. A pooled cache (`admit`) moves rows in place, copying only the
        rows that move and only their used slots; `rows` must then never move a row onto one
        that a later row still moves from: each row either stays (`rows[i] == i`), moves down
        onto a row the batch left, or moves down with every kept row in between also moving
        down (`rows` increasing). The slots a moved row's former occupant used beyond the new
        one's, and the rows the batch left, go back to the kernel."""
        if not self._pooled(state):
            return self.join([self.select(state, rows)], align)
        used = _slots_used(state.attention_mask)  # (N,)
        pool = state.past.pool
        for target, source in enumerate(rows):
            if target != source:
                for buffer in pool:
                    buffer[target, :, : used[source]] = buffer[source, :, : used[source]]
                _release_slots(pool, target, used[source], used[target])
        _release_rows(pool, len(rows), len(state.attention_mask))  # rows the batch left
        mask = state.attention_mask[rows]  # (N', T)
        width = int(used[rows].max())
        past = self._shared(tuple(b[: len(rows)] for b in pool), pool)
        return CausalState(past, mask[:, :width], state.next_position[rows])

    @property
    def pools_rows(self) -> bool:
        """Whether `admit` copies joining rows into a pool in place, not the batch into a new
        cache: rows keep their slots, in shared buffers."""
        return self.feeds_seqlens and self.shared_cache

    def _pooled(self, state: CausalState) -> bool:
        """Whether `state`'s cache is a pool, which `join` makes only where rows keep slots."""
        return isinstance(state.past, SharedCache) and state.past.pool is not None

    def _join_slots(self, states: list[CausalState]) -> CausalState:
        """`join` for rows that keep their slots: each row's slots [0, used) stay where they
        are, zeros after them, up to the longest row."""
        width = max(int(_slots_used(s.attention_mask).max()) for s in states)
        sizes = [s.attention_mask.shape[0] for s in states]
        mask = np.zeros((sum(sizes), width), dtype=np.int64)  # (N, width)
        starts = np.cumsum([0, *sizes])
        for s, row in zip(states, starts):
            kept = min(width, s.attention_mask.shape[1])
            mask[row : row + len(s.attention_mask), :kept] = s.attention_mask[:, :kept]
        positions = np.concatenate([s.next_position for s in states])  # (N,)
        if self.shared_cache:  # into a pool with as many spare rows, for `admit`
            shape = (2 * len(mask), self.num_heads, width + _CACHE_HEADROOM, self.head_size)
            pool = tuple(_cache_zeros(shape, self.dtype) for _ in self.past_names)
            for s, row, size in zip(states, starts, sizes):
                for new, old in zip(pool, s.past.buffers):
                    kept = min(width, old.shape[2])
                    new[row : row + size, :, :kept] = old[:, :, :kept]
            past = self._shared(tuple(b[: len(mask)] for b in pool), pool)
            return CausalState(past, mask, positions)
        layers = []
        for layer in range(len(self.past_names)):
            parts = [self.runner.to_host(s.past[layer])[:, :, :width] for s in states]
            layers.append(self.runner.to_device(_stacked(parts, width, left_padded=False)))
        return CausalState(tuple(layers), mask, positions)


def _stacked(parts: list[np.ndarray], width: int, left_padded: bool) -> np.ndarray:
    """Caches (n_i, H, w_i <= width, D) stacked by rows into one (N, H, width, D), each padded
    with zeros to `width` on the left (`left_padded`) or on the right, in one copy."""
    first = parts[0]
    shape = (sum(len(p) for p in parts), first.shape[1], width, first.shape[3])  # (N, H, width, D)
    stacked = np.zeros(shape, dtype=first.dtype)
    row = 0
    for part in parts:
        columns = slice(width - part.shape[2], width) if left_padded else slice(0, part.shape[2])
        stacked[row : row + len(part), :, columns] = part
        row += len(part)
    return stacked


def _cache_zeros(shape: tuple[int, ...], dtype) -> np.ndarray:
    """Zeros for a shared-buffer cache in memory that the kernel provides only as it is written,
    a 4 KiB page at a time: an anonymous private mapping with huge pages off. A pool has room for
    rows and slots its batch may never use, and numpy asks for 2 MiB pages on large arrays, so
    one slot written in every 2 MiB made a whole pool resident (measured on the flagship with 64
    three-turn chats: 8.3 GB of process memory for the 1.4 GB that the batch's rows held)."""
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    if size == 0 or not hasattr(mmap, "MADV_NOHUGEPAGE"):  # nothing to map, or not Linux
        return np.zeros(shape, dtype=dtype)
    region = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    region.madvise(mmap.MADV_NOHUGEPAGE)
    return np.frombuffer(region, dtype=dtype).reshape(shape)


def _release_rows(pool: tuple[np.ndarray, ...], start: int, stop: int) -> None:
    """Hand the memory of rows [start, stop) of a pool's arrays (`_cache_zeros`, rows first) back
    to the kernel, whole pages only; those rows then read as zeros."""
    for array in pool:
        _release_bytes(array, start * array.strides[0], stop * array.strides[0])


def _release_slots(pool: tuple[np.ndarray, ...], row: int, start: int, stop: int) -> None:
    """`_release_rows` for slots [start, stop) of one row: one span per head (N, H, C, D)."""
    for array in pool:
        for head in range(array.shape[1]):
            base = row * array.strides[0] + head * array.strides[1]
            _release_bytes(array, base + start * array.strides[2], base + stop * array.strides[2])


def _release_bytes(array: np.ndarray, start: int, stop: int) -> None:
    """Hand bytes [start, stop) of `array`'s memory back to the kernel, whole pages only, when
    `array` is a view of a mapping of its own (`_cache_zeros`); they then read as zeros."""
    region = array  # the mapping is under the views: ndarray → ndarray → memoryview
    while isinstance(region, (np.ndarray, memoryview)):
        region = region.base if isinstance(region, np.ndarray) else region.obj
    if not isinstance(region, mmap.mmap):  # np.zeros: no mapping of its own
        return
    first = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE
    end = stop // mmap.PAGESIZE * mmap.PAGESIZE
    if end > first:
        region.madvise(mmap.MADV_DONTNEED, first, end - first)


def _slots_used(mask: np.ndarray) -> np.ndarray:
    """Per row of a mask (N, T), one past its last 1: the cache slots the row uses (N,)."""
    return mask.shape[1] - np.argmax(mask[:, ::-1] == 1, axis=1)


def _real_width(mask: np.ndarray, align: int = 1) -> int:
    """Columns of a left-padded mask (N, T) from the first one any row uses, less leading ones
    dropped in multiples of `align` only."""
    used = mask.any(axis=0)
    unused = int(np.argmax(used)) if used.any() else mask.shape[1]
    return mask.shape[1] - unused // align * align


class Seq2SeqLM:
    """An encoder graph plus a merged decoder graph with `use_cache_branch` (optimum layout)."""

    def __init__(self, encoder_session, decoder_session, manifest: Manifest, io_binding=None):
        self.encoder = encoder_session
        self.decoder = GraphRunner(decoder_session, io_binding)
        self.decoder_inputs, outputs = _graph_io(decoder_session)
        self.past_names = [n for n in self.decoder_inputs if n.startswith("past_key_values")]
        self.present_names = [n for n in outputs if n.startswith("present")]
        self.self_slots = [i for i, n in enumerate(self.past_names) if ".decoder." in n]
        self.cross_slots = [i for i, n in enumerate(self.past_names) if ".encoder." in n]
        self.num_heads = manifest.num_heads
        self.head_size = manifest.head_size
        self.start_token = manifest.special_tokens.decoder_start_token_id
        self.dtype = _past_dtype(decoder_session)
        self.encoder_takes_mask = "attention_mask" in _graph_io(encoder_session)[0]

    def all_logits(
        self, source_ids: np.ndarray, source_mask: np.ndarray, decoder_ids: np.ndarray
    ) -> np.ndarray:
        """Decoder logits (N, T, V) for right-padded sources (N, S) and decoder inputs (N, T)
        (the start token, then the target shifted right): teacher forcing in one call."""
        encoder_hidden = self._encode(source_ids, source_mask)
        batch = source_ids.shape[0]
        empty = np.zeros((batch, self.num_heads, 0, self.head_size), dtype=self.dtype)
        feeds = {
            "input_ids": decoder_ids.astype(np.int64),
            "encoder_hidden_states": encoder_hidden,
            "encoder_attention_mask": source_mask,
            "use_cache_branch": np.array([False]),
        }
        feeds.update(zip(self.past_names, [empty] * len(self.past_names)))
        feeds = {k: v for k, v in feeds.items() if k in self.decoder_inputs}
        logits, *_ = self.decoder.run(["logits", *self.present_names], feeds)
        return np.asarray(logits, dtype=np.float32)  # (N, T, V)

    def _encode(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        feeds = {"input_ids": input_ids}
        if self.encoder_takes_mask:
            feeds["attention_mask"] = attention_mask
        (encoder_hidden,) = self.encoder.run(["last_hidden_state"], feeds)  # (N, S, hidden)
        return encoder_hidden

    def _run_decoder(self, tokens, encoder_hidden, encoder_mask, past, use_cache):
        feeds = {
            "input_ids": tokens,
            "encoder_hidden_states": encoder_hidden,
            "encoder_attention_mask": encoder_mask,
            "use_cache_branch": np.array([use_cache]),
        }
        feeds.update(zip(self.past_names, past))
        feeds = {k: v for k, v in feeds.items() if k in self.decoder_inputs}
        logits, *present = self.decoder.run(["logits", *self.present_names], feeds)
        return logits[:, -1, :].astype(np.float32, copy=False), present  # (N, V)

    def start(self, input_ids: np.ndarray, attention_mask: np.ndarray):
        encoder_hidden = self._encode(input_ids, attention_mask)
        batch = input_ids.shape[0]
        # The no-cache branch ignores past inputs, but they must still have valid shapes.
        empty = np.zeros((batch, self.num_heads, 0, self.head_size), dtype=self.dtype)
        start = np.full((batch, 1), self.start_token, dtype=np.int64)  # (N, 1)
        logits, present = self._run_decoder(
            start, encoder_hidden, attention_mask, [empty] * len(self.past_names), False
        )
        state = Seq2SeqState(
            tuple(present[i] for i in self.self_slots),
            tuple(present[i] for i in self.cross_slots),
            encoder_hidden,
            attention_mask,
            np.arange(batch),
        )
        return logits, state

    def step(self, tokens: np.ndarray, state: Seq2SeqState):
        past: list = [None] * len(self.past_names)
        for slot, value in zip(self.self_slots, state.self_past):
            past[slot] = value
        for slot, value in zip(self.cross_slots, state.cross_past):
            past[slot] = value
        logits, present = self._run_decoder(
            tokens.reshape(-1, 1).astype(np.int64),  # (N, 1)
            state.encoder_hidden,
            state.encoder_mask,
            past,
            True,
        )
        return logits, replace(state, self_past=tuple(present[i] for i in self.self_slots))

    def select(self, state: Seq2SeqState, rows: np.ndarray) -> Seq2SeqState:
        self_past = tuple(self.decoder.take(p, rows) for p in state.self_past)
        source_row = state.source_row[rows]
        if np.array_equal(source_row, state.source_row):
            # Beam reordering stays within each source's beams: every row keeps its source, so
            # the source-side tensors are already right and copying them would be wasted work.
            return replace(state, self_past=self_past)
        return Seq2SeqState(
            self_past,
            tuple(self.decoder.take(p, rows) for p in state.cross_past),
            np.take(state.encoder_hidden, rows, axis=0),
            np.take(state.encoder_mask, rows, axis=0),
            source_row,
        )
