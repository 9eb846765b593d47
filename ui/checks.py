"""Server-side limits and input validation shared by every tab, and the queue settings.

Every endpoint checks its inputs here before any model runs: text length caps
(`runtime.request_caps.LIMITS`) and the decoding settings, each against the app's range that
runtime/parameters.py declares (`decoding`, `setting`; `taking` gives an endpoint the decoding
parameters without its naming them), with messages in the project's one template
(`` `top_k` must be an int in [0, 1000], got -1 ``). The checks raise `ValueError`;
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
import re
import threading
from collections import OrderedDict

import runtime
from runtime.budget import check_sequences
from runtime.parameters import PARAMETERS, Parameter
from runtime.request_caps import LIMITS

from . import visitor

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


# The app's decoding modes, each with the `GenerationConfig.mode` it decodes in.
RUNTIME_MODES = {"greedy": "greedy", "sampling": "sample", "beam search": "beam"}
MODES = tuple(RUNTIME_MODES)
OFFERED = tuple(p for p in PARAMETERS if p.app)  # the decoding parameters the app offers
SEQUENCES = "num_return_sequences"  # the parameter a tab returning one sequence leaves out


def app_name(parameter: Parameter) -> str:
    """The endpoints' name for a parameter."""
    return parameter.app.name or parameter.name


def decoding_names(modes=MODES, samples: bool = True) -> list[str]:
    """The decoding parameters of an endpoint that offers `modes`, in order: "mode", then each
    offered parameter one of the modes reads (the count of sequences only with `samples`)."""
    read = {RUNTIME_MODES[mode] for mode in modes}
    return ["mode"] + [
        app_name(p) for p in OFFERED if read & set(p.modes) and (samples or p.name != SEQUENCES)
    ]


def offered(name: str) -> Parameter:
    """The offered parameter the endpoints call `name`."""
    return next(p for p in OFFERED if app_name(p) == name)


def setting(name: str, value):
    """`value` checked against the app's range of the decoding parameter the endpoints call
    `name` (runtime/parameters.py, `limits`)."""
    parameter = offered(name)
    limits = parameter.limits
    if parameter.type is int:
        return integer(name, value, limits.low, limits.high)
    return number(name, value, limits.low, limits.high, limits.low_open)


def taking(names):
    """Give the decorated function the API parameters `names`, in order (then its own parameters
    with defaults, such as a `gr.Progress`); it receives them by name, so that it can take the
    decoding settings as `**settings` and hand them on to `decoding` without naming them.
    Gradio names an endpoint's API parameters from this signature."""

    def decorate(fn):
        own = inspect.signature(fn).parameters.values()
        listed = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names]
        defaulted = [p for p in own if p.default is not p.empty and p.name not in names]
        signature = inspect.Signature(listed + defaulted)

        if inspect.isgeneratorfunction(fn):

            @functools.wraps(fn)
            def streaming(*args, **kwargs):
                yield from fn(**signature.bind(*args, **kwargs).arguments)

            streaming.__signature__ = signature
            return streaming

        @functools.wraps(fn)
        def plain(*args, **kwargs):
            return fn(**signature.bind(*args, **kwargs).arguments)

        plain.__signature__ = signature
        return plain

    return decorate


def _endpoint_default(parameter: Parameter):
    """`decoding`'s default for a parameter: the runtime's, or the app's first value where the
    runtime's (None) is not one the app takes."""
    return parameter.app.value if parameter.default is None else parameter.default


def decoding(*args, **kwargs) -> runtime.GenerationConfig:
    """A validated GenerationConfig from the UI's decoding settings (`decoding_names()`, in
    that order, by position or name; each but `mode` defaults to the runtime's default).

    Only the settings the mode reads (runtime/parameters.py, `modes`) are checked; the others are
    ignored whatever their value (an API caller may send `num_beams=1` with sampling, or leave
    out the sampling settings for greedy). Each is checked against the app's range (`setting`);
    greedy gives one sequence, sampling draws `samples` sequences and beam search returns
    `samples` of its best hypotheses. The runtime's own refusals name the settings as the
    endpoints do. With the private prefix cache on, the config has the visitor's `cache_salt`
    (ui/visitor.py).
    """
    bound = DECODING_SIGNATURE.bind(*args, **kwargs)
    bound.apply_defaults()
    settings = bound.arguments
    mode = choice("mode", settings["mode"], MODES)
    read = RUNTIME_MODES[mode]
    config = {"do_sample": read == "sample"}
    for parameter in OFFERED:
        if read in parameter.modes:
            name = app_name(parameter)
            config[parameter.name] = setting(name, settings[name])
    count = offered("samples")
    if read == "greedy" and config[count.name] != 1:
        raise ValueError(
            f"`{app_name(count)}` must be 1 for greedy decoding (every sample would be the "
            f"same), got {config[count.name]}"
        )
    try:
        return visitor.salted(runtime.GenerationConfig(**config).validate())
    except ValueError as error:
        raise ValueError(in_app_words(str(error))) from None


# `decoding`'s parameters: the mode, then every offered parameter with its default.
DECODING_SIGNATURE = inspect.Signature(
    [inspect.Parameter("mode", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    + [
        inspect.Parameter(
            app_name(p), inspect.Parameter.POSITIONAL_OR_KEYWORD, default=_endpoint_default(p)
        )
        for p in OFFERED
    ]
)

decoding.__signature__ = DECODING_SIGNATURE


def sequences(prompts: int, what: str, config: runtime.GenerationConfig) -> None:
    """The cap on prompts × samples × beams (runtime/budget.py), the prompts called `what`."""
    check_sequences(prompts, config, names=(what, "samples", "num_beams"))


def in_app_words(message: str) -> str:
    """A runtime message with each parameter named as the endpoints name it.

    >>> in_app_words("`num_return_sequences` must be <= `num_beams` (2) for beam search, got 3")
    '`samples` must be <= `num_beams` (2) for beam search, got 3'
    """
    for parameter in OFFERED:
        message = message.replace(f"`{parameter.name}`", f"`{app_name(parameter)}`")
    return message


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
    return gr.Error(inert(message), print_exception=False)


_TAG_START = re.compile(r"<(?=[A-Za-z/!?])")


def inert(message: str) -> str:
    """`message` with no `<` that could open an HTML tag: Gradio's pop-up renders an error's
    message as (sanitized) HTML, which would swallow a value the message quotes
    ("got '<img …>'"). A zero-width space after such a `<` keeps the text as it reads.

    >>> inert("got '<img src=x>', must be <= 3") == "got '<\u200bimg src=x>', must be <= 3"
    True
    """
    return _TAG_START.sub("<\u200b", message)


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
