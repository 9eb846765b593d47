"""Who is asking, in the app: the Gradio session of the event being run, so that one visitor
cannot take the app from the others, nor learn what they sent.

- **Model events, a share each.** Gradio starts queued events in arrival order, up to the
  models' concurrency limit (4, `ui.checks.CONCURRENCY_ID`), so one visitor's 16 slow events
  (through the API, a chat template that takes seconds) held the 4 slots and every later event
  waited for all of them. `configure` makes Gradio's queue start, of the waiting events, the
  oldest of a session that runs fewer than `SESSION_SHARE` events of that limit (2 of 4): a
  session's further events wait for its own, and another visitor's event starts at once.
- **The template pool** (runtime/template_pool.py) names each request's client by the session,
  so each session holds at most its share of the workers that render chat templates and compile
  schemas.
- **The private prefix cache** (`--private-prefix-cache`, or `PRIVATE_PREFIX_CACHE_VARIABLE=1`;
  off by default) gives every config the app's tabs make (`checks.decoding`,
  `compare_tab.preset_config`, the paraphraser's) the session's `cache_salt`
  (runtime/prefix_cache.py; sent on to a `--backend` server as the request's `cache_salt`). A
  visitor then reuses only the prefixes of their own earlier requests (a chat's turns), and
  nobody can time their first token to learn what others sent (docs/APP.md, "Limits"); a prompt
  shared by many visitors is computed once per visitor instead of once.

The session is read from Gradio's context for the event being run (`gradio.context.LocalContext`,
which Gradio sets around every call and every step of a streaming event); outside an event there
is none, and nothing is salted. The queue's order replaces `gradio.queueing.Queue.get_events`
(Gradio 6.17.3, the pinned version; `configure` checks that the method still picks the first
waiting event as this one expects, and raises otherwise).
"""

from __future__ import annotations

import collections
import inspect
import os

from runtime import template_pool

PRIVATE_PREFIX_CACHE_VARIABLE = "SCRIPTORIUM_PRIVATE_PREFIX_CACHE"
private_prefix_cache = False  # set by `configure`
SESSION_SHARE = 2  # events of one concurrency limit a session runs at once (the models': 2 of 4)
GRADIO_PICKS = "first_event = event_queue.queue[0]"  # how Gradio 6.17.3's queue picks an event


def configure(private: bool | None = None) -> None:
    """Share Gradio's queue and the template pool among sessions, and salt each session's
    prefix cache when `private` (None: `PRIVATE_PREFIX_CACHE_VARIABLE` is "1")."""
    global private_prefix_cache
    if private is None:
        private = os.environ.get(PRIVATE_PREFIX_CACHE_VARIABLE, "") == "1"
    private_prefix_cache = private
    template_pool.name_clients_by(session)
    _share_the_queue()


def _share_the_queue() -> None:
    """Make Gradio's queue start events as the module docstring says (once per process)."""
    from gradio import queueing

    if getattr(queueing.Queue.get_events, "shares_sessions", False):
        return
    if GRADIO_PICKS not in inspect.getsource(queueing.Queue.get_events):
        raise RuntimeError(
            "this Gradio's queue does not pick events as 6.17.3's does (`Queue.get_events`); "
            "see ui/visitor.py"
        )

    def get_events(queue):
        running = collections.Counter(
            event.session_hash for job in queue.active_jobs if job for event in job
        )
        held = []  # (event queue, its waiting events) of queues whose sessions are at their share
        for event_queue in queue.event_queue_per_concurrency_id.values():
            if event_queue.concurrency_limit is None or not event_queue.queue:
                continue
            share = min(SESSION_SHARE, event_queue.concurrency_limit)
            # a stable sort: events of sessions under their share first, in arrival order
            event_queue.queue.sort(key=lambda event: running[event.session_hash] >= share)
            if running[event_queue.queue[0].session_hash] >= share:
                held.append((event_queue, event_queue.queue))
                event_queue.queue = []
        try:
            return picks_first(queue)
        finally:
            for event_queue, waiting in held:
                event_queue.queue = waiting

    picks_first = queueing.Queue.get_events
    get_events.shares_sessions = True
    queueing.Queue.get_events = get_events


def session() -> str:
    """The Gradio session of the event being run ("" outside an event)."""
    from gradio.context import LocalContext

    request = LocalContext.request.get(None)
    return getattr(request, "session_hash", None) or ""


def salted(config):
    """`config` with the visitor's `cache_salt` when the private prefix cache is on and an
    event is being run; else `config` itself."""
    name = session() if private_prefix_cache else ""
    return config.replace(cache_salt=f"visitor:{name}") if name else config
