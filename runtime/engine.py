"""Continuous batching: one engine loop per loaded causal LM runs every concurrent greedy or
sampled generation as one batch, admitting new requests at every step.

`runtime.load(path)` gives the `Generator` of a causal LM whose manifest says `batch_invariant`
an `Engine` (`uses_engine` decides; `batching=True` insists, `False` declines); its `generate`,
`stream`, `chat` and `stream_chat` then hand their plan to `Engine.events` instead of looping
themselves, with the same API and the same events. Beam search and seq2seq models run
unbatched, on the caller's thread, beside the loop.

The loop, on its own thread:
1. admit waiting requests (up to `max_rows` rows in all) whose prompt length is in phase with
   the batch's cache width (modulo `PAD_ALIGN`; the others wait a step or three): prompts of
   the same length are prefilled together (at most `prefill_tokens` tokens a call), without
   padding, then their cache joins the batch (where the batch is a pool, as each call ends)
   (`CausalLM.join`: rows left-padded to the longest by a multiple of `PAD_ALIGN`, per-row
   positions and attention mask; a lean Llama graph's rows keep their own cache slots instead).
   A prompt that starts with blocks of a prompt prefilled before runs only its new tokens, over
   their cached keys and values (runtime/prefix_cache.py: bit-identical, within its own budget,
   `prefix_cache_bytes`; 0 turns it off);
2. each request picks its tokens from its rows of the batch's logits with its own `TokenSearch`
   (its own `GenerationConfig`, processors, stop strings and `np.random.Generator` seeded from its
   own seed) and its own `RowTexts`, exactly as the unbatched loop does;
3. requests that ended, failed, or whose caller stopped reading or has gone leave the batch
   (the cache is trimmed to the rows that remain); the others' chosen tokens run through the
   model as one step.

Failures. A request's own failure ends that request alone, whatever its cause: a logits
processor, the sampler, logits that are not finite in its rows (NaN or +inf: `TokenSearch.pick`
refuses them), its detokenizer. Its caller gets the exception (a stream after the events it
already had); its rows leave the batch, and every other request goes on exactly as it would
have, bit for bit (nothing a request picks with is shared). A prefill that fails fails only the
requests it was prefilling: a group of equal-length prompts is retried one prompt at a time, so
only a prompt that fails alone fails. Only a failure of the batched model step itself (or of
joining or trimming the batch's cache) fails every request in the batch: there is no row of it
to blame.

Cancellation. A caller that stops reading a stream cancels its request; a caller inside
`runtime.cancel.cancel_when(event)` (a server whose client disconnected sets `event`) has its
request dropped at the loop's next step, and its `generate` or `chat` raises `Cancelled`.

Memory budget. The batch's KV cache holds rows × positions (its width: the longest row's prompt
and generated tokens) × `bytes_per_position` (2 × layers × KV heads × head size × 4 bytes for a
float32 cache, from the manifest's `num_heads` and `head_size` and the graph's layers).
`max_cache_bytes` (default `MAX_CACHE_BYTES`, 2 GiB) gives `max_cache_positions`. A request is
admitted only while the batch's worst case fits: every request running to its `max_steps`
(none ending early), the batch as wide as its longest row at every step (`_fits`). So no mix of
requests can make the batch's cache exceed the budget as they generate (the engine's own
accounting: `cache_positions`, and its high-water mark `peak_cache_positions`). A request that
could not fit alone is refused with a ValueError before it waits. Requests held back for rows
or memory keep their order: later ones never overtake them. The prefix cache lives inside the
same budget: it holds at most what the batch's worst case leaves (and at most
`prefix_cache_bytes`), and gives its least recently used blocks back as the batch grows, as
vLLM's cached blocks give way to running requests. Shared-buffer pools have spare rows and
slots for requests to join in place, but the kernel backs only the pages the rows write; a
request that leaves has its rows filled by the batch's last ones (`row_layout`: one row copied,
not every row after it), and the rows the batch no longer holds, and the slots a moved row's
former occupant used beyond its own, are handed back (runtime/models.py, `_cache_zeros`,
`CausalLM.retain`), and what the loop
frees goes back to the system at most once a second and when the batch empties
(runtime/heap.py). docs/SCALING.md ("Budgets") states the figures per model.

A request's output does not depend on its batch-mates, bit for bit: nothing a row's tokens are
chosen from is shared with another request (no shared generator, no shared filters), a
batch-invariant graph computes each row from that row alone, padding by whole vector lanes
leaves even the rounding of the attention's sums as it is alone, and where this CPU gives a
one-row matrix product its own kernel, a lone row runs beside a phantom row (`CausalLM`,
docs/RUNTIME.md "Batch invariance on the CPUs users have"). tests/test_engine.py compares tokens
and log-probabilities exactly with a run alone; tests/test_flagship_invariance.py does so on the
real flagship and its adapter.
Graphs that quantize activations per tensor (onnxruntime's dynamic int8, `DynamicQuantizeLinear`)
mix rows in the scale, so a result could change with its batch-mates: their manifests do not say
`batch_invariant`, and they never get an engine (docs/RUNTIME.md).

A multi-prompt call becomes one request per prompt, each with a generator seeded from the
call's seed, so every prompt's samples are those it gets alone (unbatched, one generator serves
all the prompts of a call). This module does not tokenize, validate settings or decode text
itself: the generator's plan, `TokenSearch` and `RowTexts` do.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Iterator

import numpy as np

from . import cancel
from .heap import HeapTrimmer
from .manifest import Manifest
from .outputs import StreamEvent
from .parameters import is_int
from .prefix_cache import PREFIX_CACHE_BYTES, PrefixCache
from .search import log_normalizer
from .text import RowTexts

_DONE = object()  # a request's last item in its caller's inbox
PAD_ALIGN = 4  # left padding of a joining row is a multiple of this many positions (`Engine`)
MAX_CACHE_BYTES = 2 * 2**30  # default KV-cache budget of one engine's batch (docs/SCALING.md)
PREFILL_TOKENS = 512  # prompt tokens one prefill call runs at most (`Engine`)


def parse_kv_budget(text: str | None) -> int | None:
    """A `--kv-budget` value in bytes: an integer of bytes, or of KiB, MiB, GiB with a K, M or G
    suffix (1024-based); None stays None (the default budget).

    >>> parse_kv_budget("2G"), parse_kv_budget("512M"), parse_kv_budget("4096")
    (2147483648, 536870912, 4096)
    """
    if text is None:
        return None
    digits, unit = (text[:-1], text[-1].upper()) if text[-1:].isalpha() else (text, "")
    scale = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}.get(unit)
    if scale is None or not digits.isdigit() or int(digits) < 1:
        raise ValueError(
            f"`--kv-budget` must be a positive size in bytes, or with K, M or G, got {text!r}"
        )
    return int(digits) * scale


def cache_bytes_per_position(model) -> int:
    """Bytes one row's KV cache takes per position: a key and a value (N, H, T, D) per layer, so
    2 × layers × KV heads × head size × the cache's item size."""
    itemsize = np.dtype(model.dtype).itemsize
    return len(model.past_names) * model.num_heads * model.head_size * itemsize


