"""Server-side limits and input validation shared by every tab, and the queue settings.

Every endpoint checks its inputs here before any model runs: text length caps, token caps and
parameter ranges (their values: `runtime.request_caps.LIMITS`), with messages in the project's one
template (`` `top_p` must be in (0, 1], got 1.5 ``). The checks raise `ValueError`;
`shown_to_user` turns that (and the runtime's own `ValueError`s) into `gr.Error`, which the UI
shows as a message and an API client receives as the error text; the server logs such an error
as one line (it is the user's, not the server's), and keeps it for the page's error box
(`last_error`, ui/widgets.py). This module builds no components.
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
import threading
from collections import OrderedDict

import runtime
from runtime.request_caps import LIMITS

CONCURRENCY_ID = "models"  # every event that runs a model shares one concurrency limit


LOG = logging.getLogger("scriptorium.app")
MAX_KEPT_ERRORS = 1024  # sessions whose last error waits for their page's error box
_kept_errors: OrderedDict[str, str] = OrderedDict()  # session hash -> its last error message
_kept_lock = threading.Lock()


def view_and_endpoint(button, view, inputs, outputs, endpoint, api_name: str):
    """Wire a button that shows `view`'s page-shaped output (kept off the API, named
    `<api_name>_view` for links.shareable) and publish the plain-data `endpoint` as `/api_name`,
    both sharing the models' concurrency limit. Returns the button's event."""
    import gradio as gr

    event = button.click(
        view,
        inputs,
        outputs,
        api_name=f"{api_name}_view",
        api_visibility="private",
        concurrency_id=CONCURRENCY_ID,
    )
    gr.api(endpoint, api_name=api_name)
    return event


def queue_settings() -> dict:
    """Keyword arguments for `Blocks.queue`."""
    return {"default_concurrency_limit": LIMITS.concurrency, "max_size": LIMITS.max_queue}


def text(name: str, value, allow_empty: bool = False, max_chars: int | None = None) -> str:
    """`value` as a str of valid Unicode (no lone surrogates) within the character cap (and
    non-empty unless allowed)."""
    cap = max_chars or LIMITS.max_prompt_chars
    if not isinstance(value, str):
        raise ValueError(f"`{name}` must be a string, got {type(value).__name__}")
    if len(value) > cap:
        raise ValueError(f"`{name}` must be at most {cap} characters, got {len(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:  # JSON can carry lone surrogates; tokenizers cannot
        raise ValueError(
            f"`{name}` must be valid Unicode, got a lone surrogate at character {error.start}"
        ) from None
    if not allow_empty and not value.strip():
        raise ValueError(f"`{name}` must not be empty")
    return value


def integer(name: str, value, low: int, high: int) -> int:
    """`value` as an int in [low, high] (a float with no fractional part is accepted).

    A browser cannot send a number beyond 2**53 exactly (99999999999999999999 arrives as
    100000000000000000000), so such a number is reported as received and said to be rounded;
    a float stays the float it is (`1e+20`).
    """
    if isinstance(value, float) and value.is_integer() and abs(value) <= 2**53:
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        got = repr(value)
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**53:
            got += " (as received; a number this large may arrive rounded)"
        raise ValueError(f"`{name}` must be an int in [{low}, {high}], got {got}")
    return value


def number(name: str, value, low: float, high: float, low_open: bool = False) -> float:
    """`value` as a float in [low, high] (or (low, high] with `low_open`)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (low < value if low_open else low <= value) and value <= high
    if not ok:
        bracket = "(" if low_open else "["
        raise ValueError(f"`{name}` must be in {bracket}{low}, {high}], got {value!r}")
    return float(value)


def flag(name: str, value) -> bool:
    """`value`, which must be a bool (a checkbox)."""
    if not isinstance(value, bool):
        raise ValueError(f"`{name}` must be true or false, got {value!r}")
    return value


def shown(value, max_chars: int = 80) -> str:
    """`repr(value)` for an error message, cut to `max_chars` characters with its length said,
    so that a refused argument is named without being echoed back whole.

    >>> shown("Hello")
    "'Hello'"
    >>> shown("a" * 200_061, 12)
    "'aaaaaaaaaa… (200063 characters)"
    """
    text = repr(value)
    return text if len(text) <= max_chars else f"{text[: max_chars - 1]}… ({len(text)} characters)"


