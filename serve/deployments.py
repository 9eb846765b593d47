"""Ray Serve deployments: one `ModelServer` per model bundle, and the `Gateway` that fronts them.

`build_app(specs)` returns the Serve application: a `ModelServer` deployment per `ModelSpec`
(its replicas each load the bundle once with `runtime.load(path, threads=T)`, Ray reserving
`cpus` per replica) and one `Gateway` ingress, a FastAPI app under `/v1` that speaks OpenAI's
completions protocol (serve/api.py, bodies declared in serve/protocol.py) and routes each
request by its `model` to that model's deployment handle:

- `GET /v1/models`: the model ids; `GET /v1/models/{id}`: one model, with its manifest. Both
  read the manifests from disk in the gateway, so they never wait for a replica to be placed.
- `GET /v1/models/{id}/files/{name}`: a file the manifest lists (tokenizer.json, README.md,
  embeddings.npy…), streamed from disk by the gateway in 64 KiB chunks, with the manifest's
  sha256 as its ETag (`If-None-Match` → 304); at most `Limits.max_downloads` at once (429).
- `POST /v1/completions`: a JSON answer, or server-sent events with `"stream": true`.
- `POST /v1/chat/completions`: the same for conversations, for models with a chat template
  (serve/chat.py). Unknown routes answer OpenAI's error shape too.

Before a request body is read, the gateway checks the API key (`--api-key`: 401 without
`Authorization: Bearer KEY`), the content type (415 unless `application/json`) and the size
(413 above `Limits.max_body_bytes`, from Content-Length and again while reading). Generation
runs in the replica's pool of `concurrency` threads (later requests wait there, in arrival
order), one prompt after another, so a prompt's output does not depend on the request's other
prompts. A request that is cancelled, streamed or not (the client disconnected, so Serve
cancels the request and its child requests), sets its thread's cancel event
(`runtime.cancel.cancel_when`): the engine drops its rows at its next step and the thread ends
(a stream's thread also closes the runtime's stream); one cancelled while it waits for a
thread never starts. `max_tokens` beyond what the context leaves after a prompt is capped, and each
choice says so (`scriptorium.max_tokens`, the cap applied; finish reason "context" when it was
reached). A prompt may be token ids, which generate as they are; `echo` puts the prompt (with
`logprobs`, its tokens' log-probabilities) in front of each choice, streamed as each choice's
first chunk, and `max_tokens: 0` with `echo` only scores the prompts (serve/scoring.py).
Errors, each as OpenAI's `{"error": {…}}`: bad input → 400 naming the field
(serve/protocol.py's checks in the gateway; the runtime's `ValueError`s come back from the
replica as a value), unknown model or file → 404, a replica that died → one retry when nothing
was sent yet, else 503 (mid-stream: an error event).
"""

# No `from __future__ import annotations`: FastAPI reads the routes' annotations (`Request`)
# after Serve has copied the routes with only the globals their code names.
import asyncio
import hmac
import json
import mimetypes
import re
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from pydantic.json_schema import models_json_schema
from ray import serve
from ray.exceptions import ActorUnavailableError, RayActorError, RayTaskError
from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError
from starlette.exceptions import HTTPException as StarletteHTTPException

import runtime
from runtime.bundle import read_manifest
from runtime.cancel import Cancelled, cancel_when
from runtime.chat import is_chat_manifest

from . import api, chat, protocol, scoring

RETRIES = 1  # extra attempts of a request whose replica died before it sent anything
UNAVAILABLE = (RayActorError, ActorUnavailableError, DeploymentUnavailableError, BackPressureError)