def uses_engine(manifest: Manifest, batching: bool | None) -> bool:
    """Whether a model's generations run in an engine loop. None (the default): yes for a causal
    LM whose manifest says `batch_invariant` (each row computed from that row alone), no
    otherwise; True: yes for a causal LM, and ValueError when its graph is not batch-invariant;
    False: no. Seq2seq models never do (they run beside, as beam search does)."""
    if batching not in (None, True, False):
        raise ValueError(f"`batching` must be None, True or False, got {batching!r}")
    if batching is False or manifest.task != "causal-lm":
        return False
    invariant = manifest.batch_invariant
    if batching and not invariant:
        raise ValueError(
            f"`batching` must be None or False for {manifest.name!r} "
            f"({manifest.precision or 'unknown precision'}), whose manifest does not say "
            "`batch_invariant` (its graph may quantize activations per tensor, so batch-mates "
            "could change a result; re-export int8 as weight-only MatMulNBits), got True"
        )
    return batching or invariant


def row_layout(starts: list[int], sizes: list[int]) -> tuple[list[int], np.ndarray]:
    """Where the requests that stay in a batch go when others leave it: given the first rows
    `starts` and row counts `sizes` of the staying requests (in row order), their new order (as
    indices into `starts`) and, for each new row, the old row it comes from (`CausalLM.retain`).

    A request whose rows all lie within the smaller batch keeps them; the others move, whole and
    in order, into the first gap that fits them, so a request that leaves costs a copy of the
    last rows only, not of every row after it. A gap is a row that a leaving request held, so no
    row moves onto one that another row has yet to move from. When a moving request fits no gap
    whole (requests of several rows), every request after the first gap moves down instead,
    keeping the order.

    >>> row_layout([0, 2, 3], [1, 1, 1])  # row 1 left: the last row fills its place
    ([0, 2, 1], array([0, 3, 2]))
    >>> row_layout([1, 2, 4], [1, 1, 2])  # rows 0 and 3 left: two rows fit no gap of one
    ([0, 1, 2], array([1, 2, 4, 5]))
    """
    total = sum(sizes)
    new_starts: list[int | None] = [
        start if start + size <= total else None for start, size in zip(starts, sizes)
    ]
    taken = np.zeros(total, dtype=bool)  # rows a staying request holds, or a moving one leaves
    for start, size in zip(starts, sizes):
        taken[start : start + size] = True  # a moving request's rows within `total` are no gap
    for index, size in enumerate(sizes):
        if new_starts[index] is None:
            new_starts[index] = _first_gap(taken, size)
            if new_starts[index] is None:  # no gap fits it whole: close the gaps in order
                new_starts = list(np.cumsum([0, *sizes[:-1]]))
                break
            taken[new_starts[index] : new_starts[index] + size] = True
    order = sorted(range(len(sizes)), key=new_starts.__getitem__)
    rows = [np.arange(starts[i], starts[i] + sizes[i]) for i in order]
    return order, np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)


