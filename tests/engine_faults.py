"""Faults injected into the engine for tests/test_hostile_engine.py.

A request marked by its seed (`BAD_SEED`) fails at its step `FAIL_AT` through one `CAUSES` entry:
a logits processor raising, the sampler raising, the model's logits for its rows turning NaN,
or the detokenizer raising. Requests with any other seed are untouched. `faulty_load` is
`runtime.load` with those faults (cause "processor") and model steps that take `delay` seconds:
a loader for serve.deployments.ModelSpec, so a test can fail or abandon a request midway on a
replica. This module imports nothing heavy: Serve's replicas import it.
"""

from __future__ import annotations

import time

import numpy as np

BAD_SEED = 666  # requests with this seed fail
FAIL_AT = 3  # at this step (0 = the first generated token)
BAD_TEMPERATURE = 0.777  # the failing request's temperature (the sampler knows nothing else)
CAUSES = ("processor", "sampler", "nan-logits", "detokenizer")


def inject(cause: str, setattr_=setattr) -> None:
    """Make requests seeded `BAD_SEED` fail at step `FAIL_AT` through `cause`; `setattr_` is
    pytest's `monkeypatch.setattr` in a test (undone after it) or plain `setattr`."""
    from runtime import sampling, search, text

    if cause == "processor":
        apply = search.apply_processors

        def failing_processors(scores, history, mask, config, index, eos):
            if config.seed == BAD_SEED and index == FAIL_AT:
                raise RuntimeError("injected: a logits processor failed")
            return apply(scores, history, mask, config, index, eos)

        setattr_(search, "apply_processors", failing_processors)
    elif cause == "sampler":
        call = sampling.Sampler.__call__

        def failing_sampler(self, logits, rng):
            self.calls = getattr(self, "calls", 0) + 1
            if self.temperature == BAD_TEMPERATURE and self.calls == FAIL_AT + 1:
                raise RuntimeError("injected: the sampler failed")
            return call(self, logits, rng)

        setattr_(sampling.Sampler, "__call__", failing_sampler)
    elif cause == "nan-logits":
        pick = search.TokenSearch.pick

        def nan_logits(self, logits, index, normalizer=None):
            if self.config.seed == BAD_SEED and index == FAIL_AT:
                logits = np.full_like(logits, np.nan)  # (n, V): this request's rows only
                normalizer = None if normalizer is None else np.full_like(normalizer, np.nan)
            return pick(self, logits, index, normalizer)

        setattr_(search.TokenSearch, "pick", nan_logits)
    elif cause == "detokenizer":
        events = text.RowTexts.events

        def failing_detokenizer(self, step, token_search):
            if self.config.seed == BAD_SEED and step.index == FAIL_AT:
                raise RuntimeError("injected: the detokenizer failed")
            return events(self, step, token_search)

        setattr_(text.RowTexts, "events", failing_detokenizer)
    else:
        raise ValueError(f"`cause` must be one of {CAUSES}, got {cause!r}")


def faulty_load(path, threads=None, delay: float = 0.05, faults: bool = True):
    """`runtime.load(path, threads=threads)` whose model steps each take `delay` seconds more and,
    with `faults`, whose requests seeded `BAD_SEED` fail at step `FAIL_AT` (a logits processor
    raises, in every generator of the process: a replica's process has one)."""
    import runtime

    if faults:
        inject("processor")
    gen = runtime.load(path, threads=threads)
    step = gen.model.step

    def slow_step(tokens, state):
        time.sleep(delay)
        return step(tokens, state)

    gen.model.step = slow_step
    return gen
