"""What Ray's own servers expose under `scriptorium serve`: its proxy's routes behind the API key,
and each Serve replica's gRPC port on 127.0.0.1 on a local cluster.

- **Ray's proxy routes.** Serve's HTTP proxy answers `/-/routes` itself, before the gateway sees
  the request. Ray's setting for the proxy, `RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH` (an import
  path whose function returns Starlette middlewares for every proxy), names `proxy_middlewares`:
  with a key, every `/-/` route but Ray's health check (`/-/healthz`) needs `Bearer KEY`. The
  proxy reads the key's SHA-256 from `KEY_DIGEST_VARIABLE`, so the key itself is in no Ray
  process's environment.
- **Each replica's gRPC port.** Ray 2.60 starts a gRPC server in every replica for calls between
  deployments and binds it to `[::]:0`, hard-coded (ray/serve/_private/replica.py,
  `Replica._on_initialized`, through `add_port_to_grpc_server`); Ray has no setting for its
  address. On a local cluster (`REPLICA_GRPC_VARIABLE` set, by serve/cli.py's `connect`),
  `replica_grpc_on_loopback`, which each replica calls when it starts (before Ray starts that
  server), binds it to 127.0.0.1 instead: it wraps that function in Ray's replica module and
  rewrites exactly that address. It first checks that Ray's code still binds the port that way
  and raises (the replica then fails to start, and `scriptorium serve` with it) when it does not,
  so a Ray upgrade cannot silently open the port again. On a cluster joined with `--address` the
  port stays Ray's: other nodes must reach it.

`environment(api_key, local)` is what serve/cli.py puts in the cluster's runtime environment. On a
cluster joined with `--address`, the proxies take the key only if this process starts Serve (a
Serve instance already running keeps its proxies).
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import json
import os

PROXY_CALLBACK_VARIABLE = "RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH"  # Ray's setting
KEY_DIGEST_VARIABLE = "SCRIPTORIUM_API_KEY_SHA256"
REPLICA_GRPC_VARIABLE = "SCRIPTORIUM_REPLICA_GRPC_LOOPBACK"
HEALTH_CHECK = "/-/healthz"  # Ray's, open as the gateway's /health is
# How Ray 2.60 binds a replica's inter-deployment gRPC server, and the address used instead.
RAY_BINDS = 'add_port_to_grpc_server(self._server, "[::]:0")'
RAY_ADDRESS, LOOPBACK_ADDRESS = "[::]:0", "127.0.0.1:0"


def environment(api_key: str | None, local: bool) -> dict[str, str]:
    """Environment variables for every Ray process of the application: the proxy's key check
    (with a key) and, on a `local` cluster, the replicas' loopback gRPC."""
    env = {}
    if api_key is not None:
        env[PROXY_CALLBACK_VARIABLE] = f"{__name__}:proxy_middlewares"
        env[KEY_DIGEST_VARIABLE] = _digest(api_key)
    if local:
        env[REPLICA_GRPC_VARIABLE] = "1"
    return env


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


# ---- the proxy's routes -------------------------------------------------------------------------


class ProxyRoutesKey:
    """ASGI middleware in Ray's proxy: a 401 (OpenAI's error shape, as the gateway's) for a `/-/`
    route other than `HEALTH_CHECK` without `Authorization: Bearer KEY`; every other request
    passes on to the gateway, which checks the key itself."""

    def __init__(self, app, digest: str):
        self.app, self.digest = app, digest

    async def __call__(self, scope, receive, send):
        path = scope.get("path", "")
        if scope["type"] != "http" or not path.startswith("/-/") or path == HEALTH_CHECK:
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        scheme, _, token = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(_digest(token), self.digest):
            return await self.app(scope, receive, send)
        message = "a valid API key is required (`Authorization: Bearer KEY`)"
        error = {"message": message, "type": "invalid_request_error", "param": None}
        content = json.dumps({"error": error | {"code": "invalid_api_key"}}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(content)).encode()),
                    (b"www-authenticate", b"Bearer"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": content})


def proxy_middlewares() -> list:
    """Ray's proxy callback (`PROXY_CALLBACK_VARIABLE`): the key check on Ray's `/-/` routes."""
    from starlette.middleware import Middleware

    digest = os.environ.get(KEY_DIGEST_VARIABLE)
    if not digest:
        raise RuntimeError(f"{PROXY_CALLBACK_VARIABLE} is set but {KEY_DIGEST_VARIABLE} is not")
    return [Middleware(ProxyRoutesKey, digest=digest)]


# ---- each replica's gRPC port ----------------------------------------------------------------


def replica_grpc_on_loopback() -> None:
    """In a replica of a local cluster (`REPLICA_GRPC_VARIABLE`), before Ray starts the replica's
    gRPC server: make Ray bind it to 127.0.0.1; `RuntimeError` when this Ray binds it some other
    way (see the module docstring). Elsewhere, nothing."""
    if os.environ.get(REPLICA_GRPC_VARIABLE) != "1":
        return
    import ray
    from ray.serve._private import replica as ray_replica

    bind = getattr(ray_replica, "add_port_to_grpc_server", None)
    starts = getattr(getattr(ray_replica, "Replica", None), "_on_initialized", None)
    if bind is None or starts is None or RAY_BINDS not in inspect.getsource(starts):
        raise RuntimeError(
            f"Ray {ray.__version__} does not bind a Serve replica's gRPC server as 2.60 does "
            f"(`{RAY_BINDS}` in `Replica._on_initialized`), so scriptorium serve cannot keep it "
            "on 127.0.0.1; see serve/ray_guard.py"
        )
    if getattr(bind, "on_loopback", False):  # a second deployment in this process
        return

    def bind_on_loopback(server, address):
        return bind(server, LOOPBACK_ADDRESS if address == RAY_ADDRESS else address)

    bind_on_loopback.on_loopback = True
    ray_replica.add_port_to_grpc_server = bind_on_loopback