def _first_gap(taken: np.ndarray, size: int) -> int | None:
    """The first index of `size` consecutive False values in `taken`, or None."""
    run = 0
    for index, busy in enumerate(taken):
        run = 0 if busy else run + 1
        if run == size:
            return index - size + 1
    return None


class _Request:
    """One prompt's rows in the engine: its search, texts and where its events go."""

    def __init__(self, plan, search, texts, offset: int, inbox: queue.SimpleQueue, live: bool):
        self.plan = plan  # the prompt's DecodingPlan (batch of one prompt)
        self.search = search  # TokenSearch over its rows, with its own random generator
        self.texts = texts  # RowTexts of its rows
        self.offset = offset  # index of its first row in the caller's numbering
        self.inbox = inbox  # lists of events for the caller, then _DONE (or an exception)
        # A live caller (a stream) gets each step's events as they come; otherwise they are held
        # and handed over once, at the end, so a waiting caller does not wake (and take the
        # interpreter lock from the loop) at every step.
        self.held: list[StreamEvent] | None = None if live else []
        self.rows = len(search.done)
        # Cache positions each of its rows may reach: its prompt and every token it may add.
        self.width = plan.input_ids.shape[1] + plan.max_steps
        self.index = 0  # the next step's index
        self.cancelled = False  # set by the caller when it stops reading
        self.stop = cancel.current_event()  # set by whoever cancels the caller (or None)
        self.tokens: np.ndarray | None = None  # (rows,) chosen at the last step

    @property
    def gone(self) -> bool:
        """Whether its caller stopped reading or was cancelled."""
        return self.cancelled or (self.stop is not None and self.stop.is_set())

    def fail(self, error: BaseException) -> None:
        """End the request with `error`, raised in its caller (who may have gone already)."""
        self.inbox.put(error)


