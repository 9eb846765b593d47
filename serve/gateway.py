"""The `Gateway`: the Serve ingress, a FastAPI app under `/v1` (serve/http_app.py) that speaks
OpenAI's API and routes each generation request by its `model` to that model's `ModelServer`
deployment (serve/replica.py).

- `GET /v1/models`: the model ids; `GET /v1/models/{id}`: one model, with its manifest. Both
  read the manifests from disk in the gateway, so they never wait for a replica to be placed.
- `GET /v1/models/{id}/files/{name}`: a file the manifest lists (serve/downloads.py).
- `POST /v1/completions` and `POST /v1/chat/completions` (the latter for models with a chat
  template): a JSON answer, or server-sent events with `"stream": true`. Both run through one
  template (`_answer`), each with its `Route` (serve/routes.py).

Before a request body is read, the gateway checks the API key (`--api-key`: 401 without
`Authorization: Bearer KEY`), the content type (415 unless `application/json`) and the size
(413 above `ServeLimits.max_body_bytes`, from Content-Length and again while reading). A
streamed request waits for the replica's first item, so input the runtime refuses still gets a
400; after that, an error is an error event. A replica that died is retried once while nothing
was sent (then 503). Errors are OpenAI's `{"error": {…}}` (serve/errors.py).
"""

# No `from __future__ import annotations`: FastAPI reads the routes' annotations (`Request`)
# after Serve has copied the routes with only the globals their code names.
import asyncio
import json
import time
from pathlib import Path

from fastapi import Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from ray import serve
from tokenizers import Tokenizer

from runtime import template_pool
from runtime.bundle import read_manifest
from runtime.chat import is_chat_manifest
from runtime.manifest import Manifest
from runtime.request_caps import SERVE_LIMITS, ServeLimits

from . import protocol
from .api import check_text
from .chat import not_a_chat_model
from .downloads import FILE_TYPES, Downloads
from .errors import ERROR_RESPONSES, UNAVAILABLE, failure, refused
from .http_app import http, key_sent, request_body, unauthorized
from .metrics import CONTENT_TYPE, ServeMetrics
from .ray_guard import replica_grpc_on_loopback
from .routes import CHAT, COMPLETIONS, Route

RETRIES = 1  # extra attempts of a request whose replica died before it sent anything


def _answer_responses(route: Route) -> dict:
    """A generation route's responses, as the OpenAPI schema declares them."""
    ok = {
        "model": route.response_model,
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
        "description": "the answer, or with `stream` server-sent events of chunks",
    }
    return {200: ok} | ERROR_RESPONSES


def _sse(body: dict) -> str:
    """One server-sent event; strict JSON (no NaN or infinities: a stream's client must be able
    to parse every event, so a non-finite number is a bug that ends the stream with an error
    event, as the JSONResponse of an unstreamed answer would be a 500)."""
    return f"data: {json.dumps(body, ensure_ascii=False, allow_nan=False)}\n\n"


def _client_of(raw: Request) -> str:
    """Whose request this is, for the template pool's fair shares (runtime/template_pool.py):
    its client's address. Not the API key: `--api-key` is one key, shared by every client."""
    return raw.client.host if raw.client is not None else ""


