"""`scriptorium serve` (its default; `--no-ray` forces it): the same gateway and replicas in this
one process, without Ray.

On one machine Ray's own processes (GCS, raylet, Serve's controller and HTTP proxy, the gateway's
actor, one worker per replica) cost about 1 GB of memory and, on 2 cores, CPU time beside every
token: each token crosses from the replica to the gateway and from the gateway to the proxy
(docs/SCALING.md, "One process"). Here nothing crosses a process:

- each model's `ModelServer` (serve/replica.py) is built in this process, one per model, and
  `LocalHandle` gives the gateway the part of Ray's `DeploymentHandle` it calls (`m.remote(…)`,
  `options(stream=True)`, a stream's `cancel()`);
- the gateway's routes (serve/gateway.py) run on uvicorn, with each route's `self` (a FastAPI
  dependency that Serve answers with its replica's instance) answered by our `Gateway`.

What a client sees is the same: the routes, limits, API key, errors, `/metrics` and texts.
What it cannot do is Ray's: several replicas of a model, autoscaling, other machines.
"""

from __future__ import annotations

import asyncio
import inspect
import signal
from collections.abc import AsyncIterator, Callable

from runtime.request_caps import SERVE_LIMITS, ServeLimits

from .deployments import ModelSpec
from .gateway import Gateway, http
from .replica import ModelServer

STOP_WAIT_S = 5  # seconds a stop waits for open requests and connections before closing them


class LocalStream:
    """A replica's stream as the gateway reads a Ray streaming response: an async iterator
    with `cancel()`, which closes it (the replica then stops the generation, as Serve's
    cancellation would)."""

    def __init__(self, items: AsyncIterator):
        self._items = items

    def __aiter__(self) -> LocalStream:
        return self

    async def __anext__(self):
        return await self._items.__anext__()

    def cancel(self) -> None:
        asyncio.get_running_loop().create_task(self._items.aclose())


class LocalHandle:
    """A `ModelServer` in this process, called as the gateway calls a deployment's handle:
    `handle.complete.remote(request, client)` is `await server.complete(request, client)`, and
    `handle.options(stream=True).stream.remote(…)` a `LocalStream` of `server.stream(…)`."""

    def __init__(self, server: ModelServer, streaming: bool = False):
        self.server, self.streaming = server, streaming

    def options(self, stream: bool = False) -> LocalHandle:
        return LocalHandle(self.server, streaming=stream)

    def __getattr__(self, name: str):
        method = getattr(self.server, name)
        return _Remote(method, self.streaming)


class _Remote:
    def __init__(self, method: Callable, streaming: bool):
        self.method, self.streaming = method, streaming

    def remote(self, *args):
        if self.streaming:
            return LocalStream(self.method(*args))
        if inspect.iscoroutinefunction(self.method):
            return self.method(*args)
        return _ready(self.method(*args))


async def _ready(value):
    return value


def build_gateway(
    specs: list[ModelSpec], limits: ServeLimits = SERVE_LIMITS, api_key: str | None = None
) -> Gateway:
    """A `ModelServer` per spec (each loads its bundle now) behind a `Gateway`, and the
    gateway's routes answered by it: serve `http` (serve/http_app.py) with any ASGI server.
    `http` is the module's one app, so a process serves one such gateway at a time: the routes
    answer with the last one built."""
    if not specs:
        raise ValueError("`models` must name at least one model bundle, got none")
    for spec in specs:
        if spec.replicas != 1 or spec.autoscaling is not None:
            raise ValueError(
                "`--replicas` must be 1 and `--autoscale` unset without Ray, got "
                f"{spec.replicas} replicas, autoscale {spec.autoscaling} for {spec.model_id!r}"
            )
    handles = {
        spec.model_id: LocalHandle(
            ModelServer(spec.path, spec.threads, spec.concurrency, spec.loader, spec.kv_budget)
        )
        for spec in specs
    }
    gateway = Gateway(handles, {spec.model_id: spec.path for spec in specs}, limits, api_key)
    http.dependency_overrides[_instance_dependency()] = lambda: gateway
    return gateway


def _instance_dependency() -> Callable:
    """The dependency that Serve's ingress gave every route's `self` (serve/gateway.py's
    `GatewayIngress` rewrites each route method's signature): under Serve, the serving
    replica's instance."""
    own = inspect.signature(Gateway.health).parameters["self"]
    if own.default is inspect.Parameter.empty:
        raise RuntimeError(
            "the gateway's routes take no `self` dependency: is serve.ingress applied?"
        )
    return own.default.dependency


def run(
    specs: list[ModelSpec],
    host: str = "127.0.0.1",
    port: int = 8000,
    limits: ServeLimits = SERVE_LIMITS,
    api_key: str | None = None,
    ready: Callable[[], None] | None = None,
) -> None:
    """Load every model, then serve `/v1` on host:port until SIGINT or SIGTERM (uvicorn's
    handlers); `ready()` is called once the port listens."""
    import uvicorn

    build_gateway(specs, limits, api_key)
    # uvicorn stops gracefully on SIGINT or SIGTERM, then raises the signal again for the
    # handlers it found: these let the command end with status 0, as it does on Ray
    for stop_signal in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop_signal, lambda number, frame: None)
    config = uvicorn.Config(
        http,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=STOP_WAIT_S,
    )
    server = uvicorn.Server(config)

    async def serve() -> None:
        task = asyncio.create_task(server.serve())
        while not server.started and not task.done():
            await asyncio.sleep(0.05)
        if server.started and ready is not None:
            ready()
        await task

    asyncio.run(serve())