class Engine:
    """The batching loop of one `Generator` (a causal LM), within `max_rows` rows and
    `max_cache_bytes` of KV cache per batch."""

    def __init__(
        self,
        gen,
        max_rows: int = 64,
        max_cache_bytes: int = MAX_CACHE_BYTES,
        prefix_cache_bytes: int = PREFIX_CACHE_BYTES,
        prefill_tokens: int = PREFILL_TOKENS,
    ):
        if not is_int(prefill_tokens) or prefill_tokens < 1:
            raise ValueError(f"`prefill_tokens` must be an integer >= 1, got {prefill_tokens!r}")
        self.gen = gen
        self.model = gen.model
        # A row joins longer rows left-padded by a multiple of `align` positions: onnxruntime's
        # attention sums a row's scores in vector lanes that start at the cache's first slot, so
        # padding by a multiple of the lane count leaves every sum, and so the row's logits,
        # bit-identical (measured on bible-lm: padding by 4 or 8 changes nothing, by 1-3 moves
        # fp32 logits by ~5e-6, which int8 activations magnify to ~1e-2). Graphs whose rows keep
        # their own cache slots (runtime/models.py, `CausalLM.join`) need no padding.
        self.align = 1 if self.model.feeds_seqlens else PAD_ALIGN
        self.max_rows = max_rows  # rows in one batch; further requests wait to be admitted
        self.max_cache_bytes = max_cache_bytes
        self.bytes_per_position = cache_bytes_per_position(self.model)
        # rows × positions the batch's cache may hold; further requests wait to be admitted
        self.max_cache_positions = max_cache_bytes // self.bytes_per_position
        # Keys and values of prompts prefilled before, for prompts that start the same way
        # (runtime/prefix_cache.py), at most `prefix_cache_bytes` and never more than the batch
        # leaves of `max_cache_bytes` (`_share_budget`); None with a budget of 0.
        self.prefix_cache_bytes = prefix_cache_bytes
        self.prefix_cache = (
            PrefixCache(min(prefix_cache_bytes, max_cache_bytes)) if prefix_cache_bytes else None
        )
        # Prompt tokens one prefill call runs at most (a longer prompt runs alone): onnxruntime
        # keeps the activations of its largest call for the session's life, and a burst of 64
        # chat prompts prefilled as one call took 4.3 GB of them (llama.cpp's `n_ubatch` is 512)
        self.prefill_tokens = prefill_tokens
        self._waiting: deque[_Request] = deque()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        # batched model steps run, rows stepped, prefill calls: for benchmarks and tests
        self.steps = 0
        self.rows_stepped = 0
        self.prefills = 0
        self.cache_positions = 0  # rows × positions of the batch's cache now
        self.peak_cache_positions = 0  # the most it has held (tests reset it)
        # Freed caches and temporaries go back to the system as the loop runs (runtime/heap.py)
        self.heap = HeapTrimmer()

    def events(
        self, plan, alternatives: int, end_ids=None, live: bool = True
    ) -> Iterator[StreamEvent]:
        """The plan's events (as `Generator._token_events` yields them), computed in the loop:
        step by step when `live`, else all of a request's at its end. Stopping the iteration
        cancels the plan's requests; so does setting the event of an enclosing
        `runtime.cancel.cancel_when` (then this raises `Cancelled`). Raises ValueError for a
        prompt whose rows could never fit the cache budget."""
        gen, copies = self.gen, plan.config.num_return_sequences
        inbox: queue.SimpleQueue = queue.SimpleQueue()
        requests = []
        for prompt, ids in enumerate(plan.encoded):
            own = plan if len(plan.encoded) == 1 else gen._plan([ids], plan.config, None)
            search = gen.token_search(own, alternatives, end_ids)
            texts = RowTexts(gen.tokenizer, own, copies, gen.end_ids(end_ids))
            requests.append(_Request(own, search, texts, prompt * copies, inbox, live))
        for request in requests:
            self._check_fits(request)
        cancel.check()
        with self._wake:
            self._waiting.extend(requests)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="engine", daemon=True)
                self._thread.start()
            self._wake.notify()
        pending = len(requests)
        try:
            while pending:
                item = inbox.get()
                if item is _DONE:
                    pending -= 1
                elif isinstance(item, BaseException):
                    raise item
                else:
                    yield from item
        finally:
            for request in requests:
                request.cancelled = True

    def _check_fits(self, request: _Request) -> None:
        """ValueError when the request's rows could never fit the cache budget, even alone."""
        need = request.rows * request.width
        if need > self.max_cache_positions:
            length = request.plan.input_ids.shape[1]
            megabytes = self.max_cache_positions * self.bytes_per_position / 2**20
            raise ValueError(
                f"`max_new_tokens` (after the prompt's {length} tokens, for {request.rows} "
                f"sequences) must fit the engine's KV cache of {self.max_cache_positions} "
                f"positions ({megabytes:.0f} MB), got ({length} + {request.plan.max_steps}) × "
                f"{request.rows} = {need}; ask for fewer tokens or sequences"
            )

    # ---- the loop (engine thread) ----------------------------------------------------------------

    def _admit(self, active: list[_Request], width: int | None) -> list[_Request]:
        """Waiting requests that fit beside `active` (whose cache is `width` positions wide, None
        when nothing is active), within `max_rows` and the cache budget (`_fits`), and whose
        prompt is in phase with it (`_in_phase`); blocks while nothing is active. Requests out
        of phase wait (at most `align` - 1 steps); requests that do not fit wait for rows to
        leave, and so do all that came after them. Requests whose caller has gone are dropped."""
        batch = list(active)
        rows = sum(r.rows for r in active)
        new, waiting, blocked = [], deque(), False
        with self._wake:
            while not active and not self._waiting:
                self._wake.wait()
            for request in self._waiting:
                if request.gone:
                    request.fail(cancel.Cancelled("the request was cancelled while it waited"))
                    continue
                length = request.plan.input_ids.shape[1]
                fits = not blocked and (rows + request.rows <= self.max_rows or not rows)
                fits = fits and self._fits(batch + [request])
                if fits and (width is None or (width - length) % self.align == 0):
                    new.append(request)
                    batch.append(request)
                    rows += request.rows
                    width = length if width is None else width
                else:
                    blocked = blocked or not fits
                    waiting.append(request)
            self._waiting = waiting
        self._share_budget(batch)
        return new

    def _fits(self, requests: list[_Request]) -> bool:
        """Whether a batch of `requests` stays within `max_cache_positions` until they all end,
        should none end early (`_worst_case`)."""
        return self._worst_case(requests) <= self.max_cache_positions

    def _worst_case(self, requests: list[_Request]) -> int:
        """The most rows × positions the batch's cache of `requests` may hold before they all
        end, should none end early. k steps from now a request still in the batch holds its rows
        at prompt + index + k positions (it stays while k <= its steps left, max_steps - index),
        and the batch's cache is every row as wide as the longest; its most is at the last step
        of one of the requests (the batch widens between those steps and never narrows)."""
        if not requests:
            return 0
        rows = np.array([r.rows for r in requests])  # (R,)
        widest = int(rows.sum()) * max(r.width for r in requests)
        if widest <= self.max_cache_positions:
            return widest  # every row at the widest reach fits: no need to look closer
        now = np.array([r.plan.input_ids.shape[1] + r.index for r in requests])  # (R,)
        left = np.array([r.width for r in requests]) - now  # (R,) steps each has left
        order = np.argsort(-left, kind="stable")  # the longest-lived first
        # at the last step of the j-th longest-lived: the first j + 1 requests are in the batch
        held = np.cumsum(rows[order]) * (np.maximum.accumulate(now[order]) + left[order])
        return int(held.max())

    def _share_budget(self, requests: list[_Request]) -> None:
        """Keep the prefix cache within what the batch of `requests` may still need of the
        budget (`_worst_case`), dropping its least recently used blocks when the batch grows."""
        if self.prefix_cache is not None:
            reserved = self._worst_case(requests) * self.bytes_per_position
            room = max(0, self.max_cache_bytes - reserved)
            self.prefix_cache.resize(min(self.prefix_cache_bytes, room))

    def _prefill(self, requests: list[_Request], prefix=None):
        """The first logits (rows, V) and cache of requests whose prompts have the same length,
        their prompts run as one batch (no padding, so each row is what it is alone); or of one
        request whose prompt's first positions' keys and values are `prefix`
        (`PrefixCache.lookup`). The prompts' full blocks go into the prefix cache."""
        model = self.model
        ids = np.concatenate([r.plan.input_ids for r in requests])  # (n, T)
        if prefix is None:
            logits, state = model.start(ids, np.concatenate([r.plan.mask for r in requests]))
        else:
            logits, state = model.resume(prefix, ids[:, prefix[0].shape[2] :])
        self.prefills += 1
        if self.prefix_cache is not None:
            for row, prompt in enumerate(ids):
                salt = requests[row].plan.config.cache_salt
                self.prefix_cache.store(prompt, model.prompt_cache(state, row), salt)
        rows = [r.rows for r in requests]
        if sum(rows) > len(requests):  # samples of one prompt share its prefill, as unbatched
            repeat = np.repeat(np.arange(len(requests)), rows)
            logits, state = logits[repeat], model.select(state, repeat)
        return logits, state

    def _prefilled(self, requests: list[_Request]):
        """Prefill `requests`, yielding each prefill call's (requests, first logits (rows, V),
        cache) as it ends, so the loop admits it and drops its cache before the next call. Equal
        prompt lengths prefill together, in calls of at most `prefill_tokens` tokens (or one
        prompt); a request whose prompt starts with a cached prefix prefills alone, over it,
        whose keys and values are copied out only then. A call that fails is retried one
        request at a time, and a request that fails alone is told so and yielded with logits
        and cache None."""
        groups: dict[object, list[_Request]] = {}
        prefixes = {}
        for request in requests:
            prompt = request.plan.input_ids[0]  # (T,) one prompt, no padding
            salt = request.plan.config.cache_salt
            found = self.prefix_cache.find(prompt, salt) if self.prefix_cache is not None else None
            key = len(prompt) if found is None else id(request)
            prefixes[key] = found
            groups.setdefault(key, []).append(request)
        for key, group in groups.items():
            per_call = max(1, self.prefill_tokens // group[0].plan.input_ids.shape[1])
            for first in range(0, len(group), per_call):
                calls = group[first : first + per_call]
                prefix = prefixes[key].layers() if prefixes[key] is not None else None
                try:
                    parts = [(calls, *self._prefill(calls, prefix))]
                except Exception as error:
                    if len(calls) == 1:  # this prompt's own failure
                        calls[0].fail(error)
                        parts = [(calls, None, None)]
                    else:
                        parts = [self._prefill_alone(request) for request in calls]
                del prefix  # not held while the loop admits the parts
                yield from parts

    def _prefill_alone(self, request: _Request):
        """(`[request]`, first logits, cache) of `request` prefilled alone; logits and cache None
        when it fails (it is told so)."""
        try:
            return ([request], *self._prefill([request]))
        except Exception as error:  # this prompt's own failure
            request.fail(error)
            return [request], None, None

    def _pick(self, request: _Request, logits: np.ndarray, normalizer: np.ndarray) -> bool:
        """Step `request` on its rows' logits (rows, V) and hand its events over; whether it
        stays in the batch. Its own failure ends it alone."""
        if request.gone:
            request.fail(cancel.Cancelled("the request was cancelled (its caller has gone)"))
            return False
        try:
            step = request.search.pick(logits, request.index, normalizer)
            events = request.texts.events(step, request.search)
        except Exception as error:  # this request's failure: it leaves, the batch goes on
            request.fail(error)
            return False
        for event in events:
            event.index += request.offset
        if request.held is None:
            request.inbox.put(events)  # one hand-over per step, not per row
        else:
            request.held.extend(events)
        request.tokens = step.tokens
        ended = request.search.ended(request.index)
        request.index += 1
        if ended:
            if request.held is not None:
                request.inbox.put(request.held)
            request.inbox.put(_DONE)
        return not ended

    def _joined(self, active, logits, state, parts):
        """The batch (`active`, `logits`, `state`; empty when `active` is) with the prefilled
        `parts` (requests, logits, cache) added after its rows."""
        logits = np.concatenate(([logits] if active else []) + [p[1] for p in parts])
        state = self.model.admit(state if active else None, [p[2] for p in parts], self.align)
        active = active + [r for p in parts for r in p[0]]
        self._account(state)
        self.heap.maybe()
        return active, logits, state

    def _account(self, state) -> None:
        """Record the rows × positions the batch's cache holds now."""
        self.cache_positions = 0 if state is None else state.attention_mask.size  # (N, T)
        self.peak_cache_positions = max(self.peak_cache_positions, self.cache_positions)

    def _loop(self) -> None:
        active: list[_Request] = []
        logits = state = None
        while True:
            # Let callers that wait for the interpreter submit their requests now: otherwise
            # each gets in only while the model runs, about one per step, and a burst of
            # requests reaches the batch over dozens of steps (bench/batch.py: 104 steps for
            # 16 streams of 2 × 32 tokens, 77 with this).
            time.sleep(0)
            new = self._admit(active, state.attention_mask.shape[1] if active else None)
            held = []  # prefilled (requests, logits, cache) not yet in the batch
            try:
                for members, part_logits, part_state in self._prefilled(new):
                    new = [r for r in new if r not in members]
                    if part_state is not None:
                        held.append((members, part_logits, part_state))
                    if held and self.model.pools_rows:  # in place: admit now, drop its cache
                        active, logits, state = self._joined(active, logits, state, held)
                        held = []
                if held:  # other caches are joined by copying the batch: once for all
                    active, logits, state = self._joined(active, logits, state, held)
                if not active:
                    continue
                normalizer = log_normalizer(logits)[:, 0]  # (N,) row by row
                kept, starts = [], []
                row = 0
                for request in active:
                    rows = slice(row, row + request.rows)
                    row += request.rows
                    if self._pick(request, logits[rows], normalizer[rows]):
                        kept.append(request)
                        starts.append(rows.start)
                if len(kept) < len(active):
                    order, rows = row_layout(starts, [r.rows for r in kept])
                    active = [kept[i] for i in order]
                    state = self.model.retain(state, rows, self.align) if kept else None
                if not active:
                    logits = None
                    self._account(None)
                    self.heap.now()  # what the batch held is free, and may stay so a while
                    continue
                tokens = np.concatenate([r.tokens for r in active])  # (N,)
                logits, state = self.model.step(tokens, state)
                self.steps += 1
                self.rows_stepped += len(tokens)
                self._account(state)
                self.heap.maybe()
            except Exception as error:  # the batched model call failed: no row to blame
                for request in active + [r for part in held for r in part[0]] + new:
                    request.fail(error)
                active, new, logits, state = [], [], None, None
                self._account(None)