@dataclass(frozen=True)
class ModelSpec:
    model_id: str  # the id clients name in `model` (e.g. "bible-lm/int8")
    path: str  # bundle directory; on a multi-node cluster it must exist on every node
    replicas: int = 1  # replicas when not autoscaling
    threads: int = 1  # onnxruntime intra-op threads per replica
    cpus: float | None = None  # CPUs Ray reserves per replica; None = `threads`
    autoscaling: tuple[int, int] | None = None  # (min, max) replicas; None = fixed `replicas`
    concurrency: int = 4  # generations one replica runs at once (the app's limit, ui/checks.py)
    max_ongoing_requests: int = 64  # requests a replica accepts; those beyond `concurrency` queue
    loader: Callable = field(default=runtime.load)  # (path, threads=) -> Generator


def deployment_name(model_id: str) -> str:
    """A Ray deployment name for a model id ("bible-lm/int8" -> "model:bible-lm_int8").

    >>> deployment_name("bible-lm/int8")
    'model:bible-lm_int8'
    """
    return "model:" + re.sub(r"[^A-Za-z0-9._-]", "_", model_id)


class ModelServer:
    """One replica: a loaded generator, answering `complete` and `stream` for one model."""

    def __init__(self, path: str, threads: int, concurrency: int, loader: Callable = runtime.load):
        self.generator = loader(path, threads=threads)
        # Requests wait here, in arrival order, rather than in Serve's router, which retries a
        # full replica with backoff (up to 1 s a try) and so would add seconds under load.
        self.pool = ThreadPoolExecutor(concurrency, thread_name_prefix="generate")
        self._lock = threading.Lock()
        self.running = 0  # requests generating now, streamed or not
        self.cancelled = 0  # requests cancelled before they finished, since the replica started

    def stats(self) -> dict:
        """Requests running and cancelled, and the engine's batched steps so far (0 without
        an engine): what tests observe of a replica."""
        engine = getattr(self.generator, "engine", None)
        with self._lock:
            return {
                "running": self.running,
                "cancelled": self.cancelled,
                "steps": engine.steps if engine is not None else 0,
            }

    async def _run(self, work: Callable, *args):
        """`work(*args)` in the pool, inside a cancel scope that is set when this request is
        cancelled (its client has gone): the generation then stops at its next step."""
        stop = threading.Event()

        def scoped():
            with cancel_when(stop):
                return work(*args)

        with self._lock:
            self.running += 1
        cancelled = True  # until the work ends by itself or fails (CancelledError is neither)
        try:
            result = await asyncio.get_running_loop().run_in_executor(self.pool, scoped)
            cancelled = False
            return result
        except Exception:
            cancelled = False
            raise
        finally:
            stop.set()
            with self._lock:
                self.running -= 1
                self.cancelled += cancelled

    def _room(self, prompt: str | list[int], request: api.CompletionRequest) -> tuple[int, int]:
        """(prompt tokens, tokens that can follow them): `max_tokens`, capped by what the
        context leaves, as the runtime caps it. Raises ValueError for a prompt too long."""
        gen = self.generator
        if isinstance(prompt, str):
            tokens = len(gen.encode_prompt(prompt, request.controls))
        else:
            scoring.check_token_prompt(gen, prompt)
            tokens = len(prompt)
        room = gen.context_length - (1 if gen.task == "seq2seq" else tokens)
        return tokens, min(request.config.max_new_tokens, room)

    async def complete(self, request: api.CompletionRequest) -> dict:
        """The choices and usage of a non-streamed completion, or {"error": message} for a
        setting or prompt the runtime refuses (a value, not an exception: bad input is not a
        replica failure for Serve to log)."""
        return await self._run(self._complete, request)

    def _complete(self, request: api.CompletionRequest) -> dict:
        try:
            return self._completion(request)
        except ValueError as error:
            return {"error": str(error)}

    def _completion(self, request: api.CompletionRequest) -> dict:
        gen, copies = self.generator, request.config.num_return_sequences
        if request.score_only:
            return scoring.scored_completion(
                gen, request.prompts, request.logprobs, copies, request.controls
            )
        tokenizer, config, controls = gen.tokenizer, request.config, request.controls
        choices, prompt_tokens, completion_tokens = [], 0, 0
        for p, prompt in enumerate(request.prompts):
            tokens, cap = self._room(prompt, request)
            prompt_tokens += tokens
            if request.logprobs:  # top logprobs come with the stream's per-token alternatives
                rows = _collect(gen.stream(prompt, config, controls), copies)
            else:
                rows = [(o, None) for o in gen.generate([prompt], config, controls)]
            for row, (output, alternatives) in enumerate(rows):
                choice = api.output_choice(
                    output, p * copies + row, tokenizer, request.logprobs, alternatives
                )
                if request.echo:
                    choice = scoring.echo_choice(gen, prompt, choice, request.logprobs, controls)
                choice["scriptorium"]["max_tokens"] = cap
                choices.append(choice)
                completion_tokens += len(output.token_ids)
        return {"choices": choices, "usage": api.usage(prompt_tokens, completion_tokens)}

    async def stream(self, request: api.CompletionRequest) -> AsyncIterator[dict]:
        """Yield {"choice": …} per token of every prompt in turn, then {"usage": …}; or
        {"error": message} when the runtime refuses a setting or prompt."""
        gen, copies = self.generator, request.config.num_return_sequences
        prompt_tokens = completion_tokens = 0
        try:
            if request.score_only:
                result = await self._run(self._completion, request)
                for choice in result["choices"]:
                    yield {"choice": choice}
                yield {"usage": result["usage"]}
                return
            for p, prompt in enumerate(request.prompts):
                tokens, cap = self._room(prompt, request)
                prompt_tokens += tokens
                offsets = [0] * copies  # characters of each choice's text sent so far
                if request.echo:  # the prompt (and its logprobs) first, once per choice
                    head = await self._run(
                        scoring.echo_choice, gen, prompt, None, request.logprobs, request.controls
                    )
                    for copy in range(copies):
                        offsets[copy] = len(head["text"])
                        yield {
                            "choice": {**head, "index": p * copies + copy, "finish_reason": None}
                        }
                events = gen.stream(prompt, request.config, request.controls)
                async for event in self._in_thread(events):
                    if event.token_id is not None:
                        completion_tokens += 1
                    else:  # beam search: a whole sequence at once
                        completion_tokens += len(gen.tokenizer.encode(event.text).ids)
                    choice = api.event_choice(
                        event,
                        p * copies + event.index,
                        gen.tokenizer,
                        request.logprobs,
                        offsets[event.index],
                    )
                    offsets[event.index] += len(event.text)
                    if event.finish_reason:
                        choice["scriptorium"]["max_tokens"] = cap
                    yield {"choice": choice}
        except ValueError as error:
            yield {"error": str(error)}
            return
        yield {"usage": api.usage(prompt_tokens, completion_tokens)}

    async def complete_chat(self, request: chat.ChatRequest) -> dict:
        """A non-streamed chat completion (serve/chat.py), or {"error": message}."""
        return await self._run(chat.replica_complete, self.generator, request)

    async def stream_chat(self, request: chat.ChatRequest) -> AsyncIterator[dict]:
        """A streamed chat completion's items (serve/chat.py), or {"error": message}."""
        try:
            async for item in self._in_thread(chat.replica_stream(self.generator, request)):
                yield item
        except ValueError as error:
            yield {"error": str(error)}

    async def _in_thread(self, events) -> AsyncIterator:
        """Run the runtime's (blocking) stream in a thread; stop and close it when cancelled."""
        loop, queue, stop = asyncio.get_running_loop(), asyncio.Queue(), threading.Event()
        done = object()

        def produce():
            try:
                with cancel_when(stop):  # beam search, which streams only at its end, stops too
                    if stop.is_set():  # cancelled while waiting for a free slot
                        return
                    for event in events:
                        if stop.is_set():
                            break
                        loop.call_soon_threadsafe(queue.put_nowait, event)
            except Cancelled:
                pass
            except Exception as error:  # raised again in the replica's request, below
                loop.call_soon_threadsafe(queue.put_nowait, error)
            finally:
                events.close()
                loop.call_soon_threadsafe(queue.put_nowait, done)

        with self._lock:
            self.running += 1
        self.pool.submit(produce)
        cancelled = True  # until the stream ends by itself or fails
        try:
            while (item := await queue.get()) is not done:
                if isinstance(item, Exception):
                    cancelled = False
                    raise item
                yield item
            cancelled = False
        finally:
            stop.set()
            with self._lock:
                self.running -= 1
                self.cancelled += cancelled


