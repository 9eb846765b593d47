"""Cancelling a generation whose caller has gone, from another thread.

A server's thread runs `generate` or `chat` inside `with cancel_when(event):`; once anyone sets
`event` (serve/deployments.py sets it when Serve cancels a request because its client
disconnected), the generation stops at its next decoding step and raises `Cancelled`: the
engine (runtime/engine.py) drops the request's rows from its batch, and the unbatched loops
(`TokenSearch`, `beam_search`) check between steps. A stream is cancelled by closing it instead
(no event needed). The event is read from a context variable, so it reaches every call made in
the block without being passed through the API. This module runs nothing itself.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_EVENT: ContextVar[threading.Event | None] = ContextVar("scriptorium_cancel", default=None)


class Cancelled(Exception):
    """A generation stopped because its caller's cancel event was set (`cancel_when`)."""


@contextmanager
def cancel_when(event: threading.Event) -> Iterator[threading.Event]:
    """Generations started in this block (on this thread or context) stop at their next step,
    raising `Cancelled`, once `event` is set."""
    token = _EVENT.set(event)
    try:
        yield event
    finally:
        _EVENT.reset(token)


def current_event() -> threading.Event | None:
    """The cancel event of the enclosing `cancel_when` block, or None."""
    return _EVENT.get()


def check(event: threading.Event | None = None) -> None:
    """Raise `Cancelled` when `event` (by default the enclosing block's) is set."""
    event = event if event is not None else _EVENT.get()
    if event is not None and event.is_set():
        raise Cancelled("the request was cancelled (its caller has gone)")
