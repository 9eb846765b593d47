"""The worker processes that run untrusted work (chat templates, JSON Schemas), kept warm and
killed at the deadline, with slow requests held to a lane of their own.

runtime/chat.py hands every compile and render of an untrusted template to `pool().ask`, which
sends it to a worker process running runtime/template_sandbox.py; runtime/structured.py hands
every JSON Schema to `pool(SCHEMA_SANDBOX).ask`, a worker running runtime/schema_sandbox.py.
Each worker is started by its file's path, so it imports only what that file does (the standard
library and jinja2, or llguidance), nothing of ours. Waiting is on a pipe, so the work never holds
this process's interpreter lock: other requests carry on meanwhile. A worker that has not replied
by the deadline is killed, and the request refused; the clock starts when the request is sent to
a worker that has started (starting one is not counted).

Fair shares: a request starts in the fast lane (at most `MOST` at once). One still running after
`SLOW_S` seconds is slow: it leaves the fast lane at once and goes on in the slow lane, where at
most `SLOW_MOST` run at once and the others' workers are paused (SIGSTOP: no CPU, their clocks
stopped). So slow requests, however many, take at most `SLOW_MOST` workers' CPU, and a spare
worker is started for the fast lane meanwhile. Paused workers hold their memory (a worker's cap
at most) until their turn.

Both lanes are shared among clients: a request is its client's (`client(name)` around the call,
as serve/ does with a client's address; the app names its Gradio session with `name_clients_by`;
requests named by neither are one client's). A fast-lane room goes to the waiting request of the
client with the fewest fast requests running, so one client's queue does not stand before
another's request. The slow lane is planned again whenever a request enters or leaves it and
every `SLICE_S` while its requests run: its rooms are given one at a time to the client that holds
the fewest, then to the one that has run there the least, each client's oldest request first,
pausing a running worker to make room. So a client with many slow requests holds at most its
share of the slow lane (all of it while it is alone there), and another client's slow request
runs at once beside them: a normal request waits about `SLOW_S` for each `MOST` of its own
client's requests ahead of it (plus starting a worker), not for another client's queue, nor for
each whole budget.

Workers are reused: at most `WARM` idle ones are kept, so the normal path is one round trip on a
pipe. A worker that dies, answers out of protocol or runs out of memory is replaced by a fresh
one. After a fork, the child starts workers of its own. POSIX only (it waits on pipes with
`select`). It does not know what a template or a schema is: the sandbox files do the work,
runtime/chat.py and runtime/structured.py check and word the requests.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import contextvars
import itertools
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

SANDBOX = Path(__file__).with_name("template_sandbox.py")  # chat templates
SCHEMA_SANDBOX = Path(__file__).with_name("schema_sandbox.py")  # JSON Schemas
WARM = 2  # idle workers kept for the next requests, per pool
MOST = 4  # fast requests running at once; a request past that waits for one
SLOW_S = 0.25  # a request still running after this many seconds is slow
SLOW_MOST = 2  # slow requests running at once, whoever sent them
START_S = 60.0  # longest a worker may take to start (importing jinja2), outside any budget
REPLY_BYTES = 16 * 2**20  # longest reply read (an output of MAX_CHARS characters, JSON-escaped)
_BOOT = (  # loads the sandbox by its path, so that runtime/__init__ (onnxruntime) is not imported
    "import importlib.util, sys\n"
    "spec = importlib.util.spec_from_file_location('scriptorium_template_sandbox', sys.argv[1])\n"
    "module = importlib.util.module_from_spec(spec)\n"
    "sys.modules[spec.name] = module\n"
    "spec.loader.exec_module(module)\n"
    "module.serve()\n"
)


class WorkerLost(Exception):
    """The worker ended, or broke the protocol, before its reply."""


class _Worker:
    """One sandbox process and its pipes; used by one request at a time."""

    def __init__(self, program: Path):
        self.partial = bytearray()  # the reply read so far
        self.process = subprocess.Popen(
            [sys.executable, "-c", _BOOT, str(program)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "MALLOC_ARENA_MAX": "1"},  # one arena under the memory cap
            start_new_session=True,  # a Ctrl-C in the terminal is for the app, not its workers
        )
        try:
            ready = self.receive(time.monotonic() + START_S)
        except WorkerLost:
            ready = None
        if ready != {"ready": True}:
            self.close(kill=True)
            raise WorkerLost(f"it did not start within {START_S:g} s")

    def alive(self) -> bool:
        return self.process.poll() is None

    def pause(self) -> None:
        """Stop the process where it is (SIGSTOP): it takes no CPU while its request queues."""
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """Let a paused process go on (SIGCONT)."""
        self.process.send_signal(signal.SIGCONT)

    def send(self, request: bytes) -> bool:
        """Whether `request` was written (False when the worker had ended)."""
        try:
            self.process.stdin.write(request)
            self.process.stdin.flush()
        except OSError:  # BrokenPipeError
            return False
        return True

    def receive(self, deadline: float) -> dict | None:
        """The reply, or None when the deadline passes first (what had come of it is kept for
        the next call: a request that moves to the slow lane reads on)."""
        fd = self.process.stdout.fileno()
        while not self.partial.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise WorkerLost(f"it ended (exit status {self.process.wait()})")
            self.partial += chunk
            if len(self.partial) > REPLY_BYTES:
                raise WorkerLost(f"its reply passed {REPLY_BYTES:,} bytes")
        reply, self.partial = self.partial, bytearray()
        try:
            return json.loads(reply)
        except ValueError:
            raise WorkerLost("its reply was not JSON") from None

    def forget(self) -> None:
        """Close this process's ends of the pipes, leaving the worker to its owner (a fork)."""
        self.process.stdin.close()
        self.process.stdout.close()

    def close(self, kill: bool = False) -> None:
        if kill:
            self.process.kill()
        try:
            self.process.stdin.close()  # an idle worker ends when its input does
        except OSError:
            pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process.stdout.close()


