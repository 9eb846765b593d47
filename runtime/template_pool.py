"""The worker processes that render chat templates, kept warm and killed at the deadline.

runtime/chat.py hands every compile and render of an untrusted template to `ask`, which sends it
to a worker process running runtime/template_sandbox.py (started by that file's path, so the
worker imports only the standard library and jinja2) and waits for the reply. Waiting is on a
pipe, so the template never holds this process's interpreter lock: other requests carry on while
it renders. A worker that has not replied by the deadline is killed, and the request refused; the
clock starts when the request is sent to a worker that has started (importing jinja2 is not
counted).

Workers are reused: at most `WARM` idle ones are kept, so the normal path is one round trip on a
pipe; a request that finds none idle starts one, and at most `MOST` run at once (a request past
that waits for one to come back, which takes at most one budget). A worker that dies, answers
out of protocol or runs out of memory is replaced by a fresh one. After a fork, the child starts
workers of its own. POSIX only (it waits on pipes with `select`). It does not know what a
template is: runtime/template_sandbox.py renders, runtime/chat.py checks and words the request.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

SANDBOX = Path(__file__).with_name("template_sandbox.py")
WARM = 2  # idle workers kept for the next requests
MOST = 4  # workers running at once; a request past that waits for one
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

    def __init__(self):
        self.process = subprocess.Popen(
            [sys.executable, "-c", _BOOT, str(SANDBOX)],
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

    def send(self, request: bytes) -> bool:
        """Whether `request` was written (False when the worker had ended)."""
        try:
            self.process.stdin.write(request)
            self.process.stdin.flush()
        except OSError:  # BrokenPipeError
            return False
        return True

    def receive(self, deadline: float) -> dict | None:
        """The reply, or None when the deadline passes first."""
        reply, fd = bytearray(), self.process.stdout.fileno()
        while not reply.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise WorkerLost(f"it ended (exit status {self.process.wait()})")
            reply += chunk
            if len(reply) > REPLY_BYTES:
                raise WorkerLost(f"its reply passed {REPLY_BYTES:,} bytes")
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


class Pool:
    """Warm workers for this process (see the module docstring)."""

    def __init__(self):
        self.idle: list[_Worker] = []
        self.running = 0
        self.changed = threading.Condition()
        atexit.register(self.close)

    def _take(self) -> _Worker:
        with self.changed:
            while not self.idle and self.running >= MOST:
                self.changed.wait()
            self.running += 1
            while self.idle:
                worker = self.idle.pop()
                if worker.alive():
                    return worker
                worker.close()
        try:
            return _Worker()
        except BaseException:
            self._give(None)
            raise

    def _give(self, worker: _Worker | None) -> None:
        extra = None
        with self.changed:
            self.running -= 1
            if worker is not None and worker.alive():
                self.idle.append(worker)
                if len(self.idle) > WARM:
                    extra = self.idle.pop(0)
            self.changed.notify()
        if extra is not None:
            extra.close()

    def ask(self, request: dict, seconds: float) -> dict:
        """The sandbox's reply to `request` ({"text"} or {"error"}); `TimeoutError` when none
        came within `seconds`, `WorkerLost` when the worker ended first."""
        line = json.dumps(request).encode("ascii") + b"\n"
        worker = self._take()
        if not worker.send(line):  # an idle worker that had ended: once more on a fresh one
            worker.close(kill=True)
            self._give(None)
            worker = self._take()
            if not worker.send(line):
                worker.close(kill=True)
                self._give(None)
                raise WorkerLost("it could not be sent the request")
        try:
            reply = worker.receive(time.monotonic() + seconds)
        except BaseException:
            worker.close(kill=True)
            self._give(None)
            raise
        if reply is None:
            worker.close(kill=True)
            self._give(None)
            raise TimeoutError(f"no reply within {seconds:g} s")
        if reply.get("fatal"):  # it ran out of memory, and ends
            worker.close()
            self._give(None)
        else:
            self._give(worker)
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


_POOL: Pool | None = None
_POOL_LOCK = threading.Lock()


def _after_fork() -> None:
    global _POOL, _POOL_LOCK
    _POOL_LOCK = threading.Lock()
    if _POOL is not None:
        _POOL.forget()
        _POOL = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def pool() -> Pool:
    """This process's pool (a forked child starts its own, never using its parent's workers)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = Pool()
        return _POOL
