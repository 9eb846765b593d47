"""A model's files as the gateway sends them (`GET /v1/models/{id}/files/{name}`): only a file
its manifest lists (tokenizer.json is in every model directory, so it always is), streamed from
disk by Starlette's `FileResponse` in 64 KiB chunks, with the manifest's sha256 as its ETag
(`If-None-Match` → 304) and its media type from its name; at most `ServeLimits.max_downloads`
at once (429 with `Retry-After`).

Which models exist and where their bundles are is the gateway's business (serve/gateway.py);
checking the files' checksums is the replica's, when it loads the bundle.
"""

from __future__ import annotations

import mimetypes
from collections.abc import Callable
from pathlib import Path

from fastapi.responses import FileResponse, Response

from runtime.manifest import FileEntry, Manifest

from .errors import error_response
from .protocol import shown

FILE_TYPES = {  # the media types a file may be sent as, for the OpenAPI schema
    "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
    "application/json": {"schema": {"type": "object"}},
    "text/markdown": {"schema": {"type": "string"}},
    "image/png": {"schema": {"type": "string", "format": "binary"}},
}


class Downloads:
    """The gateway's file downloads: the answer to each request, and how many run now."""

    def __init__(self, limit: int):
        self.limit = limit  # downloads at once; more get a 429
        self.running = 0  # files being sent now

    def response(
        self, directory: Path, manifest: Manifest, name: str, if_none_match: str
    ) -> Response:
        """The file `name` of the bundle in `directory`, or the error that says why not."""
        entry = manifest.files.get(name)
        if entry is None and name == "tokenizer.json":
            # in every model directory, a plain optimum export's included (unlisted: no ETag)
            entry = FileEntry(sha256="", size=0)
        directory = directory.resolve()
        path = (directory / name).resolve()
        if entry is None or not path.is_relative_to(directory) or not path.is_file():
            return error_response(404, f"`{shown(name)}` is not a file of this model's bundle")
        etag = f'"{entry.sha256}"' if entry.sha256 else None
        if etag and etag in if_none_match:
            return Response(status_code=304, headers={"ETag": etag})
        if self.running >= self.limit:
            response = error_response(
                429,
                f"at most {self.limit} file downloads at once; retry",
                code="too_many_downloads",
            )
            response.headers["Retry-After"] = "1"
            return response
        self.running += 1

        def release():
            self.running -= 1

        media = mimetypes.guess_type(name)[0] or "application/octet-stream"
        if name.endswith(".md"):
            media = "text/markdown"
        headers = {"ETag": etag, "Cache-Control": "no-cache"} if etag else None
        return _Download(path, media_type=media, headers=headers, release=release)


class _Download(FileResponse):
    """A file streamed from disk that gives its download slot back however it ends."""

    def __init__(self, *args, release: Callable[[], None], **kwargs):
        super().__init__(*args, **kwargs)
        self._release = release

    async def __call__(self, scope, receive, send):
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()
