"""The caps every front end puts on a request: prompt length, lines, neighbours, the decoding
study's size, each tab's other inputs (candidates, columns, subtitle limits, text lengths), and
how many model-running requests run or wait at once (the app's events; serve's per replica).
The decoding parameters' caps (tokens, samples, beams, seeds, their ranges) are declared with
the parameters, as their `allowed` range (runtime/parameters.py). No cap is written as a number
anywhere else in ui/, serve/ or app.py: tests/test_limits_table.py parses them for one.

Two parts. The app's: one frozen `Limits` value, `LIMITS`, read by the app (ui/checks.py checks
every endpoint's inputs against it) and by bench/ (the load test queues requests as the app
does). `scriptorium serve`'s: `ServeLimits` (`SERVE_LIMITS`, the command's flags of the same
names) and the API's fixed field caps, which serve/protocol.py's request bodies declare; the
serve part says which of its caps differ from the app's, and why, and which decoding ranges it
shares with the app (`SERVE_APP_RANGES`). Plain data: this module checks nothing itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from .budget import MAX_SEQUENCES


@dataclass(frozen=True)
class Limits:
    max_prompt_chars: int = 2000  # characters of a prompt or source text
    max_lines: int = 16  # lines translated or compared at once
    max_neighbours: int = 50  # nearest neighbours listed
    max_study_prompts: int = 5  # prompts in the decoding study
    max_study_samples: int = 10  # samples per prompt and setting in the decoding study
    concurrency: int = 4  # model-running events that run at once (all tabs together)
    max_queue: int = 64  # events waiting beyond those; more are refused
    max_reference_chars: int = 20_000  # the decoding study's reference text
    # Embeddings: an expression (a word, or words added and subtracted) whose neighbours are
    # listed, and one word looked up or expected
    max_expression_chars: int = 200
    max_word_chars: int = 100
    # Masked LMs: each sentence compared by influence; a text a masked LM reads otherwise (a
    # generation's prompt and right context, a sentence for contextual neighbours)
    max_sentence_chars: int = 300
    max_masked_text_chars: int = 500
    max_study_new_tokens: int = 128  # new tokens per sample in the decoding study
    max_columns: int = 4  # Compare's columns, the arena's players
    # Paraphrase: candidates drawn (the tab's slider and its comparison with a chat model) and
    # the highest temperature or noise weight (beyond it candidates are noise)
    max_candidates: int = 100
    max_paraphrase_range: float = 10.0
    max_length_ratio: float = 2.0  # Rewrite's output / source length (the control's largest)
    # Rewrite's subtitle limits
    max_chars_per_line: int = 200
    max_subtitle_lines: int = 10
    max_chars_per_second: float = 100
    max_subtitle_seconds: float = 600  # a subtitle's duration
    # Masked LMs: the fill-mask endpoint's top k, and the tab's slider and labels, which show
    # fewer (more rows than a label fits); the masking study's repetitions; tokens generated
    max_fill_mask_top_k: int = 50
    fill_mask_top_k_shown: int = 20
    max_masking_repetitions: int = 5
    max_masked_lm_new_tokens: int = 32


LIMITS = Limits()


# ---- scriptorium serve (serve/: the OpenAI-compatible API) ---------------------------------------
#
# The decoding parameters' ranges are runtime/parameters.py's: the app checks each one's
# `allowed` range; the API the same for those in `SERVE_APP_RANGES`, and the runtime's whole
# `valid` range for the others. Both share the cap on prompts × samples × beams
# (runtime/budget.py). What differs from the app, on purpose:
# - prompt characters (32,768 against 2,000) and new tokens (as many as the context leaves,
#   against 256): the app is a public page whose visitors share one machine and one queue, so
#   each request is kept short; the API's operator sizes these with `scriptorium serve`'s flags
#   (and guards the server with `--api-key`) for clients such as evaluation harnesses, which
#   send long prompts and score them.
# - samples and beams: the app caps each (its sliders' ends); the API caps only prompts × `n` ×
#   `num_beams` (`max_sequences`), as an OpenAI client sets `n` and `num_beams` as it likes.
# - top-k, repetition penalty and no-repeat n-gram size: the app's sliders need ends chosen for a
#   visitor; the API takes every value the runtime takes, as an OpenAI client expects of a server.
SERVE_APP_RANGES = frozenset({"temperature", "seed"})  # OpenAI's [0, 2]; one seed range for both


@dataclass(frozen=True)
class ServeLimits:
    """What one client may ask of `scriptorium serve`, and what one replica takes on at once
    (docs/SCALING.md, "Limits"; the command's flags of the same names)."""

    max_body_bytes: int = 1 << 20  # request body; larger ones get a 413 before being read
    max_prompt_chars: int = 32_768  # one prompt, or one conversation's messages together
    max_sequences: int = MAX_SEQUENCES  # prompts × n × num_beams in one request
    max_downloads: int = 4  # file downloads the gateway streams at once; more get a 429
    # per replica (the command's --concurrency and --max-ongoing): generations run at once
    # (without an engine that batches), and requests accepted, those beyond `concurrency` queued
    concurrency: int = 4
    max_ongoing: int = 64


SERVE_LIMITS = ServeLimits()

# The API's fixed field caps (no flag): OpenAI's own where it states one, else what one request
# needs to name.
MAX_LOGPROBS = 5  # OpenAI's (completions' `logprobs`, chat's `top_logprobs`): the runtime's top 5
MAX_STOP_STRINGS = 4  # OpenAI's
MAX_STOP_CHARS = 256  # characters of one stop string
MAX_NAME_CHARS = 256  # characters of a model id, a user id, a control name or value, a role's name
MAX_CONTROLS = 16  # control tokens in one request
MAX_MESSAGES = 1024  # turns in one conversation
MAX_TOOLS = 128  # OpenAI's: functions a chat request offers the model
MAX_TOOL_CALLS = 128  # calls in one earlier assistant turn
MAX_METADATA_PAIRS = 16  # OpenAI's, for chat's `metadata` (accepted, not used)
MAX_METADATA_CHARS = 512  # OpenAI's, for one `metadata` value
MAX_INT = 2**31 - 1  # the largest count or token id any field takes (an int32)
