"""The caps every front end puts on a request: prompt length, tokens, samples, beams, parameter
ranges, and how many model-running requests run or wait at once.

One frozen `Limits` value, `LIMITS`, read by the app (ui/checks.py checks every endpoint's
inputs against it) and by bench/ (the load test queues requests as the app does). Plain data:
this module imports nothing of ours and checks nothing itself.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    max_prompt_chars: int = 2000  # characters of a prompt or source text
    max_lines: int = 16  # lines translated or compared at once
    max_new_tokens: int = 256  # tokens generated per sequence
    max_samples: int = 8  # sequences per prompt (sampling) / returned beams
    max_beams: int = 8  # beam width
    max_top_k: int = 1000  # top-k (0 = off); 000's largest k
    max_temperature: float = 2.0
    repetition_penalty: tuple[float, float] = (0.5, 3.0)  # allowed range; 1.0 = off
    max_no_repeat_ngram: int = 10
    max_seed: int = 2**32 - 1
    max_neighbours: int = 50  # nearest neighbours listed
    max_study_prompts: int = 5  # prompts in the decoding study
    max_study_samples: int = 10  # samples per prompt and setting in the decoding study
    concurrency: int = 4  # model-running events that run at once (all tabs together)
    max_queue: int = 64  # events waiting beyond those; more are refused


LIMITS = Limits()
