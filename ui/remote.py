"""The app as a thin client of a `scriptorium serve` server (`python app.py --backend URL`).

`RemoteRegistry` lists the server's models (`GET /v1/models`, each manifest from
`GET /v1/models/{id}`) and hands out `RemoteGenerator`s, which implement what the tabs use of a
`runtime.Generator` — `generate`, `stream`, `manifest`, `controls`, `tokenizer`, `eos_token_id` —
over the OpenAI-compatible completions API (serve/api.py), so every generation runs on the
server; for a chat model also `chat` and `stream_chat` over `/v1/chat/completions`
(serve/chat.py), while the conversation is rendered and counted here from the manifest's chat
template, as the runtime does (`apply_chat_template`, `count_chat_tokens`). Only the tokenizer
(tokenizer.json, for counting tokens), the model card and the input embeddings are downloaded
(`GET /v1/models/{id}/files/{name}`). Settings travel as the request fields runtime/parameters.py
names for them, which map back onto the same `runtime.GenerationConfig`, so a seed gives the same
text as the in-process app. Closing a
stream closes its HTTP response, which makes the server cancel the generation (the Stop
button). Errors: the server's 4xx answers raise `ValueError` with its message, anything else
(5xx, an unreachable server) `ConnectionError`. A server started with `--api-key` gets the key
from `SCRIPTORIUM_API_KEY` (or `api_key`).
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
from tokenizers import Tokenizer

import runtime
from runtime.chat import ChatMixin
from runtime.manifest import DEFAULT_CONTEXT_LENGTH, Manifest
from runtime.parameters import request_fields

from .registry import ModelRegistry, inline_images

STREAM_LOGPROBS = 5  # top alternatives per token the token view shows


def completion_body(model, prompt, config: runtime.GenerationConfig, controls=None, **extra):
    """The completions request for `config`: OpenAI's fields plus our extras, as
    runtime/parameters.py names them (`request_fields`; serve/api.py maps them back onto an
    equal GenerationConfig; a config that does not sample asks for `GREEDY_TEMPERATURE`)."""
    return {
        "model": model,
        "prompt": prompt,
        **request_fields(config),
        "stop": list(config.stop) or None,
        "controls": controls or {},
        **_salt(config),
        **extra,
    }


def _salt(config: runtime.GenerationConfig) -> dict:
    """The request's `cache_salt` field, when the config has one (ui/visitor.py)."""
    return {"cache_salt": config.cache_salt} if config.cache_salt is not None else {}


def chat_body(model, messages, config: runtime.GenerationConfig, controls=None, **extra):
    """The chat completions request for `config` (serve/chat.py maps it back onto an equal
    GenerationConfig); beam search is not offered for chat, as in the runtime."""
    fields = request_fields(config, chat=True)
    fields["max_completion_tokens"] = fields.pop("max_tokens")  # chat's name for it
    return {
        "model": model,
        "messages": list(messages),
        **fields,
        "stop": list(config.stop) or None,
        "controls": controls or {},
        **_salt(config),
        **extra,
    }