FAST, SLOW = "fast", "slow"  # the lanes (see the module docstring)
SLICE_S = 0.1  # a slow request's wait for its reply is cut into slices: the lane is re-planned
_CLIENT: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "template_pool_client", default=None
)
_default_client: Callable[[], str] = str  # names the client outside any `client` block: ""


def name_clients_by(resolver: Callable[[], str]) -> None:
    """Name the client of a request asked outside any `client` block by `resolver()` (the app:
    the Gradio session of the event being run, ui/visitor.py)."""
    global _default_client
    _default_client = resolver


@contextlib.contextmanager
def client(name: str) -> Iterator[None]:
    """Requests asked inside this block (in this thread or task, and in threads started with a
    copy of its context, as `asyncio.to_thread` does) are `name`'s: the lanes share their room
    among clients (see the module docstring). Outside any block, `name_clients_by`'s resolver
    names the client (by default, all such requests are one client's, "")."""
    token = _CLIENT.set(name)
    try:
        yield
    finally:
        _CLIENT.reset(token)


def steps_as(name: str, items: Iterator) -> Iterator:
    """`items`, each step taken inside `client(name)`: for a generator whose steps may run in
    different threads or contexts (a web framework's streaming handler), where one `client`
    block could not span its yields."""
    while True:
        with client(name):
            try:
                item = next(items)
            except StopIteration:
                return
        yield item


class _Ticket:
    """One request's place in the pool: its client, when it arrived, its worker and, in the slow
    lane, whether its worker runs (or is paused) and the seconds it ran there."""

    def __init__(self, client_name: str, arrived: int):
        self.client, self.arrived = client_name, arrived
        self.worker: _Worker | None = None
        self.running = True  # its worker is not paused
        self.ran = 0.0  # seconds run in the slow lane, up to `since`
        self.since = 0.0  # when `ran` was last brought up to date (while running)


