"""One replica of a model's deployment: `ModelServer`, a loaded generator that answers both
routes' requests with one template.

The replica loads its bundle once (`loader(path, threads=T)`, `runtime.load` by default); with
`kv_budget` (bytes, `--kv-budget`), a batching generator's engine holds at most that much KV
cache per batch instead of runtime/engine.py's default. A request, completions or chat, is
answered by `complete` (one result) or `stream` (its items in lists of those ready together),
each running its route's work (serve/routes.py: serve/api.py's or serve/chat.py's `complete` /
`stream`) in the replica's pool of `concurrency` threads: later requests wait there, in arrival
order. A request that is cancelled, streamed or not (the client disconnected, so Serve cancels
the request and its child requests), sets its thread's cancel event
(`runtime.cancel.cancel_when`): the engine drops its rows at its next step and the thread ends
(a stream's thread also closes the runtime's stream); one cancelled while it waits for a thread
never starts. Input the runtime refuses (its `ValueError`) comes back as a value, `{"error":
message}`, not as an exception: bad input is not a replica failure for Serve to log.

How many replicas there are and what each reserves is serve/deployments.py's; HTTP is the
gateway's (serve/gateway.py).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import runtime
from runtime import template_pool
from runtime.cancel import Cancelled, cancel_when
from runtime.engine import Engine
from runtime.text_generator import ServedGenerator

from .ray_guard import replica_grpc_on_loopback
from .routes import route_of


class ModelServer:
    """One replica: a loaded generator, answering `complete` and `stream` for one model."""

    def __init__(
        self,
        path: str,
        threads: int,
        concurrency: int,
        loader: Callable[..., ServedGenerator] = runtime.load,
        kv_budget: int | None = None,
    ):
        replica_grpc_on_loopback()
        self.generator: ServedGenerator = loader(path, threads=threads)
        if kv_budget is not None and getattr(self.generator, "engine", None) is not None:
            # before any request: the engine's loop has not started, so a new one replaces it
            self.generator.engine = Engine(self.generator, max_cache_bytes=kv_budget)
        # Requests wait here, in arrival order, rather than in Serve's router, which retries a
        # full replica with backoff (up to 1 s a try) and so would add seconds under load.
        self.pool = ThreadPoolExecutor(concurrency, thread_name_prefix="generate")
        self._lock = threading.Lock()
        self.running = 0  # requests generating now, streamed or not
        self.cancelled = 0  # requests cancelled before they finished, since the replica started

    def stats(self) -> dict:
        """Requests running and cancelled, the engine's batched steps so far, the fraction of
        its KV-cache budget in use now, and its prefix cache's hits, the prompt positions they
        saved prefilling and the prompt positions looked up (0 without an engine or a prefix
        cache): what tests, operators and `/metrics` observe of a replica."""
        engine = getattr(self.generator, "engine", None)
        prefixes = engine.prefix_cache if engine is not None else None
        with self._lock:
            return {
                "running": self.running,
                "cancelled": self.cancelled,
                "steps": engine.steps if engine is not None else 0,
                "kv_cache_usage": (
                    engine.cache_positions / engine.max_cache_positions if engine else 0.0
                ),
                "kv_budget": engine.max_cache_bytes if engine is not None else 0,
                "prefix_hits": prefixes.hits if prefixes is not None else 0,
                "reused_positions": prefixes.reused_positions if prefixes is not None else 0,
                "queried_positions": prefixes.queried_positions if prefixes is not None else 0,
            }

    async def complete(self, request, client: str = "") -> dict:
        """The route's result for `request` ({"choices", "usage"}), or {"error": message} for
        a setting or prompt the runtime refuses; its templates are `client`'s in the template
        pool (runtime/template_pool.py)."""
        return await self._run(self._complete, request, client=client)

    def _complete(self, request) -> dict:
        try:
            return route_of(request).complete(self.generator, request)
        except ValueError as error:
            return {"error": str(error)}

    async def stream(self, request, client: str = "") -> AsyncIterator[list[dict]]:
        """The route's items for `request` ({"choice": …} …, then {"usage": …}), or
        {"error": message} (and nothing after it) when the runtime refuses a setting or
        prompt; its templates are `client`'s in the template pool. Items come in lists, each
        of the items ready when the previous list was taken: every list is one message to the
        gateway, so a gateway that falls behind catches up in fewer of them."""
        items = route_of(request).stream(self.generator, request)
        try:
            async for ready in self._in_thread(items, client):
                yield ready
        except ValueError as error:
            yield [{"error": str(error)}]

    async def _run(self, work: Callable, *args, client: str = ""):
        """`work(*args)` in the pool as `client`'s, inside a cancel scope that is set when this
        request is cancelled (its client has gone): the generation then stops at its next step."""
        stop = threading.Event()

        def scoped():
            with cancel_when(stop), template_pool.client(client):
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

    async def _in_thread(self, items: Iterator, client: str = "") -> AsyncIterator[list]:
        """Run a (blocking) iterator of the route's items in the pool as `client`'s, yielding
        them in lists of those ready together; stop and close it when cancelled."""
        loop, queue, stop = asyncio.get_running_loop(), asyncio.Queue(), threading.Event()
        done = object()

        def produce():
            try:
                # beam search, which streams only at its end, stops too
                with cancel_when(stop), template_pool.client(client):
                    if stop.is_set():  # cancelled while waiting for a free slot
                        return
                    for item in items:
                        if stop.is_set():
                            break
                        loop.call_soon_threadsafe(queue.put_nowait, item)
            except Cancelled:
                pass
            except Exception as error:  # raised again in the replica's request, below
                loop.call_soon_threadsafe(queue.put_nowait, error)
            finally:
                items.close()
                loop.call_soon_threadsafe(queue.put_nowait, done)

        with self._lock:
            self.running += 1
        self.pool.submit(produce)
        cancelled = True  # until the stream ends by itself or fails
        try:
            finished = False
            while not finished:
                ready = [await queue.get()]
                while not queue.empty():
                    ready.append(queue.get_nowait())
                if finished := ready[-1] is done:
                    ready.pop()
                # a failure is the producer's last item: what came before it still goes out
                failure = ready.pop() if ready and isinstance(ready[-1], Exception) else None
                if ready:
                    yield ready
                if failure is not None:
                    cancelled = False
                    raise failure
            cancelled = False
        finally:
            stop.set()
            with self._lock:
                self.running -= 1
                self.cancelled += cancelled
