"""Who is asking, in the app: the Gradio session of the event being run. It names the visitor's
requests in the template pool (runtime/template_pool.py: each session holds at most its share of
the workers that render chat templates and compile schemas) and, with the private prefix cache on,
salts their prefix-cache entries so that no visitor's prompt is found by another's.

The private prefix cache (`--private-prefix-cache`, or `PRIVATE_PREFIX_CACHE_VARIABLE=1`; off by
default) gives every config the app's tabs make (`checks.decoding`, `compare_tab.preset_config`,
the paraphraser's) the session's `cache_salt` (runtime/prefix_cache.py; sent on to a `--backend`
server as the request's `cache_salt`). A visitor then reuses only the prefixes of their own
earlier requests (a chat's turns, a system prompt sent again), and nobody can time their first
token to learn what others sent (docs/SCALING.md, "Prefix-cache isolation"); a prompt shared by
many visitors is computed once per visitor instead of once.

The session is read from Gradio's context for the event being run (`gradio.context.LocalContext`,
which Gradio sets around every call and every step of a streaming event); outside an event there
is none, and nothing is salted.
"""

from __future__ import annotations

import os

from runtime import template_pool

PRIVATE_PREFIX_CACHE_VARIABLE = "SCRIPTORIUM_PRIVATE_PREFIX_CACHE"
private_prefix_cache = False  # set by `configure`


def configure(private: bool | None = None) -> None:
    """Name template-pool clients by session, and salt each session's prefix cache when
    `private` (None: `PRIVATE_PREFIX_CACHE_VARIABLE` is "1")."""
    global private_prefix_cache
    if private is None:
        private = os.environ.get(PRIVATE_PREFIX_CACHE_VARIABLE, "") == "1"
    private_prefix_cache = private
    template_pool.name_clients_by(session)


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