def _collect(events, copies: int) -> list[tuple[runtime.GenerationOutput, list]]:
    """(output, per-token alternatives) per sequence of one prompt's stream."""
    rows = [(runtime.GenerationOutput("", [], [], ""), []) for _ in range(copies)]
    for event in events:
        output, alternatives = rows[event.index]
        output.text += event.text
        if event.token_id is not None:
            output.token_ids.append(event.token_id)
            output.logprobs.append(event.logprob)
            alternatives.append(event.alternatives)
        if event.finish_reason:
            output.finish_reason = event.finish_reason
    return rows


# ---- the HTTP ingress ------------------------------------------------------------------------

http = FastAPI(title="Scriptorium", description="OpenAI-compatible completions over Scriptorium")

ERROR_RESPONSES = {
    status: {"model": protocol.ErrorResponse, "description": description}
    for status, description in {
        400: "a field is missing, of the wrong type or out of range (`param` names it)",
        401: "the server has an API key and the request did not send it as a Bearer token",
        404: "no such model, or no such file in the model's bundle",
        413: "the request body is larger than the server's limit",
        415: "the request body is not `application/json`",
        429: "too many file downloads at once; retry after the `Retry-After` seconds",
        503: "the replica serving the request stopped or is overloaded; retry",
    }.items()
}
COMPLETION_BODY = {
    "required": True,
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/CompletionBody"}}},
}
FILE_TYPES = {
    "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
    "application/json": {"schema": {"type": "object"}},
    "text/markdown": {"schema": {"type": "string"}},
    "image/png": {"schema": {"type": "string", "format": "binary"}},
}