def choice(name: str, value, options) -> str:
    try:
        known = value in options
    except TypeError:  # an unhashable value (a list, a dict) against a dict's keys
        known = False
    if not known:
        raise ValueError(f"`{name}` must be one of {list(options)}, got {shown(value)}")
    return value


MODES = ("greedy", "sampling", "beam search")


def decoding(
    mode: str,
    max_new_tokens,
    temperature=1.0,
    top_k=0,
    top_p=1.0,
    min_p=0.0,
    repetition_penalty=1.0,
    no_repeat_ngram_size=0,
    num_beams=1,
    samples=1,
    seed=0,
) -> runtime.GenerationConfig:
    """A validated GenerationConfig from the UI's decoding settings.

    Only the settings the mode uses are checked; the others are ignored whatever their value
    (an API caller may send `num_beams=1` with sampling, or no temperature for greedy). All modes
    use max_new_tokens, repetition_penalty, no_repeat_ngram_size and samples (1 for greedy);
    sampling also temperature, top_k, top_p, min_p and seed, drawing `samples` sequences; beam
    search also num_beams, returning `samples` of its best hypotheses.
    """
    choice("mode", mode, MODES)
    penalty_low, penalty_high = LIMITS.repetition_penalty
    settings = dict(
        max_new_tokens=integer("max_new_tokens", max_new_tokens, 1, LIMITS.max_new_tokens),
        repetition_penalty=number(
            "repetition_penalty", repetition_penalty, penalty_low, penalty_high
        ),
        no_repeat_ngram_size=integer(
            "no_repeat_ngram_size", no_repeat_ngram_size, 0, LIMITS.max_no_repeat_ngram
        ),
        num_return_sequences=integer("samples", samples, 1, LIMITS.max_samples),
    )
    if mode == "sampling":
        settings.update(
            do_sample=True,
            seed=integer("seed", seed, 0, LIMITS.max_seed),
            temperature=number("temperature", temperature, 0, LIMITS.max_temperature, True),
            top_k=integer("top_k", top_k, 0, LIMITS.max_top_k),
            top_p=number("top_p", top_p, 0, 1, low_open=True),
            min_p=number("min_p", min_p, 0, 1),
        )
    elif mode == "beam search":
        beams = integer("num_beams", num_beams, 2, LIMITS.max_beams)
        if settings["num_return_sequences"] > beams:
            raise ValueError(
                f"`samples` must be <= `num_beams` ({beams}) for beam search, "
                f"got {settings['num_return_sequences']}"
            )
        settings.update(num_beams=beams, do_sample=False)
    elif settings["num_return_sequences"] != 1:
        raise ValueError(
            f"`samples` must be 1 for greedy decoding (every sample would be the same), "
            f"got {settings['num_return_sequences']}"
        )
    return runtime.GenerationConfig(**settings).validate()


def _user_error(name: str, error: Exception):
    """`error` as the `gr.Error` the user sees, logged as one line without a traceback and kept
    for the session's error box."""
    import gradio as gr
    from gradio.context import LocalContext

    message = str(error)
    LOG.warning("%s refused: %s", name, message)
    request = LocalContext.request.get(None)
    session = getattr(request, "session_hash", None)
    if session:
        with _kept_lock:
            _kept_errors[session] = message
            _kept_errors.move_to_end(session)
            while len(_kept_errors) > MAX_KEPT_ERRORS:
                _kept_errors.popitem(last=False)
    return gr.Error(message, print_exception=False)


def last_error(session: str | None) -> str:
    """The message of the last error `shown_to_user` raised in `session` (forgotten once read);
    "" if there is none."""
    with _kept_lock:
        return _kept_errors.pop(session, "") if session else ""


def shown_to_user(fn):
    """Wrap an event function so `ValueError`, `FileNotFoundError` and `ConnectionError` (a
    `--backend` server that failed) reach the user as `gr.Error`: one log line, no traceback.

    Works for plain functions and generator functions (streaming events); the wrapper keeps
    `fn`'s signature, from which Gradio names the API parameters.
    """
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def streaming(*args, **kwargs):
            try:
                yield from fn(*args, **kwargs)
            except (ValueError, FileNotFoundError, ConnectionError) as error:
                raise _user_error(fn.__name__, error) from error

        return streaming

    @functools.wraps(fn)
    def plain(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (ValueError, FileNotFoundError, ConnectionError) as error:
            raise _user_error(fn.__name__, error) from error

    return plain
