"""The app's HTTP front: what `python app.py` gives Gradio's server besides the Blocks.

- `BodyLimit`, an ASGI middleware in front of every Gradio route: a request body larger than
  `max_bytes` gets a 413 before it is read (from Content-Length) or as soon as it grows past the
  limit (a chunked body), and an upload (`POST …/upload`) gets a 404 when no tab takes files.
- `private_temp_dir()`: a fresh temporary folder of this process (mode 0700, removed at exit),
  set as `GRADIO_TEMP_DIR`, so Gradio serves only what this app wrote there, never what another
  process put in the shared `/tmp/gradio`.
- `BoundedLines`, a stream wrapper that cuts each line written through it (a traceback that
  quotes a whole request) to `LOG_LINE_CHARS` characters.
- `launch_settings(max_body_bytes)`: the keyword arguments for `Blocks.launch` (the middleware,
  ui/light_page.py's lighter page among them, and `max_file_size`).
- `SESSION_CAPACITY`: the sessions whose state Gradio keeps (least recently used first out).
  Gradio gives every API call without a session its own session, and each session copies the
  configuration of every component (≈ 0.4 MB for this app, on 6.17.3 and 6.31.0 alike); at
  Gradio's default of 10,000 sessions, API calls alone grew the process by ≈ 1 MB each.
- `ForgetFinishedEvents`, an ASGI middleware that after each request drops what Gradio 6.17.3
  keeps of finished events (`forget_finished`), ≈ 21 KB an API call: its finished asyncio task
  (`Queue._asyncio_tasks`), its `Event` with the `fastapi.Request` and inputs
  (`Queue.event_ids_to_events`), the message queue and the empty set of its one-call session
  (`pending_messages_per_session`, up to 2,000; `pending_event_ids_session`), its entry in
  `Queue.event_analytics` (kept to the last `EVENTS_KEPT`), and the time of every session ever
  opened (`StateHolder.time_last_used`). Gradio fixed these upstream (gradio#13154,
  gradio#13756); drop this middleware when the pin moves past 6.17.3.

docs/APP.md ("Limits") lists the limits and how to change them. This module builds no
components and runs no model.
"""

from __future__ import annotations

import atexit
import io
import json
import os
import shutil
import tempfile
from pathlib import Path

MAX_BODY_BYTES = 256 * 1024  # a request body; the largest the tabs send is ≈ 30 KB
MAX_FILE_SIZE = 1024 * 1024  # an uploaded file, should a route ever take one
LOG_LINE_CHARS = 2000  # characters of one line on stderr
SESSION_CAPACITY = 100  # sessions whose state Gradio keeps (`launch(state_session_capacity)`)
UPLOAD_PATHS = ("/upload", "/gradio_api/upload")
EVENTS_KEPT = 1000  # finished events whose timings Gradio's monitoring page keeps
FINAL = ("success", "failed", "cancelled")  # an event's last status in `event_analytics`


class BodyTooLarge(Exception):
    """Raised inside `receive` when a body grows past the limit."""


class BodyLimit:
    """ASGI middleware: 413 for a body over `max_bytes`, 404 for uploads unless `uploads`."""

    def __init__(self, app, max_bytes: int = MAX_BODY_BYTES, uploads: bool = False):
        self.app, self.max_bytes, self.uploads = app, max_bytes, uploads

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if not self.uploads and scope["method"] == "POST" and scope["path"] in UPLOAD_PATHS:
            return await _answer(send, 404, "this app takes no file uploads")
        headers = dict(scope.get("headers") or ())
        declared = headers.get(b"content-length", b"").decode("latin-1")
        if declared and (not declared.isdigit() or int(declared) > self.max_bytes):
            return await _answer(send, 413, self._message())
        received, started = 0, False

        async def limited_receive():
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyTooLarge
            return message

        async def watched_send(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, watched_send)
        except BodyTooLarge:
            if not started:
                await _answer(send, 413, self._message())

    def _message(self) -> str:
        return f"the request body must be at most {self.max_bytes} bytes"