class Gateway:
    """Routes OpenAI requests to the `ModelServer` deployment of their model."""

    def __init__(
        self,
        models: dict,
        paths: dict,
        limits: ServeLimits = SERVE_LIMITS,
        api_key: str | None = None,
    ):
        replica_grpc_on_loopback()
        self.models = models  # model id -> DeploymentHandle
        self.paths = {model: Path(path) for model, path in paths.items()}  # model id -> bundle
        self.limits, self.api_key = limits, api_key
        self._manifests: dict[str, Manifest] = {}
        self._tokenizers: dict[str, Tokenizer] = {}
        self.downloads = Downloads(limits.max_downloads)
        self.metrics = ServeMetrics()

    def _check_model(self, model) -> None:
        if model not in self.models:
            raise protocol.RequestError(
                f"`model` must be one of {sorted(self.models)}, got {protocol.shown(model)}",
                param="model",
                status=404,
                code="model_not_found",
            )

    def _manifest(self, model: str) -> Manifest:
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
            "task": manifest.task,
            "precision": manifest.precision,
            "context_length": manifest.context_length,
            "chat": is_chat_manifest(manifest),
        }

    def _unauthorized(self, raw: Request) -> JSONResponse | None:
        """A 401 unless the server has no key or the request sends it (`Bearer KEY`)."""
        return None if key_sent(raw.headers.get("authorization"), self.api_key) else unauthorized()

    def _tokenizer(self, model: str) -> Tokenizer:
        """The model's tokenizer (its bundle's tokenizer.json), read once."""
        self._check_model(model)
        if model not in self._tokenizers:
            self._tokenizers[model] = Tokenizer.from_file(str(self.paths[model] / "tokenizer.json"))
        return self._tokenizers[model]

    @http.get("/health", include_in_schema=False)
    async def health(self):
        """The one route open without the API key: the gateway answers (llama-server's)."""
        return {"status": "ok"}

    @http.get("/openapi.json", include_in_schema=False)
    async def openapi(self, raw: Request):
        if (denied := self._unauthorized(raw)) is not None:
            return denied
        return JSONResponse(http.openapi())

    @http.get("/docs", include_in_schema=False)
    async def docs(self, raw: Request):
        """Swagger UI with the schema inlined, so that the page needs no second request (which
        a browser would send without the key)."""
        if (denied := self._unauthorized(raw)) is not None:
            return denied
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title=f"{http.title} - docs",
            swagger_ui_parameters={"spec": http.openapi()},
        )

    @http.get("/metrics", include_in_schema=False)
    async def prometheus(self, raw: Request):
        """Prometheus text (serve/metrics.py), with each model's replica asked for its numbers."""
        if (denied := self._unauthorized(raw)) is not None:
            return denied
        for model, handle in self.models.items():
            try:
                self.metrics.replicas[model] = await handle.stats.remote()
            except UNAVAILABLE:  # no replica now: its last numbers stand
                pass
        return Response(self.metrics.text(), media_type=CONTENT_TYPE)

    @http.post(
        "/tokenize",
        response_model=protocol.TokenizeResponse,
        responses=ERROR_RESPONSES,
        openapi_extra={"requestBody": request_body(protocol.TokenizeBody)},
    )
    async def tokenize(self, raw: Request):
        """`{"model", "content", "add_special"}` -> `{"tokens"}` (llama-server's, plus `model`):
        the ids of the bundle's tokenizer, with the special tokens it adds (BOS) when
        `add_special`."""
        if (denied := self._unauthorized(raw)) is not None:
            return denied
        try:
            body = protocol.parse_body(protocol.TokenizeBody, await self._json_body(raw))
            check_text("content", body.content, self.limits.max_prompt_chars)
            encoded = self._tokenizer(body.model).encode(
                body.content, add_special_tokens=body.add_special
            )
        except Exception as error:
            return failure(error, None)
        return {"tokens": encoded.ids}

    @http.post(
        "/detokenize",
        response_model=protocol.DetokenizeResponse,
        responses=ERROR_RESPONSES,
        openapi_extra={"requestBody": request_body(protocol.DetokenizeBody)},
    )
    async def detokenize(self, raw: Request):
        """`{"model", "tokens"}` -> `{"content"}` (llama-server's, plus `model`): the text of
        the ids, special tokens included; an id outside the vocabulary is a 400."""
        if (denied := self._unauthorized(raw)) is not None:
            return denied
        try:
            body = protocol.parse_body(protocol.DetokenizeBody, await self._json_body(raw))
            tokenizer = self._tokenizer(body.model)
            size = tokenizer.get_vocab_size(with_added_tokens=True)
            if outside := [t for t in body.tokens if t >= size]:
                raise protocol.RequestError(
                    f"`tokens` must be ids below the vocabulary's {size}, got {outside[0]}",
                    param="tokens",
                )
            content = tokenizer.decode(body.tokens, skip_special_tokens=False)
        except Exception as error:
            return failure(error, None)
        return {"content": content}

    async def _json_body(self, raw: Request) -> bytes:
        """The request's body, refused (415, 413) before it is read when the headers show it
        is not JSON or too large, and while reading once it grows past the limit."""
        media, _, options = raw.headers.get("content-type", "").partition(";")
        charset = options.strip().lower().removeprefix("charset=") if options.strip() else ""
        if media.strip().lower() != "application/json" or charset not in ("", "utf-8"):
            raise protocol.RequestError(
                "the request body must be `application/json` (UTF-8), got Content-Type "
                f"{protocol.shown(raw.headers.get('content-type'))}",
                status=415,
                code="unsupported_media_type",
            )
        limit = self.limits.max_body_bytes
        declared = raw.headers.get("content-length")
        too_large = protocol.RequestError(
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
        if (denied := self._unauthorized(raw)) is not None:
            return denied
        try:
            data = [self._model_object(model) for model in self.models]
        except Exception as error:
            return failure(error, None)
        return {"object": "list", "data": data}

    @http.get(
        "/v1/models/{model:path}/files/{name}",
        response_class=FileResponse,
        responses={200: {"content": FILE_TYPES}, 304: {"description": "not modified"}}
        | ERROR_RESPONSES,
    )
    async def model_file(self, model: str, name: str, raw: Request):
        if (denied := self._unauthorized(raw)) is not None:
            return denied
        try:
            manifest = self._manifest(model)
            if_none_match = raw.headers.get("if-none-match", "")
            return self.downloads.response(self.paths[model], manifest, name, if_none_match)
        except Exception as error:
            return failure(error, model)

    @http.get(
        "/v1/models/{model:path}", response_model=protocol.ModelInfo, responses=ERROR_RESPONSES
    )
    async def model_info(self, model: str, raw: Request):
        if (denied := self._unauthorized(raw)) is not None:
            return denied
        try:
            return {**self._model_object(model), "manifest": self._manifest(model).to_json()}
        except Exception as error:
            return failure(error, model)

    @http.post(
        COMPLETIONS.path,
        response_model=None,
        responses=_answer_responses(COMPLETIONS),
        openapi_extra={"requestBody": request_body(COMPLETIONS.body)},
    )
    async def completions(self, raw: Request):
        """OpenAI's (legacy) completions (serve/api.py)."""
        return await self._answer(raw, COMPLETIONS)

    @http.post(
        CHAT.path,
        response_model=None,
        responses=_answer_responses(CHAT),
        openapi_extra={"requestBody": request_body(CHAT.body)},
    )
    async def chat_completions(self, raw: Request):
        """OpenAI's chat completions, for a model with a chat template (serve/chat.py)."""
        return await self._answer(raw, CHAT)

    async def _answer(self, raw: Request, route: Route):
        """One generation request by `route`: checked here, answered by the model's replica."""
        if (denied := self._unauthorized(raw)) is not None:
            return denied
        arrived, model = time.perf_counter(), None
        client = _client_of(raw)
        try:
            body = await self._json_body(raw)
            # Parsing checks a JSON schema (limits, then a sandboxed compile: up to its 5 s
            # deadline), so it runs on a worker thread, never on the loop serving others.
            with template_pool.client(client):
                request = await asyncio.to_thread(route.parse, body, self.limits)
            model = request.model
            self._check_model(model)
            if route.needs_chat_template and not self._model_object(model)["chat"]:
                raise not_a_chat_model(model)
            handle = self.models[model]
            if request.stream:
                return await self._stream(handle, request, route, arrived, client)
            with self.metrics.running_request(model):
                for attempt in range(RETRIES + 1):
                    try:
                        result = await handle.complete.remote(request, client)
                        break
                    except UNAVAILABLE:
                        if attempt == RETRIES:
                            raise
        except Exception as error:
            return failure(error, model, route)
        if "error" in result:
            return refused(result["error"], route)
        self.metrics.add_usage(model, result["usage"])
        return route.response(route.new_id(), model, result)

    async def _stream(
        self, handle, request, route: Route, arrived: float, client: str
    ) -> StreamingResponse:
        """Wait for the replica's first item (so refused input still gets a 400), then stream
        server-sent events. The stream's timer (serve/metrics.py) counts it as waiting until
        its first token, then as running, and takes its tokens' times and its usage."""
        timer = self.metrics.stream(request.model, arrived)
        try:
            for attempt in range(RETRIES + 1):
                responses = handle.options(stream=True).stream.remote(request, client)
                try:
                    first = await responses.__anext__()
                    break
                except UNAVAILABLE:
                    if attempt == RETRIES:
                        raise
                except BaseException:
                    responses.cancel()
                    raise
        except BaseException:
            timer.close()
            raise
        if "error" in first[0]:
            timer.close()
            return refused(first[0]["error"], route)
        request_id, created = route.new_id(), int(time.time())

        def event(item) -> str | None:
            if "error" in item:
                message = item["error"]
                return _sse(
                    protocol.error_body(
                        route.api_message(message), param=route.param_named_in(message)
                    )
                )
            if "choice" in item:
                timer.token()
                return _sse(route.chunk(request_id, request.model, created, [item["choice"]]))
            self.metrics.add_usage(request.model, item["usage"])
            if request.include_usage:
                return _sse(route.chunk(request_id, request.model, created, [], item["usage"]))
            return None

        def lines(ready: list[dict]) -> str:
            # one ASGI message to the HTTP proxy for the items that came together
            return "".join(line for item in ready if (line := event(item)) is not None)

        async def events():
            finished = False
            try:
                if text := lines(first):
                    yield text
                async for ready in responses:
                    if text := lines(ready):
                        yield text
                finished = True
            except Exception as error:  # mid-stream: headers are sent, so an error event
                yield _sse(json.loads(failure(error, request.model, route).body))
            finally:
                timer.close()
                if not finished:
                    responses.cancel()
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")


# Serve's ingress: `serve.ingress` makes each route's `self` a FastAPI dependency on the serving
# replica's instance (serve/one_process.py overrides it with its own), then copies the app.
GatewayIngress = serve.ingress(http)(Gateway)
