"""The FastAPI application the gateway's routes are declared on (serve/gateway.py): its OpenAPI
schema, which also declares the request bodies the routes read themselves (both routes'), and
its answer to unknown routes and methods, in OpenAI's error shape rather than FastAPI's
`{"detail": …}`.

The routes read their bodies themselves so that they can refuse oversized, non-JSON and
malformed bodies before parsing them; the schema still names each route's body (serve/routes.py,
`Route.body`), so `/openapi.json` and `/docs` show both. Nothing here handles a request's content.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from pydantic.json_schema import models_json_schema
from starlette.exceptions import HTTPException as StarletteHTTPException

from .errors import error_response
from .routes import ROUTES, Route

http = FastAPI(
    title="Scriptorium",
    description="OpenAI-compatible completions and chat completions over Scriptorium",
)


def request_body(route: Route) -> dict:
    """The OpenAPI `requestBody` of a route whose handler reads its body itself."""
    schema = {"$ref": f"#/components/schemas/{route.body.__name__}"}
    return {"required": True, "content": {"application/json": {"schema": schema}}}


def _openapi() -> dict:
    """FastAPI's schema plus the request bodies the routes read themselves."""
    if http.openapi_schema is None:
        schema = get_openapi(
            title=http.title, version="1", description=http.description, routes=http.routes
        )
        _, bodies = models_json_schema(
            [(route.body, "validation") for route in ROUTES],
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
