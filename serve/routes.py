"""The two generation routes, `/v1/completions` and `/v1/chat/completions`, as one `Route` each:
what differs between them, so that the gateway (serve/gateway.py) and the replica
(serve/replica.py) run both through one template.

The template: the gateway parses the body (`parse`, with the server's limits), checks the model
(and, for `needs_chat_template`, that it has one), then asks the model's replica to `complete`
or `stream` the request; the replica runs the route's work on its generator in its thread pool
and hands back plain dicts (`{"choices", "usage"}`, or per item `{"choice"}` … `{"usage"}`, or
`{"error": message}` for input the runtime refused); the gateway wraps them in the route's
`response` or `chunk` objects and names refused parameters in the route's words (`names`).
The routes' own rules live in serve/api.py (completions) and serve/chat.py (chat); their bodies
in serve/protocol.py. Nothing here runs Ray or HTTP.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

from . import api, chat, protocol


@dataclass(frozen=True)
class Route:
    path: str  # the route under the server's root
    body: type[protocol.Body]  # the request body, as the OpenAPI schema declares it
    response_model: type  # the non-streamed answer, as the OpenAPI schema declares it
    parse: Callable  # (raw body, ServeLimits) -> the request, or RequestError
    complete: Callable  # (generator, request) -> {"choices", "usage"}; ValueError if refused
    stream: Callable  # (generator, request) -> iterator of {"choice"} … {"usage"}
    response: Callable  # (id, model, result) -> the answer's object
    chunk: Callable  # (id, model, created, choices, usage=None) -> one server-sent event's object
    id_prefix: str  # of the answer's id
    names: dict  # the runtime's names of the API's fields, for the runtime's messages
    needs_chat_template: bool  # whether the model must have a chat template

    def new_id(self) -> str:
        """A fresh id for one answer ("cmpl-…", "chatcmpl-…")."""
        return f"{self.id_prefix}{uuid.uuid4().hex}"

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
    parse=api.parse_completion,
    complete=api.complete,
    stream=api.stream,
    response=api.completion_response,
    chunk=api.stream_chunk,
    id_prefix="cmpl-",
    names=api.RUNTIME_NAMES,
    needs_chat_template=False,
)
CHAT = Route(
    path="/v1/chat/completions",
    body=protocol.ChatBody,
    response_model=protocol.ChatCompletionResponse,
    parse=chat.parse_chat,
    complete=chat.complete,
    stream=chat.stream,
    response=chat.chat_response,
    chunk=chat.chunk,
    id_prefix="chatcmpl-",
    names=chat.RUNTIME_NAMES,
    needs_chat_template=True,
)
ROUTES = (COMPLETIONS, CHAT)


def route_of(request) -> Route:
    """The route a parsed request came by (what the replica runs it as)."""
    return CHAT if isinstance(request, chat.ChatRequest) else COMPLETIONS