class Pool:
    """Warm workers of one sandbox program for this process (see the module docstring)."""

    def __init__(self, program: Path):
        self.program = program
        self.idle: list[_Worker] = []
        self.changed = threading.Condition()
        self.arrivals = itertools.count()
        self.waiting: list[_Ticket] = []  # fast-lane requests waiting for room, oldest first
        self.fast: list[_Ticket] = []  # fast-lane requests running
        self.slow: list[_Ticket] = []  # slow-lane requests, running or paused, oldest first
        self.service: dict[str, float] = {}  # slow-lane seconds of each client with requests there
        atexit.register(self.close)

    # ---- the fast lane ----

    def _next_waiting(self) -> _Ticket:
        """The waiting request to run next: of the client with the fewest fast requests running,
        the oldest (so one client's many requests queue behind each other, not before others)."""
        running = collections.Counter(t.client for t in self.fast)
        return min(self.waiting, key=lambda t: (running[t.client], t.arrived))

    def _take(self, ticket: _Ticket) -> _Worker:
        """A worker for `ticket` once the fast lane has room for it (see `_next_waiting`)."""
        with self.changed:
            self.waiting.append(ticket)
            try:
                while len(self.fast) >= MOST or self._next_waiting() is not ticket:
                    self.changed.wait()
            finally:  # admitted, or interrupted: never left in the queue for others to wait on
                self.waiting.remove(ticket)
                self.changed.notify_all()
            self.fast.append(ticket)
            while self.idle:
                worker = self.idle.pop()
                if worker.alive():
                    return worker
                worker.close()
        try:
            return _Worker(self.program)
        except BaseException:
            self._give(None, ticket)
            raise

    def _give(self, worker: _Worker | None, ticket: _Ticket) -> None:
        """`ticket` is done: its room is free, and `worker` (when alive) idles for the next."""
        extra = None
        with self.changed:
            if ticket in self.fast:
                self.fast.remove(ticket)
            elif ticket in self.slow:
                self._plan()  # bring the clients' service up to date first
                self.slow.remove(ticket)
                if not any(t.client == ticket.client for t in self.slow):
                    del self.service[ticket.client]
                self._plan()
            if worker is not None and worker.alive():
                self.idle.append(worker)
                if len(self.idle) > WARM:
                    extra = self.idle.pop(0)
            self.changed.notify_all()  # waiters of both lanes: each checks its own room
        if extra is not None:
            extra.close()

    def _drop(self, worker: _Worker, ticket: _Ticket) -> None:
        worker.close(kill=True)
        self._give(None, ticket)

    def _send(self, line: bytes, ticket: _Ticket) -> _Worker:
        """A fast-lane worker that was sent `line` (an idle one that had ended: a fresh one)."""
        for _ in range(2):
            worker = self._take(ticket)
            if worker.send(line):
                return worker
            self._drop(worker, ticket)
        raise WorkerLost("it could not be sent the request")

    def _receive(self, worker: _Worker, ticket: _Ticket, deadline: float) -> dict | None:
        """The worker's reply by `deadline`, or None (the worker still running)."""
        try:
            return worker.receive(deadline)
        except BaseException:
            self._drop(worker, ticket)
            raise

    # ---- the slow lane ----

    def _plan(self) -> None:
        """Decide which slow-lane requests run (under `changed`): `SLOW_MOST` of them, given one
        at a time to the client with the fewest given so far, then the least slow-lane time, each
        client's oldest first; pause the others' workers, resume the chosen ones'. A client's
        time counts while its requests run and is forgotten once it has none in the lane."""
        now = time.monotonic()
        for ticket in self.slow:
            if ticket.running:
                self.service[ticket.client] += now - ticket.since
                ticket.ran += now - ticket.since
                ticket.since = now
        queues: dict[str, list[_Ticket]] = {}
        for ticket in self.slow:
            queues.setdefault(ticket.client, []).append(ticket)
        given = dict.fromkeys(queues, 0)
        chosen: set[int] = set()
        while len(chosen) < SLOW_MOST and queues:
            name = min(queues, key=lambda c: (given[c], self.service[c], queues[c][0].arrived))
            chosen.add(id(queues[name].pop(0)))
            given[name] += 1
            if not queues[name]:
                del queues[name]
        for ticket in self.slow:
            if id(ticket) in chosen and not ticket.running:
                ticket.worker.resume()
                ticket.running, ticket.since = True, now
            elif id(ticket) not in chosen and ticket.running:
                ticket.worker.pause()
                ticket.running = False
        self.changed.notify_all()

    def _enter_slow_lane(self, ticket: _Ticket) -> None:
        """Move a running request from the fast lane to the slow one (the fast room is free at
        once); its worker runs on or is paused, as `_plan` decides."""
        with self.changed:
            self.fast.remove(ticket)
            self.service.setdefault(ticket.client, 0.0)
            ticket.running, ticket.since = True, time.monotonic()
            self.slow.append(ticket)
            self._plan()
        threading.Thread(target=self._spare, daemon=True).start()

    def _slow_reply(self, ticket: _Ticket, seconds: float) -> dict | None:
        """The reply of a slow-lane request that may run `seconds` more there (time paused not
        counted), or None when it ran that long; waits in slices, re-planning the lane after
        each, so that a client's time is weighed while its requests run."""
        while True:
            with self.changed:
                self._plan()
                while not ticket.running:
                    self.changed.wait()
                left = seconds - ticket.ran - (time.monotonic() - ticket.since)
            if left <= 0:
                return None
            deadline = time.monotonic() + min(left, SLICE_S)
            reply = self._receive(ticket.worker, ticket, deadline)
            if reply is not None:
                return reply

    def _spare(self) -> None:
        """Start a worker for the idle list (the slow request kept its own), if it has room."""
        with self.changed:
            if len(self.idle) >= WARM:
                return
        try:
            worker = _Worker(self.program)
        except (WorkerLost, OSError):  # none now: the next request starts its own
            return
        with self.changed:
            if len(self.idle) < WARM:
                self.idle.append(worker)
                return
        worker.close()

    def ask(self, request: dict, seconds: float, client_name: str | None = None) -> dict:
        """The sandbox's reply to `request` (JSON-able), sent as `client_name`'s (default: the
        `client` block's); `TimeoutError` when none came within `seconds` of running (time
        paused in the slow lane is not counted), `WorkerLost` when the worker ended first. See
        the module docstring for the lanes."""
        line = json.dumps(request).encode("ascii") + b"\n"
        name = client_name if client_name is not None else _CLIENT.get()
        name = name if name is not None else _default_client()
        with self.changed:
            ticket = _Ticket(name, next(self.arrivals))
        ticket.worker = worker = self._send(line, ticket)
        started = time.monotonic()
        reply = self._receive(worker, ticket, started + min(seconds, SLOW_S))
        if reply is None and seconds > SLOW_S:
            ran = time.monotonic() - started
            self._enter_slow_lane(ticket)
            try:
                reply = self._slow_reply(ticket, seconds - ran)
            except BaseException:  # interrupted while paused too: the worker must not linger
                self._drop(worker, ticket)
                raise
        if reply is None:
            self._drop(worker, ticket)
            raise TimeoutError(f"no reply within {seconds:g} s")
        if reply.get("fatal"):  # it ran out of memory, and ends
            worker.close()
            self._give(None, ticket)
        else:
            self._give(worker, ticket)
        return reply

    def close(self) -> None:
        """End the idle workers (at exit); running ones end with their requests."""
        with self.changed:
            idle, self.idle = self.idle, []
        for worker in idle:
            worker.close()

    def forget(self) -> None:
        """In a forked child: let go of the parent's workers without ending them."""
        for worker in self.idle:
            worker.forget()
        self.idle = []


_POOLS: dict[Path, Pool] = {}
_POOLS_LOCK = threading.Lock()


def _after_fork() -> None:
    global _POOLS_LOCK
    _POOLS_LOCK = threading.Lock()
    for pool_ in _POOLS.values():
        pool_.forget()
    _POOLS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def pool(program: Path = SANDBOX) -> Pool:
    """This process's pool of `program` workers (chat templates unless told; a forked child
    starts its own, never using its parent's workers)."""
    with _POOLS_LOCK:
        if program not in _POOLS:
            _POOLS[program] = Pool(program)
        return _POOLS[program]
