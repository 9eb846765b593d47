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
   the same length are prefilled together, without padding, then their cache joins the batch
   (`CausalLM.join`: rows left-padded to the longest by a multiple of `PAD_ALIGN`, per-row
   positions and attention mask; a lean Llama graph's rows keep their own cache slots instead);
2. each request picks its tokens from its rows of the batch's logits with its own `TokenSearch`
   (its own `GenerationConfig`, processors, stop strings and `np.random.Generator` seeded from its
   own seed) and its own `RowTexts`, exactly as the unbatched loop does;
3. requests that ended or whose caller stopped reading leave the batch (the cache is trimmed to
   the rows that remain); the others' chosen tokens run through the model as one step.

A request's output does not depend on its batch-mates, bit for bit: nothing a row's tokens are
chosen from is shared with another request (no shared generator, no shared filters), a
batch-invariant graph computes each row from that row alone, and padding by whole vector lanes
leaves even the rounding of the attention's sums as it is alone (tests/test_engine.py compares
tokens and log-probabilities exactly with a run alone).
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

from .outputs import StreamEvent
from .search import log_normalizer
from .text import RowTexts

_DONE = object()  # a request's last item in its caller's inbox
PAD_ALIGN = 4  # left padding of a joining row is a multiple of this many positions (`Engine`)


def uses_engine(manifest: dict, batching: bool | None) -> bool:
    """Whether a model's generations run in an engine loop. None (the default): yes for a causal
    LM whose manifest says `batch_invariant` (each row computed from that row alone), no
    otherwise; True: yes for a causal LM, and ValueError when its graph is not batch-invariant;
    False: no. Seq2seq models never do (they run beside, as beam search does)."""
    if batching not in (None, True, False):
        raise ValueError(f"`batching` must be None, True or False, got {batching!r}")
    if batching is False or manifest["task"] != "causal-lm":
        return False
    invariant = bool(manifest.get("batch_invariant"))
    if batching and not invariant:
        raise ValueError(
            f"`batching` must be None or False for {manifest['name']!r} "
            f"({manifest.get('precision', 'unknown precision')}), whose manifest does not say "
            "`batch_invariant` (its graph may quantize activations per tensor, so batch-mates "
            "could change a result; re-export int8 as weight-only MatMulNBits), got True"
        )
    return batching or invariant


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
        self.index = 0  # the next step's index
        self.cancelled = False  # set by the caller when it stops reading
        self.tokens: np.ndarray | None = None  # (rows,) chosen at the last step


class Engine:
    """The batching loop of one `Generator` (a causal LM)."""

    def __init__(self, gen, max_rows: int = 64):
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
        self._waiting: deque[_Request] = deque()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        # batched model steps run, rows stepped, prefill calls: for benchmarks and tests
        self.steps = 0
        self.rows_stepped = 0
        self.prefills = 0

    def events(
        self, plan, alternatives: int, end_ids=None, live: bool = True
    ) -> Iterator[StreamEvent]:
        """The plan's events (as `Generator._token_events` yields them), computed in the loop:
        step by step when `live`, else all of a request's at its end. Stopping the iteration
        cancels the plan's requests."""
        gen, copies = self.gen, plan.config.num_return_sequences
        inbox: queue.SimpleQueue = queue.SimpleQueue()
        requests = []
        for prompt, ids in enumerate(plan.encoded):
            own = plan if len(plan.encoded) == 1 else gen._plan([ids], plan.config, None)
            search = gen.token_search(own, alternatives, end_ids)
            texts = RowTexts(gen.tokenizer, own, copies, gen.end_ids(end_ids))
            requests.append(_Request(own, search, texts, prompt * copies, inbox, live))
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

    # ---- the loop (engine thread) ----------------------------------------------------------------

    def _admit(self, active: list[_Request], width: int | None) -> list[_Request]:
        """Waiting requests that fit beside `active` (whose cache is `width` positions wide, None
        when nothing is active) and whose prompt is in phase with it (`_in_phase`); blocks
        while nothing is active. Requests out of phase wait (at most `align` - 1 steps)."""
        rows = sum(r.rows for r in active)
        new, waiting = [], deque()
        with self._wake:
            while not active and not self._waiting:
                self._wake.wait()
            for request in self._waiting:
                if request.cancelled:
                    continue
                length = request.plan.input_ids.shape[1]
                fits = rows + request.rows <= self.max_rows or not rows
                if fits and (width is None or (width - length) % self.align == 0):
                    new.append(request)
                    rows += request.rows
                    width = length if width is None else width
                else:
                    waiting.append(request)
            self._waiting = waiting
        return new

    def _prefill(self, requests: list[_Request]):
        """The first logits (rows, V) and cache of requests whose prompts have the same length,
        their prompts run as one batch (no padding, so each row is what it is alone)."""
        model = self.model
        ids = np.concatenate([r.plan.input_ids for r in requests])  # (n, T)
        logits, state = model.start(ids, np.concatenate([r.plan.mask for r in requests]))
        self.prefills += 1
        rows = [r.rows for r in requests]
        if sum(rows) > len(requests):  # samples of one prompt share its prefill, as unbatched
            repeat = np.repeat(np.arange(len(requests)), rows)
            logits, state = logits[repeat], model.select(state, repeat)
        return logits, state

    def _prefill_all(self, requests: list[_Request]) -> tuple[list[_Request], list, list]:
        """`requests` reordered so that equal prompt lengths are adjacent, with the first logits
        and cache of each such group."""
        groups: dict[int, list[_Request]] = {}
        for request in requests:
            groups.setdefault(request.plan.input_ids.shape[1], []).append(request)
        ordered, logits, states = [], [], []
        for group in groups.values():
            group_logits, state = self._prefill(group)
            ordered += group
            logits.append(group_logits)
            states.append(state)
        return ordered, logits, states

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
            try:
                if new:
                    new, new_logits, new_states = self._prefill_all(new)
                    logits = np.concatenate(([logits] if active else []) + new_logits)
                    state = self.model.admit(state if active else None, new_states, self.align)
                    active = active + new
                normalizer = log_normalizer(logits)[:, 0]  # (N,) row by row
                keep, ended = [], []
                row = 0
                for request in active:
                    rows = slice(row, row + request.rows)
                    row += request.rows
                    if request.cancelled:
                        ended.append(request)
                        continue
                    step = request.search.pick(logits[rows], request.index, normalizer[rows])
                    events = request.texts.events(step, request.search)
                    for event in events:
                        event.index += request.offset
                    if request.held is None:
                        request.inbox.put(events)  # one hand-over per step, not per row
                    else:
                        request.held.extend(events)
                    request.tokens = step.tokens
                    if request.search.ended(request.index):
                        if request.held is not None:
                            request.inbox.put(request.held)
                        request.inbox.put(_DONE)
                        ended.append(request)
                    else:
                        keep.append(np.arange(rows.start, rows.stop))
                    request.index += 1
                if ended:
                    active = [r for r in active if r not in ended]
                    if active:
                        state = self.model.retain(state, np.concatenate(keep), self.align)
                if not active:
                    logits = state = None
                    continue
                tokens = np.concatenate([r.tokens for r in active])  # (N,)
                logits, state = self.model.step(tokens, state)
                self.steps += 1
                self.rows_stepped += len(tokens)
            except Exception as error:  # the model failed: every request in the batch fails
                for request in active + new:
                    request.inbox.put(error)
                active, logits, state = [], None, None
