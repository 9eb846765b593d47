"""The two generation routes, `/v1/completions` and `/v1/chat/completions`, as one `Route` each:
what differs between them, so that the gateway (serve/gateway.py) and the replica
(serve/replica.py) run both through one template.

The template: the gateway parses the body (`parse`, with the server's limits), checks the model
(and, for `needs_chat_template`, that it has one), then asks the model's replica to `complete`
or `stream` the request; the replica runs the route's work on its generator in its thread pool
and hands back the answer's parts as serve/protocol.py's models (`{"choices", "usage"}`, or per
item `{"choice"}` … `{"usage"}`), or `{"error": message}` for input the runtime refused; the
gateway wraps them in the route's `response_model` or `chunk_model` (one envelope, `_envelope`,
for both routes) and names refused parameters in the route's words (`names`). The routes' own
rules live in serve/api.py (completions) and serve/chat.py (chat); their bodies and answers in
serve/protocol.py. Nothing here runs Ray or HTTP.
"""

from __future__ import annotations

import functools
import time
import typing
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from . import api, chat, protocol


@dataclass(frozen=True)
class Route:
    path: str  # the route under the server's root
    body: type[protocol.Body]  # the request body, as the OpenAPI schema declares it
    response_model: type[protocol.Answer]  # the non-streamed answer (in the OpenAPI schema)
    chunk_model: type[protocol.Answer]  # one server-sent event of a streamed answer
    parse: Callable  # (raw body, ServeLimits) -> the request, or RequestError
    complete: Callable  # (generator, request) -> {"choices", "usage"}; ValueError if refused
    stream: Callable  # (generator, request) -> iterator of {"choice"} … {"usage"}
    id_prefix: str  # of the answer's id
    names: dict  # the runtime's names of the API's fields, for the runtime's messages
    needs_chat_template: bool  # whether the model must have a chat template

    def new_id(self) -> str:
        """A fresh id for one answer ("cmpl-…", "chatcmpl-…")."""
        return f"{self.id_prefix}{uuid.uuid4().hex}"

    def response(self, request_id: str, model: str, result: dict) -> dict:
        """The answer to send for a replica's result ({"choices", "usage"})."""
        created = int(time.time())
        choices, usage = result["choices"], result["usage"]
        return _envelope(self.response_model, request_id, model, created, choices, usage)

    def chunk(self, request_id: str, model: str, created: int, choices: list, usage=None) -> dict:
        """One server-sent event's object: a token's choices, or (last) the usage alone."""
        return _envelope(self.chunk_model, request_id, model, created, choices, usage)

    def api_message(self, message: str) -> str:
        """A runtime message in this route's words."""
        return api.api_message(message, self.names)

    def param_named_in(self, message: str) -> str | None:
        """The request parameter a runtime message is about, in this route's words."""
        return api.param_named_in(message, self.names)


COMPLETIONS = Route(
    path="/v1/completions",
    body=protocol.CompletionBody,
    response_model=protocol.CompletionResponse,
    chunk_model=protocol.CompletionResponse,  # OpenAI streams the same object, a token each
    parse=api.parse_completion,
    complete=api.complete,
    stream=api.stream,
    id_prefix="cmpl-",
    names=api.RUNTIME_NAMES,
    needs_chat_template=False,
)
CHAT = Route(
    path="/v1/chat/completions",
    body=protocol.ChatBody,
    response_model=protocol.ChatCompletionResponse,
    chunk_model=protocol.ChatCompletionChunk,
    parse=chat.parse_chat,
    complete=chat.complete,
    stream=chat.stream,
    id_prefix="chatcmpl-",
    names=chat.RUNTIME_NAMES,
    needs_chat_template=True,
)
ROUTES = (COMPLETIONS, CHAT)


def _envelope(kind: type[protocol.Answer], request_id, model, created, choices, usage) -> dict:
    """`kind`'s object around `choices` (protocol models), as sent: its fixed fields
    (`_fixed_fields`) and `usage` when given."""
    fields = dict(id=request_id, created=created, model=model, choices=choices)
    if usage is not None:
        fields["usage"] = usage
    return kind(**fields, **_fixed_fields(kind)).answer()


@functools.cache
def _fixed_fields(kind: type[protocol.Answer]) -> dict:
    """The fields of `kind` every answer writes with one value: its `object` name (the one its
    declaration allows) and, for chat's, a null `system_fingerprint`. Read once per model, not
    per streamed chunk."""
    (name,) = typing.get_args(kind.model_fields["object"].annotation)
    fixed = {"object": name}
    if "system_fingerprint" in kind.model_fields:
        fixed["system_fingerprint"] = None
    return fixed


def route_of(request) -> Route:
    """The route a parsed request came by (what the replica runs it as)."""
    return CHAT if isinstance(request, chat.ChatRequest) else COMPLETIONS