def _openapi() -> dict:
    """FastAPI's schema plus the request bodies the routes read themselves (so that they can
    refuse oversized, non-JSON and malformed bodies before parsing them)."""
    if http.openapi_schema is None:
        schema = get_openapi(
            title=http.title, version="1", description=http.description, routes=http.routes
        )
        _, bodies = models_json_schema(
            [(protocol.CompletionBody, "validation")],
            ref_template="#/components/schemas/{model}",
        )
        schema.setdefault("components", {}).setdefault("schemas", {}).update(bodies["$defs"])
        http.openapi_schema = schema
    return http.openapi_schema


http.openapi = _openapi


@http.exception_handler(StarletteHTTPException)
async def _route_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
    """Unknown routes and methods answer in OpenAI's error shape, not FastAPI's {"detail"}."""
    if error.status_code in (404, 405):
        message = f"no route {request.method} {request.url.path} on this server (see /docs)"
        return _error(error.status_code, message, code="not_found")
    return _error(error.status_code, str(error.detail))


def _error(status: int, message: str, kind="invalid_request_error", param=None, code=None):
    return JSONResponse(api.error_body(message, kind, param, code), status_code=status)


def _refused(message: str) -> JSONResponse:
    """A 400 for input the runtime refused, naming the parameter its message is about."""
    return _error(400, api.api_message(message), param=api.param_named_in(message))


def _cause(error: BaseException) -> BaseException:
    """The replica's own exception inside a RayTaskError wrapper."""
    return error.cause if isinstance(error, RayTaskError) and error.cause else error


