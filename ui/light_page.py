"""The page's first HTML, lighter: what Gradio 6.17.3 embeds in it that its frontend never reads.

Gradio writes the whole app's configuration into the page (`window.gradio_config`) and, beside
it, the API description (`window.gradio_api_info`). With the shipped models and a chat model that
was 768,517 bytes; `LightPage`, an ASGI middleware in front of Gradio's routes, sends 296,133
(docs/APP.md, "How fast the page opens", has the breakdown). It rewrites only the page's HTML
(a GET that answers `text/html` with Gradio's configuration in it) and leaves everything else,
the `/config` route and the API included, as Gradio serves it:

- each component's API descriptions and example inputs (`api_info`, `api_info_as_input`,
  `api_info_as_output`, `example_inputs`, `skip_api`), which only the server's `/info` uses, its
  `component_class_id` (the frontend falls back to the component's type, which is how it finds
  every built-in component), a `key` of None (the app has no `gr.render`), and the props
  `preserved_by_key` and `name` (the type again);
- event fields the frontend never reads (`DEPENDENCY_UNREAD`), and those it reads only as "is
  it set" or against one other value, where they hold the value that reads as unset
  (`DEPENDENCY_UNSET`: a `js` of None, `trigger_only_on_success` False, `api_visibility`
  "private", which only the API page reads, looking for "public");
- the API description, sent as `null`: the page's client then asks `/gradio_api/info` for it
  (Gradio caches it), which only the "Use via API" page shows.

A browser that accepts gzip gets the page compressed. Every key above was checked against the
6.17.3 frontend's bundles (`gradio/templates/frontend/assets`); `middleware()` refuses another
Gradio version, whose frontend may read them.
"""

from __future__ import annotations

import gzip
import json

GRADIO_VERSION = "6.17.3"  # the frontend whose reads the lists below were checked against
CONFIG_START = b"window.gradio_config = "
API_INFO_START = b"window.gradio_api_info = "
SCRIPT_END = b";</script>"
COMPONENT_UNREAD = (
    "api_info",
    "api_info_as_input",
    "api_info_as_output",
    "example_inputs",
    "skip_api",
    "component_class_id",
)
COMPONENT_UNSET = {"key": None}  # copied onto the frontend's node, read by `gr.render` only
PROPS_UNREAD = ("preserved_by_key", "name")
PROPS_UNSET = {"_selectable": False}
DEPENDENCY_UNREAD = (
    "api_description",
    "batch",
    "max_batch_size",
    "collects_event_data",
    "scroll_to_output",
    "render_id",
    "rendered_in",
    "time_limit",
    "stream_every",
)
DEPENDENCY_UNSET = {
    "js": None,
    "js_implementation": None,
    "event_specific_args": None,
    "show_progress_on": None,
    "component_prop_inputs": [],
    "trigger_only_on_success": False,
    "trigger_only_on_failure": False,
    "api_visibility": "private",
    "connection": "sse",
}


def _drop(entry: dict, unread: tuple[str, ...], unset: dict) -> None:
    for key in unread:
        entry.pop(key, None)
    for key, value in unset.items():
        # the type too: False == 0 and None != [] in Python, not to the frontend
        if key in entry and type(entry[key]) is type(value) and entry[key] == value:
            del entry[key]


def slim_config(config: dict) -> dict:
    """`config` (Gradio's page configuration) without what the frontend never reads (in place)."""
    for component in config.get("components", []):
        _drop(component, COMPONENT_UNREAD, COMPONENT_UNSET)
        _drop(component.get("props", {}), PROPS_UNREAD, PROPS_UNSET)
    for dependency in config.get("dependencies", []):
        _drop(dependency, DEPENDENCY_UNREAD, DEPENDENCY_UNSET)
    return config


def _script(html: bytes, start: bytes) -> tuple[int, int] | None:
    """Where the JSON of the script that starts with `start` lies in `html` (None: absent)."""
    begin = html.find(start)
    if begin < 0:
        return None
    begin += len(start)
    end = html.find(SCRIPT_END, begin)  # the JSON escapes "<", so this is the script's end
    return (begin, end) if end > 0 else None


def slim_page(html: bytes) -> bytes:
    """Gradio's page with its configuration slimmed and its API description left to the API
    page; a page without Gradio's configuration is returned as it is."""
    from gradio.routes import toorjson

    config_at = _script(html, CONFIG_START)
    if config_at is None:
        return html
    begin, end = config_at
    config = slim_config(json.loads(html[begin:end]))
    html = html[:begin] + str(toorjson(config)).encode() + html[end:]
    api_at = _script(html, API_INFO_START)
    if api_at is not None:
        html = html[: api_at[0]] + b"null" + html[api_at[1] :]
    return html


class LightPage:
    """ASGI middleware: the page's HTML through `slim_page`, gzipped when the browser takes it."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "GET":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", []))
        gzipped = b"gzip" in headers.get(b"accept-encoding", b"")
        start, body = None, []

        async def held_send(message):
            nonlocal start
            if message["type"] == "http.response.start":
                answer = dict(message.get("headers", []))
                page = answer.get(b"content-type", b"").startswith(b"text/html")
                if not page or b"content-encoding" in answer:
                    await send(message)  # not the page: through, unchanged
                    return
                start = message
                return
            if start is None:
                await send(message)
                return
            body.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            page = slim_page(b"".join(body))
            kept = [(k, v) for k, v in start.get("headers", []) if k != b"content-length"]
            if gzipped:
                page = gzip.compress(page, compresslevel=6)
                kept += [(b"content-encoding", b"gzip"), (b"vary", b"Accept-Encoding")]
            kept.append((b"content-length", str(len(page)).encode()))
            await send({**start, "headers": kept})
            await send({"type": "http.response.body", "body": page})

        await self.app(scope, receive, held_send)


def middleware() -> list:
    """The Starlette middleware list that puts `LightPage` in front of Gradio's routes."""
    import gradio
    from starlette.middleware import Middleware

    if gradio.__version__ != GRADIO_VERSION:
        raise RuntimeError(
            f"ui/light_page.py drops what Gradio {GRADIO_VERSION}'s frontend does not read; "
            f"this is Gradio {gradio.__version__}: check its frontend and update the lists"
        )
    return [Middleware(LightPage)]