def _raise_for(response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    response.read()
    try:
        message = response.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = response.text
    if response.status_code < 500:
        raise ValueError(message)
    raise ConnectionError(f"the backend answered {response.status_code}: {message}")


class RemoteGenerator(ChatMixin):
    """A model served by the backend, as a `runtime.ChatGenerator` (runtime/text_generator.py):
    the part of `runtime.Generator`'s interface the tabs use."""

    # Read from the manifest alone, exactly as the runtime's own generator reads them.
    name = runtime.Generator.name
    task = runtime.Generator.task
    controls = runtime.Generator.controls

    def __init__(self, client: httpx.Client, model: str, manifest: Manifest, tokenizer: Tokenizer):
        self.client = client
        self.model = model  # the server's model id
        self.manifest = manifest
        self.tokenizer = tokenizer
        self.eos_token_id = manifest.special_tokens.eos_token_id
        self.context_length = manifest.context_length or DEFAULT_CONTEXT_LENGTH
        self.defaults = runtime.GenerationConfig.from_dict(manifest.generation_defaults.given())

    def _post(self, body: dict, stream: bool, route: str = "completions"):
        try:
            request = self.client.build_request("POST", route, json=body)
            response = self.client.send(request, stream=stream)
        except httpx.HTTPError as error:
            raise ConnectionError(f"the backend {self.client.base_url} failed: {error}") from error
        try:
            _raise_for(response)
        except BaseException:
            response.close()
            raise
        return response

    def generate(self, prompts, config=None, controls=None) -> list[runtime.GenerationOutput]:
        """One request for all prompts; outputs in the server's order (prompt-major)."""
        config = config or self.defaults
        body = completion_body(self.model, prompts, config, controls, logprobs=0)
        answer = self._post(body, stream=False).json()
        copies = config.num_return_sequences
        return [
            runtime.GenerationOutput(
                text=choice["text"],
                token_ids=choice["scriptorium"]["token_ids"],
                logprobs=choice["logprobs"]["token_logprobs"],
                finish_reason=choice["scriptorium"]["finish_reason"],
                prompt_index=choice["index"] // copies,
                score=choice["scriptorium"].get("score"),
            )
            for choice in sorted(answer["choices"], key=lambda c: c["index"])
        ]

    def stream(self, prompt: str, config=None, controls=None) -> Iterator[runtime.StreamEvent]:
        """Server-sent events as `runtime.StreamEvent`s; closing this closes the response."""
        config = config or self.defaults
        body = completion_body(
            self.model, prompt, config, controls, stream=True, logprobs=STREAM_LOGPROBS
        )
        for choice in _chunk_choices(self._post(body, stream=True)):
            yield _event(choice)

    def chat(self, messages, config=None, controls=None) -> list[runtime.GenerationOutput]:
        """The assistant's replies from `/v1/chat/completions`, as `runtime.Generator.chat`."""
        self._chat_template  # noqa: B018 (a model that is not a chat model raises here)
        body = chat_body(self.model, messages, config or self.defaults, controls)
        answer = self._post(body, stream=False, route="chat/completions").json()
        return [
            runtime.GenerationOutput(
                text=choice["message"]["content"],
                token_ids=choice["scriptorium"]["token_ids"],
                logprobs=choice["scriptorium"]["logprobs"],
                finish_reason=choice["scriptorium"]["finish_reason"],
                prompt_tokens=answer["usage"]["prompt_tokens"],
            )
            for choice in sorted(answer["choices"], key=lambda c: c["index"])
        ]

    def stream_chat(self, messages, config=None, controls=None) -> Iterator[runtime.StreamEvent]:
        """The reply token by token from `/v1/chat/completions`; the checks (and the server's
        refusals) come before the first event. Closing it closes the response."""
        self._chat_template  # noqa: B018 (a model that is not a chat model raises here)
        body = chat_body(self.model, messages, config or self.defaults, controls, stream=True)
        return _chat_events(self._post(body, stream=True, route="chat/completions"))


def _chunk_choices(response: httpx.Response) -> Iterator[dict]:
    """The choices of a server-sent event stream, until [DONE]; closes the response."""
    try:
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            data = line[len("data: ") :]
            if data == "[DONE]":
                return
            chunk = json.loads(data)
            if "error" in chunk:
                raise ConnectionError(chunk["error"]["message"])
            yield from chunk["choices"]
    except httpx.HTTPError as error:
        raise ConnectionError(f"the backend stream broke off: {error}") from error
    finally:
        response.close()


def _chat_events(response: httpx.Response) -> Iterator[runtime.StreamEvent]:
    choices = _chunk_choices(response)
    try:
        for choice in choices:
            extra = choice["scriptorium"]
            yield runtime.StreamEvent(
                text=choice["delta"].get("content") or "",
                token_id=extra["token_ids"][0],
                logprob=extra["logprobs"][0],
                alternatives=[(text, prob) for text, prob in extra["alternatives"]],
                index=choice["index"],
                finish_reason=extra["finish_reason"],
            )
    finally:
        choices.close()  # closes the response: the server stops generating


def _event(choice: dict) -> runtime.StreamEvent:
    extra = choice["scriptorium"]
    ids = extra["token_ids"]
    logprobs = choice.get("logprobs") or {}
    return runtime.StreamEvent(
        text=choice["text"],
        token_id=ids[0] if ids else None,
        logprob=(logprobs.get("token_logprobs") or [None])[0],
        alternatives=[(text, prob) for text, prob in extra.get("alternatives", [])],
        index=choice["index"],
        finish_reason=extra["finish_reason"],
    )


class RemoteRegistry(ModelRegistry):
    """The backend's models, named by their server ids, each a `RemoteGenerator`."""

    def __init__(self, base_url: str, timeout: float = 300.0, api_key: str | None = None):
        super().__init__({})
        api_key = api_key or os.environ.get("SCRIPTORIUM_API_KEY")  # the server's --api-key
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        self.client = httpx.Client(
            base_url=base_url.rstrip("/") + "/", timeout=timeout, headers=headers
        )
        for model in self._json("models")["data"]:
            info = self._json(f"models/{model['id']}")
            self._manifests[model["id"]] = Manifest.from_json(info["manifest"])
            self.paths[model["id"]] = Path(model["id"])  # a name only: nothing is on disk here

    def _fetch(self, path: str) -> httpx.Response:
        try:
            response = self.client.get(path)
        except httpx.HTTPError as error:
            raise ConnectionError(f"the backend {self.client.base_url} failed: {error}") from error
        _raise_for(response)
        return response

    def _json(self, path: str) -> dict:
        return self._fetch(path).json()

    def _file(self, name: str, file: str) -> bytes:
        return self._fetch(f"models/{name}/files/{file}").content

    def card(self, name: str) -> str:
        listed = self.manifest(name).files
        if "README.md" not in listed:
            return self.no_card(name)
        return inline_images(
            self._file(name, "README.md").decode(),
            lambda target: self._file(name, target) if target in listed else None,
        )

    def _load(self, name: str) -> RemoteGenerator:
        tokenizer = Tokenizer.from_str(self._file(name, "tokenizer.json").decode())
        return RemoteGenerator(self.client, name, self.manifest(name), tokenizer)

    def _embedding_matrix(self, name: str, gen) -> np.ndarray:
        file = self.manifest(name).embeddings
        if not file:
            raise ValueError(f"model {name!r} has no embeddings.npy (manifest key `embeddings`)")
        matrix = np.load(io.BytesIO(self._file(name, file)), allow_pickle=False)
        if matrix.ndim != 2:
            raise ValueError(f"{file} must be a [vocab, hidden] matrix, got shape {matrix.shape}")
        return matrix.astype(np.float32)  # (V, D)