def _failure(error: BaseException, model: str | None) -> JSONResponse:
    """An exception from a replica (or from parsing) as an OpenAI error response."""
    error = _cause(error)
    if isinstance(error, api.RequestError):
        return _error(error.status, str(error), error.kind, error.param, error.code)
    if isinstance(error, FileNotFoundError):
        return _error(404, protocol.shown(str(error)), code="not_found")
    if isinstance(error, ValueError):
        return _refused(str(error))
    if isinstance(error, UNAVAILABLE):
        message = (
            f"the replica of model {model!r} serving this request stopped or is overloaded "
            f"({type(error).__name__}); retry the request"
        )
        return _error(503, message, "server_error", code="replica_unavailable")
    message = f"the server failed: {type(error).__name__}: {protocol.shown(str(error))}"
    return _error(500, message, "server_error", code="internal_error")  # a bug, not bad input


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


# `serve.ingress` copies the FastAPI app when the class is defined: the routes' helpers above
# must already exist then.
@serve.ingress(http)
class Gateway:
    """Routes OpenAI requests to the `ModelServer` deployment of their model."""

    def __init__(
        self,
        models: dict,
        paths: dict,
        limits: api.Limits = api.LIMITS,
        api_key: str | None = None,
    ):
        self.models = models  # model id -> DeploymentHandle
        self.paths = {model: Path(path) for model, path in paths.items()}  # model id -> bundle
        self.limits, self.api_key = limits, api_key
        self._manifests: dict[str, dict] = {}
        self._downloads = 0  # files being sent now

    def _check_model(self, model) -> None:
        if model not in self.models:
            raise api.RequestError(
                f"`model` must be one of {sorted(self.models)}, got {protocol.shown(model)}",
                param="model",
                status=404,
                code="model_not_found",
            )

    def _manifest(self, model: str) -> dict:
        """The model's manifest, read from its bundle on this node (checksums are the
        replica's business: it verifies them when it loads the bundle)."""
        self._check_model(model)
        if model not in self._manifests:
            self._manifests[model] = read_manifest(self.paths[model], verify=False)
        return self._manifests[model]

    def _model_object(self, model: str) -> dict:
        manifest, path = self._manifest(model), self.paths[model]
        written = path / "manifest.json" if (path / "manifest.json").exists() else path
        return {
            "id": model,
            "object": "model",
            "created": int(written.stat().st_mtime),
            "owned_by": "scriptorium",
            "task": manifest.get("task"),
            "precision": manifest.get("precision"),
            "context_length": manifest.get("context_length"),
            "chat": is_chat_manifest(manifest),
        }

    def _unauthorized(self, raw: Request) -> JSONResponse | None:
        """A 401 unless the server has no key or the request sends it (`Bearer KEY`)."""
        if self.api_key is None:
            return None
        sent = raw.headers.get("authorization", "")
        scheme, _, token = sent.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(
            token.encode(), self.api_key.encode()
        ):
            return None
        message = "a valid API key is required (`Authorization: Bearer KEY`)"
        return JSONResponse(
            api.error_body(message, code="invalid_api_key"),
            status_code=401,
            headers={"WWW-Authenticate": "Bearer"},
        )

    async def _json_body(self, raw: Request) -> bytes:
        """The request's body, refused (415, 413) before it is read when the headers show it
        is not JSON or too large, and while reading once it grows past the limit."""
        media, _, options = raw.headers.get("content-type", "").partition(";")
        charset = options.strip().lower().removeprefix("charset=") if options.strip() else ""
        if media.strip().lower() != "application/json" or charset not in ("", "utf-8"):
            raise api.RequestError(
                "the request body must be `application/json` (UTF-8), got Content-Type "
                f"{protocol.shown(raw.headers.get('content-type'))}",
                status=415,
                code="unsupported_media_type",
            )
        limit = self.limits.max_body_bytes
        declared = raw.headers.get("content-length")
        too_large = api.RequestError(
            f"the request body must be at most {limit} bytes", status=413, code="body_too_large"
        )
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            raise too_large
        chunks, size = [], 0
        async for chunk in raw.stream():
            size += len(chunk)
            if size > limit:
                raise too_large
            chunks.append(chunk)
        return b"".join(chunks)

    @http.get("/v1/models", response_model=protocol.ModelList, responses=ERROR_RESPONSES)
    async def list_models(self, raw: Request):
        if (refused := self._unauthorized(raw)) is not None:
            return refused
        try:
            data = [self._model_object(model) for model in self.models]
        except Exception as error:
            return _failure(error, None)
        return {"object": "list", "data": data}

    @http.get(
        "/v1/models/{model:path}/files/{name}",
        response_class=FileResponse,
        responses={200: {"content": FILE_TYPES}, 304: {"description": "not modified"}}
        | ERROR_RESPONSES,
    )
    async def model_file(self, model: str, name: str, raw: Request):
        if (refused := self._unauthorized(raw)) is not None:
            return refused
        try:
            entry = self._manifest(model).get("files", {}).get(name)
            if entry is None and name == "tokenizer.json":
                entry = {}  # in every model directory, a plain optimum export's included
            directory = self.paths[model].resolve()
            path = (directory / name).resolve()
            if entry is None or not path.is_relative_to(directory) or not path.is_file():
                return _error(404, f"`{protocol.shown(name)}` is not a file of this model's bundle")
        except Exception as error:
            return _failure(error, model)
        etag = f'"{entry["sha256"]}"' if entry.get("sha256") else None
        if etag and etag in raw.headers.get("if-none-match", ""):
            return Response(status_code=304, headers={"ETag": etag})
        if self._downloads >= self.limits.max_downloads:
            response = _error(
                429,
                f"at most {self.limits.max_downloads} file downloads at once; retry",
                code="too_many_downloads",
            )
            response.headers["Retry-After"] = "1"
            return response
        self._downloads += 1

        def release():
            self._downloads -= 1

        media = mimetypes.guess_type(name)[0] or "application/octet-stream"
        if name.endswith(".md"):
            media = "text/markdown"
        headers = {"ETag": etag, "Cache-Control": "no-cache"} if etag else None
        return _Download(path, media_type=media, headers=headers, release=release)

    @http.get(
        "/v1/models/{model:path}", response_model=protocol.ModelInfo, responses=ERROR_RESPONSES
    )
    async def model_info(self, model: str, raw: Request):
        if (refused := self._unauthorized(raw)) is not None:
            return refused
        try:
            return {**self._model_object(model), "manifest": self._manifest(model)}
        except Exception as error:
            return _failure(error, model)

    @http.post(
        "/v1/completions",
        response_model=None,
        responses={
            200: {
                "model": protocol.CompletionResponse,
                "content": {"text/event-stream": {"schema": {"type": "string"}}},
                "description": "a completion, or with `stream` server-sent events of chunks",
            }
        }
        | ERROR_RESPONSES,
        openapi_extra={"requestBody": COMPLETION_BODY},
    )
    async def completions(self, raw: Request):
        if (refused := self._unauthorized(raw)) is not None:
            return refused
        request = None
        try:
            request = api.parse_completion(await self._json_body(raw), self.limits)
            self._check_model(request.model)
            handle = self.models[request.model]
            if request.stream:
                return await self._stream(handle, request)
            for attempt in range(RETRIES + 1):
                try:
                    result = await handle.complete.remote(request)
                    break
                except UNAVAILABLE:
                    if attempt == RETRIES:
                        raise
        except Exception as error:
            return _failure(error, request and request.model)
        if "error" in result:
            return _refused(result["error"])
        return api.completion_response(
            api.new_id(), request.model, result["choices"], result["usage"]
        )

    async def _stream(self, handle, request: api.CompletionRequest) -> StreamingResponse:
        """Wait for the first event (so bad input still gets a 400), then stream SSE."""
        for attempt in range(RETRIES + 1):
            responses = handle.options(stream=True).stream.remote(request)
            try:
                first = await responses.__anext__()
                break
            except UNAVAILABLE:
                if attempt == RETRIES:
                    raise
            except BaseException:
                responses.cancel()
                raise
        if "error" in first:
            return _refused(first["error"])
        request_id, created = api.new_id(), int(time.time())

        def sse(item) -> str | None:
            if "error" in item:
                message = item["error"]
                chunk = api.error_body(api.api_message(message), param=api.param_named_in(message))
            elif "choice" in item:
                chunk = api.stream_chunk(request_id, request.model, created, [item["choice"]])
            elif request.include_usage:
                chunk = api.stream_chunk(request_id, request.model, created, [], item["usage"])
            else:
                return None
            return f"data: {json.dumps(chunk)}\n\n"

        async def events():
            finished = False
            try:
                if (line := sse(first)) is not None:
                    yield line
                async for item in responses:
                    if (line := sse(item)) is not None:
                        yield line
                finished = True
            except Exception as error:  # mid-stream: headers are sent, so an error event
                body = json.loads(_failure(error, request.model).body)
                yield f"data: {json.dumps(body)}\n\n"
            finally:
                if not finished:
                    responses.cancel()
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    @http.post(
        "/v1/chat/completions",
        response_model=None,
        responses={200: {"description": "a chat completion, or with `stream` server-sent events"}}
        | ERROR_RESPONSES,
    )
    async def chat_completions(self, raw: Request):
        """OpenAI's chat completions for a model with a chat template (serve/chat.py)."""
        if (refused := self._unauthorized(raw)) is not None:
            return refused
        model = None
        try:
            request = chat.parse_chat(await self._json_body(raw))
            model = request.model
            self._check_model(model)
            handle = self.models[model]
            if not self._model_object(model)["chat"]:
                raise chat.not_a_chat_model(model)
            if request.stream:
                return await chat.stream_response(
                    lambda: handle.options(stream=True).stream_chat.remote(request),
                    request,
                    lambda error: _failure(error, model),
                    UNAVAILABLE,
                    RETRIES,
                )
            for attempt in range(RETRIES + 1):
                try:
                    result = await handle.complete_chat.remote(request)
                    break
                except UNAVAILABLE:
                    if attempt == RETRIES:
                        raise
        except Exception as error:
            return _failure(error, model)
        if "error" in result:
            return _refused(result["error"])
        return chat.chat_response(chat.new_id(), model, result)


