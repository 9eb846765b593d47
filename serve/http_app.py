"""The FastAPI application the gateway's routes are declared on (serve/gateway.py): its OpenAPI
schema, which also declares the request bodies the routes read themselves (both routes'), and
its answer to unknown routes and methods, in OpenAI's error shape rather than FastAPI's
`{"detail": …}`; and the API key's check (`key_sent`, its 401).

The routes read their bodies themselves so that they can refuse oversized, non-JSON and
malformed bodies before parsing them; the schema still names each route's body (serve/routes.py,
`Route.body`), so `/openapi.json` and `/docs` show both. Nothing here handles a request's content.
"""

from __future__ import annotations

import hmac

from fastapi import FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from pydantic.json_schema import models_json_schema
from starlette.exceptions import HTTPException as StarletteHTTPException

from .errors import error_response
from .protocol import Body, DetokenizeBody, TokenizeBody, error_body
from .routes import ROUTES

# No built-in /docs and /openapi.json: the gateway serves both itself, behind its API key.
http = FastAPI(
    title="Scriptorium",
    description="OpenAI-compatible completions and chat completions over Scriptorium",
    docs_url=None,
    redoc_url=None,
    openapi_url=None,
)


# The request bodies the routes read themselves, declared in the schema all the same.
BODIES = (*(route.body for route in ROUTES), TokenizeBody, DetokenizeBody)


def request_body(body: type[Body]) -> dict:
    """The OpenAPI `requestBody` of a route whose handler reads its `body` itself."""
    schema = {"$ref": f"#/components/schemas/{body.__name__}"}
    return {"required": True, "content": {"application/json": {"schema": schema}}}


def _openapi() -> dict:
    """FastAPI's schema plus the request bodies the routes read themselves."""
    if http.openapi_schema is None:
        schema = get_openapi(
            title=http.title, version="1", description=http.description, routes=http.routes
        )
        _, bodies = models_json_schema(
            [(body, "validation") for body in BODIES],
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
        return error_response(error.status_code, message, code="not_found")
    return error_response(error.status_code, str(error.detail))


def key_sent(authorization: str | None, api_key: str | None) -> bool:
    """Whether a request may pass: the server has no key, or the request's Authorization
    header is `Bearer KEY` (compared in constant time)."""
    if api_key is None:
        return True
    scheme, _, token = (authorization or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.encode(), api_key.encode())


def unauthorized() -> JSONResponse:
    """The 401 of a request without the server's API key."""
    message = "a valid API key is required (`Authorization: Bearer KEY`)"
    return JSONResponse(
        error_body(message, code="invalid_api_key"),
        status_code=401,
        headers={"WWW-Authenticate": "Bearer"},
    )
