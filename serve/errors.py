"""Every way a request fails, as OpenAI's error response (`{"error": {message, type, param,
code}}`) with its HTTP status, and those statuses as the OpenAPI schema declares them.

- `failure(error, model, route)`: an exception from parsing or from a replica. A `RequestError`
  keeps its own status (400 bad field, 401, 404 unknown model, 413, 415); a missing file is a
  404; another `ValueError` is input the runtime refused, a 400 naming the parameter in the
  route's words (`refused`); a replica that died or is overloaded (`UNAVAILABLE`) is a 503 that
  says to retry; anything else is a 500, a bug rather than bad input.
- `error_response(status, message, …)`: one such answer.

Which requests are retried on `UNAVAILABLE` is the gateway's business (serve/gateway.py); what
each body accepts is serve/protocol.py's.
"""

from __future__ import annotations

from fastapi.responses import JSONResponse
from ray.exceptions import ActorUnavailableError, RayActorError, RayTaskError
from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError

from .protocol import ErrorResponse, RequestError, error_body, shown
from .routes import COMPLETIONS, Route

# A replica that stopped, or a deployment that cannot take the request now.
UNAVAILABLE = (RayActorError, ActorUnavailableError, DeploymentUnavailableError, BackPressureError)

ERROR_RESPONSES = {
    status: {"model": ErrorResponse, "description": description}
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


def error_response(
    status: int, message: str, kind="invalid_request_error", param=None, code=None
) -> JSONResponse:
    return JSONResponse(error_body(message, kind, param, code), status_code=status)


def refused(message: str, route: Route = COMPLETIONS) -> JSONResponse:
    """A 400 for input the runtime refused, naming the parameter its message is about."""
    return error_response(400, route.api_message(message), param=route.param_named_in(message))


def failure(error: BaseException, model: str | None, route: Route = COMPLETIONS) -> JSONResponse:
    """An exception from a replica (or from parsing) as an OpenAI error response."""
    if isinstance(error, RayTaskError) and error.cause:  # the replica's own exception
        error = error.cause
    if isinstance(error, RequestError):
        return error_response(error.status, str(error), error.kind, error.param, error.code)
    if isinstance(error, FileNotFoundError):
        return error_response(404, shown(str(error)), code="not_found")
    if isinstance(error, ValueError):
        return refused(str(error), route)
    if isinstance(error, UNAVAILABLE):
        message = (
            f"the replica of model {model!r} serving this request stopped or is overloaded "
            f"({type(error).__name__}); retry the request"
        )
        return error_response(503, message, "server_error", code="replica_unavailable")
    message = f"the server failed: {type(error).__name__}: {shown(str(error))}"
    return error_response(500, message, "server_error", code="internal_error")