def build_app(
    specs: list[ModelSpec], limits: api.Limits = api.LIMITS, api_key: str | None = None
) -> serve.Application:
    """The Serve application: a `ModelServer` deployment per spec behind one `Gateway`, which
    enforces `limits` and, when given, `api_key`."""
    if not specs:
        raise ValueError("`models` must name at least one model bundle, got none")
    handles = {}
    for spec in specs:
        options = {
            "name": deployment_name(spec.model_id),
            "ray_actor_options": {"num_cpus": spec.threads if spec.cpus is None else spec.cpus},
            "max_ongoing_requests": spec.max_ongoing_requests,
        }
        if spec.autoscaling:
            low, high = spec.autoscaling
            options["num_replicas"] = "auto"
            options["autoscaling_config"] = {
                "min_replicas": low,
                "max_replicas": high,
                "target_ongoing_requests": spec.concurrency,
            }
        else:
            options["num_replicas"] = spec.replicas
        deployment = serve.deployment(ModelServer).options(**options)
        handles[spec.model_id] = deployment.bind(
            spec.path, spec.threads, spec.concurrency, spec.loader
        )
    gateway = serve.deployment(Gateway).options(
        name="gateway", ray_actor_options={"num_cpus": 0}, max_ongoing_requests=1000
    )
    paths = {spec.model_id: spec.path for spec in specs}
    return gateway.bind(handles, paths, limits, api_key)
