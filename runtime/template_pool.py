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
`SLOW_S` seconds is slow: it leaves the fast lane at once and goes on in the slow lane (at most
`SLOW_MOST` at once); while that lane is full its worker is paused
(SIGSTOP: no CPU, its clock stopped) and it waits its turn, and a spare worker is started for
the fast lane meanwhile. So slow requests, however many and from whichever client, take at most
`SLOW_MOST` workers' CPU, and a fast request waits about `SLOW_S` for each `MOST` requests
queued ahead of it (plus starting a worker), not for each whole budget. Paused workers hold
their memory (a worker's cap at most) until their turn.

Workers are reused: at most `WARM` idle ones are kept, so the normal path is one round trip on a
pipe. A worker that dies, answers out of protocol or runs out of memory is replaced by a fresh
one. After a fork, the child starts workers of its own. POSIX only (it waits on pipes with
`select`). It does not know what a template or a schema is: the sandbox files do the work,
runtime/chat.py and runtime/structured.py check and word the requests.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
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


class Pool:
    """Warm workers of one sandbox program for this process (see the module docstring)."""

    def __init__(self, program: Path):
        self.program = program
        self.idle: list[_Worker] = []
        self.running = {FAST: 0, SLOW: 0}
        self.changed = threading.Condition()
        atexit.register(self.close)

    @staticmethod
    def _most(lane: str) -> int:
        return MOST if lane == FAST else SLOW_MOST

    def _take(self, lane: str) -> _Worker:
        with self.changed:
            while self.running[lane] >= self._most(lane):
                self.changed.wait()
            self.running[lane] += 1
            while self.idle:
                worker = self.idle.pop()
                if worker.alive():
                    return worker
                worker.close()
        try:
            return _Worker(self.program)
        except BaseException:
            self._give(None, lane)
            raise

    def _give(self, worker: _Worker | None, lane: str) -> None:
        extra = None
        with self.changed:
            self.running[lane] -= 1
            if worker is not None and worker.alive():
                self.idle.append(worker)
                if len(self.idle) > WARM:
                    extra = self.idle.pop(0)
            self.changed.notify_all()  # waiters of both lanes: each checks its own room
        if extra is not None:
            extra.close()

    def _drop(self, worker: _Worker, lane: str) -> None:
        worker.close(kill=True)
        self._give(None, lane)

    def _send(self, line: bytes, lane: str) -> _Worker:
        """A worker of `lane` that was sent `line` (an idle one that had ended: a fresh one)."""
        worker = self._take(lane)
        if worker.send(line):
            return worker
        self._drop(worker, lane)
        worker = self._take(lane)
        if worker.send(line):
            return worker
        self._drop(worker, lane)
        raise WorkerLost("it could not be sent the request")

    def _receive(self, worker: _Worker, lane: str, deadline: float) -> dict | None:
        """The worker's reply by `deadline`, or None (the worker still running)."""
        try:
            return worker.receive(deadline)
        except BaseException:
            self._drop(worker, lane)
            raise

    def _enter_slow_lane(self, worker: _Worker) -> None:
        """Move a running request from the fast lane to the slow one, pausing its worker while
        the slow lane is full (the fast slot is free at once either way)."""
        with self.changed:
            self.running[FAST] -= 1
            self.changed.notify_all()
            paused = self.running[SLOW] >= SLOW_MOST
            if paused:
                worker.pause()
            while self.running[SLOW] >= SLOW_MOST:
                self.changed.wait()
            self.running[SLOW] += 1
        if paused:
            worker.resume()
        threading.Thread(target=self._spare, daemon=True).start()

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

    def ask(self, request: dict, seconds: float) -> dict:
        """The sandbox's reply to `request` (JSON-able); `TimeoutError` when none came within
        `seconds` of running (time paused in the slow lane's queue is not counted),
        `WorkerLost` when the worker ended first. See the module docstring for the lanes."""
        line = json.dumps(request).encode("ascii") + b"\n"
        lane, worker = FAST, self._send(line, FAST)
        started = time.monotonic()
        reply = self._receive(worker, lane, started + min(seconds, SLOW_S))
        if reply is None and seconds > SLOW_S:
            ran = time.monotonic() - started
            self._enter_slow_lane(worker)
            lane = SLOW
            reply = self._receive(worker, lane, time.monotonic() + seconds - ran)
        if reply is None:
            self._drop(worker, lane)
            raise TimeoutError(f"no reply within {seconds:g} s")
        if reply.get("fatal"):  # it ran out of memory, and ends
            worker.close()
            self._give(None, lane)
        else:
            self._give(worker, lane)
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