async def _answer(send, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    headers.append((b"connection", b"close"))  # do not read the rest of a refused body
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class ForgetFinishedEvents:
    """ASGI middleware: after each HTTP request, `forget_finished` on the app's Blocks."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        try:
            await self.app(scope, receive, send)
        finally:
            if scope["type"] == "http" and "app" in scope:  # Starlette sets it: Gradio's App
                forget_finished(scope["app"].get_blocks())


def forget_finished(blocks) -> None:
    """Drop what Gradio 6.17.3 keeps of finished events and evicted sessions (gradio#13154,
    gradio#13756; remove with the upgrade). An event is kept while it waits in a queue, runs,
    or its answer is still to be read (its id in `pending_event_ids_session`), a session's
    message queue while it holds messages or events; an analytics entry is kept until Gradio
    wrote its last status, and then among the last `EVENTS_KEPT`."""
    queue = blocks._queue
    busy = {e._id for q in queue.event_queue_per_concurrency_id.values() for e in q.queue}
    busy.update(e._id for job in queue.active_jobs if job for e in job)
    for session, ids in list(queue.pending_event_ids_session.items()):
        if ids:
            busy.update(ids)
        else:
            queue.pending_event_ids_session.pop(session, None)
    for event_id in list(queue.event_ids_to_events):
        if event_id not in busy:
            queue.event_ids_to_events.pop(event_id, None)
    for session, messages in list(queue.pending_messages_per_session.items()):
        if session not in queue.pending_event_ids_session and messages.empty():
            queue.pending_messages_per_session.pop(session, None)  # no answer left to read
    queue._asyncio_tasks[:] = [task for task in queue._asyncio_tasks if not task.done()]
    extra = len(queue.event_analytics) - EVENTS_KEPT
    if extra > 0:
        analytics = queue.event_analytics
        done = [k for k, v in list(analytics.items()) if v.get("status") in FINAL][:extra]
        for event_id in done:
            analytics.pop(event_id, None)
        # Gradio recomputes its summary when the count grew since the last one
        queue.event_count_at_last_cache = max(queue.event_count_at_last_cache - len(done), 0)
    holder = blocks.state_holder
    for session in list(holder.time_last_used):
        if session not in holder.session_data:
            holder.time_last_used.pop(session, None)


def private_temp_dir() -> Path:
    """A new folder for Gradio's files, owned by this process; set as GRADIO_TEMP_DIR (before
    Gradio is imported, which reads it in places at import) and removed at exit."""
    folder = Path(tempfile.mkdtemp(prefix="scriptorium-gradio-"))
    os.environ["GRADIO_TEMP_DIR"] = str(folder)
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


class BoundedLines(io.TextIOBase):
    """A text stream that passes everything to `inner` but cuts each line to `limit` characters,
    saying how many were left out.

    >>> out = io.StringIO()
    >>> print("x" * 50, file=BoundedLines(out, 10))
    >>> out.getvalue()
    'xxxxxxxxxx… (40 more characters)\\n'
    """

    def __init__(self, inner, limit: int = LOG_LINE_CHARS):
        self.inner, self.limit = inner, limit
        self._column = 0  # characters of the current line written so far
        self._dropped = 0  # characters of the current line left out

    def write(self, text: str) -> int:
        for piece in text.splitlines(keepends=True):
            line, newline = piece.rstrip("\r\n"), piece[len(piece.rstrip("\r\n")) :]
            room = max(self.limit - self._column, 0)
            self.inner.write(line[:room])
            self._column += min(len(line), room)
            self._dropped += max(len(line) - room, 0)
            if newline:
                if self._dropped:
                    self.inner.write(f"… ({self._dropped} more characters)")
                self.inner.write(newline)
                self._column = self._dropped = 0
        return len(text)

    def flush(self) -> None:
        self.inner.flush()

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.inner.fileno()

    def isatty(self) -> bool:
        return self.inner.isatty()


def launch_settings(max_body_bytes: int = MAX_BODY_BYTES) -> dict:
    """`Blocks.launch` keyword arguments: the body limit in front of Gradio's routes (no tab
    takes uploads, so the upload route is closed), Gradio's own `max_file_size`, the sessions
    it keeps, the forgetting of finished events, and the lighter page (ui/light_page.py)."""
    from starlette.middleware import Middleware

    from ui import light_page

    return {
        "max_file_size": MAX_FILE_SIZE,
        "state_session_capacity": SESSION_CAPACITY,
        "app_kwargs": {
            "middleware": [
                Middleware(BodyLimit, max_bytes=max_body_bytes),
                Middleware(ForgetFinishedEvents),
                *light_page.middleware(),
            ]
        },
    }
