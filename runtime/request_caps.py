"""The caps every front end puts on a request: prompt length, lines, neighbours, the decoding
study's size, and how many model-running requests run or wait at once. The decoding parameters'
caps (tokens, samples, beams, their ranges) are declared with the parameters, as their `allowed`
range (runtime/parameters.py).

One frozen `Limits` value, `LIMITS`, read by the app (ui/checks.py checks every endpoint's
inputs against it) and by bench/ (the load test queues requests as the app does). Plain data:
this module checks nothing itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from .parameters import NAMED


@dataclass(frozen=True)
class Limits:
    max_prompt_chars: int = 2000  # characters of a prompt or source text
    max_lines: int = 16  # lines translated or compared at once
    max_neighbours: int = 50  # nearest neighbours listed
    max_study_prompts: int = 5  # prompts in the decoding study
    max_study_samples: int = 10  # samples per prompt and setting in the decoding study
    concurrency: int = 4  # model-running events that run at once (all tabs together)
    max_queue: int = 64  # events waiting beyond those; more are refused

    # The decoding caps serve/protocol.py reads from here; both are the declaration's.
    @property
    def max_temperature(self) -> float:
        return NAMED["temperature"].limits.high

    @property
    def max_seed(self) -> int:
        return NAMED["seed"].limits.high


LIMITS = Limits()
