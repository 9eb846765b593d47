"""Spinning that adapts to contention: spin while the process has its cores, sleep when it does not.

onnxruntime's worker threads can spin between operators instead of sleeping. With the cores to
itself, an engine loop decodes SmolLM2 about 1.4× faster spinning (no wake-up between the ~150
parallel sections of a token); when another process (or another model's loop) wants the same
cores, spinning threads burn the time slices that the others need, wait far longer for each
other, and decode 2-3× slower than sleeping threads (docs/RUNTIME.md, "Spinning"). The option is
fixed when a session is made, so `AdaptiveSession` holds the graph twice, a spinning and a
sleeping session of the same graph with the same threads (the same kernels and partitioning:
their outputs are bit-identical), and runs each call on the one that suits the moment. The
sleeping session is made, in the background, only when contention is first seen, so a process
that always has its cores never pays its memory (about as much as the first session's).

Contention is read from Linux's scheduler statistics (`/proc/self/task/*/schedstat`): the time
this process's threads spent runnable but waiting for a core (run delay) during one of the
session's own calls, per second of that call, sampled at most every `WINDOW_S` (reading every
thread's statistics costs a fraction of a millisecond, so most calls are not measured). Only
the calls count: what other code of the process did between them (a peer engine in a benchmark,
another tab's work) is not this session's contention unless it is still running during a call.
While the process has its cores the run delay is close to 0; when another process competes for
them it is a large part of a second per second. `Contention` switches to sleeping when it
exceeds `HIGH` in `ENTER` samples in a row, and back to spinning when it stays below `LOW` for
`LEAVE` samples (hysteresis: a single burst does not flip it back and forth). Where /proc is not
there the process spins, as before.

Covers: the choice and the two sessions behind one session-like object (`run`,
`run_with_iobinding`, `io_binding`, `get_inputs`, `get_outputs`, `get_providers`). Does not
cover: when a session may spin at all (runtime/generator.py decides: an engine loop that is its
session's only caller) or how sessions are made (runtime/sessions.py).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

WINDOW_S = 0.1  # seconds between two measured calls (at most)
HIGH = 0.3  # run delay (seconds per second of a call) above which a sample counts as contended
LOW = 0.05  # run delay below which a sample counts as quiet
ENTER = 2  # contended samples in a row that switch spinning off
LEAVE = 5  # quiet samples in a row that switch it back on


def read_run_delay() -> float | None:
    """Seconds this process's threads have spent runnable, waiting for a core, since they
    started (the second field of each `/proc/self/task/<tid>/schedstat`); None without /proc."""
    total = 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/schedstat") as stats:
                total += int(stats.read().split()[1])
        except (OSError, IndexError, ValueError):  # a thread that ended meanwhile
            continue
    return total / 1e9


class Contention:
    """Whether this process's threads wait for cores during the calls sampled, with hysteresis.
    `read` gives the process's run delay in seconds (None when unknown); `claim` says whether
    the next call should be measured (at most one every `window_s`), `record` takes its
    measurement."""

    def __init__(
        self,
        read: Callable[[], float | None] = read_run_delay,
        clock: Callable[[], float] = time.monotonic,
        window_s: float = WINDOW_S,
    ):
        self.read, self.clock, self.window_s = read, clock, window_s
        self.contended = False
        self.available = read() is not None
        self._streak = 0  # samples in a row that argue for switching
        self._lock = threading.Lock()
        self._last = -float("inf")  # when the last sample was claimed
        self._measuring = False

    def __call__(self) -> bool:
        """True while the process is contended."""
        return self.contended

    def claim(self) -> bool:
        """Whether the caller should measure its next call (and then `record` it)."""
        if not self.available:
            return False
        with self._lock:
            now = self.clock()
            if self._measuring or now - self._last < self.window_s:
                return False
            self._measuring, self._last = True, now
            return True

    def record(self, delay_s: float, wall_s: float) -> None:
        """A call of `wall_s` seconds during which the process's threads waited `delay_s`."""
        with self._lock:
            self._measuring = False
            if wall_s <= 0:
                return
            rate = delay_s / wall_s  # run delay per second of the call
            arguing = rate < LOW if self.contended else rate > HIGH
            self._streak = self._streak + 1 if arguing else 0
            if self._streak >= (LEAVE if self.contended else ENTER):
                self.contended, self._streak = not self.contended, 0

    def measured(self, call: Callable[[], object]):
        """`call()`, measured when a sample is due."""
        if not self.claim():
            return call()
        before, start = self.read(), self.clock()
        try:
            return call()
        finally:
            after = self.read()
            delay = after - before if after is not None and before is not None else 0.0
            self.record(delay, self.clock() - start)


_process_contention: Contention | None = None


def process_contention() -> Contention:
    """The process's one `Contention`, shared by every adaptive session."""
    global _process_contention
    if _process_contention is None:
        _process_contention = Contention()
    return _process_contention


class AdaptiveSession:
    """A spinning session of a graph that runs each call on a sleeping twin of it while the
    process is contended (`contention()` true). `make_sleeping()` builds the twin; it is called
    once, on a background thread, the first time contention is seen (until it is ready, calls
    stay on the spinning session)."""

    def __init__(self, spinning, make_sleeping: Callable[[], object], contention=None):
        self.spinning = spinning
        self.sleeping = None
        self._make_sleeping = make_sleeping
        self._building: threading.Thread | None = None
        self.contention = contention or process_contention()
        self.calls = {"spinning": 0, "sleeping": 0}  # calls run by each session, for tests

    def current(self):
        """The session the next call runs on."""
        if not self.contention():
            return self.spinning
        if self.sleeping is None:
            if self._building is None:
                # Not a daemon: a daemon thread still inside onnxruntime's session constructor
                # when the interpreter exits is torn down mid-C++ and can crash the process.
                self._building = threading.Thread(target=self._build, name="sleeping-twin")
                self._building.start()
            return self.spinning
        return self.sleeping

    def _build(self) -> None:
        self.sleeping = self._make_sleeping()

    def _count(self, session) -> None:
        self.calls["spinning" if session is self.spinning else "sleeping"] += 1

    def run(self, outputs, feeds, run_options=None):
        session = self.current()
        self._count(session)
        return self.contention.measured(lambda: session.run(outputs, feeds, run_options))

    def io_binding(self) -> AdaptiveBinding:
        return AdaptiveBinding(self)

    def run_with_iobinding(self, binding: AdaptiveBinding, run_options=None) -> None:
        session = self.current()
        self._count(session)
        binding.last = binding.on(session)
        self.contention.measured(lambda: session.run_with_iobinding(binding.last, run_options))

    def get_inputs(self):
        return self.spinning.get_inputs()

    def get_outputs(self):
        return self.spinning.get_outputs()

    def get_providers(self):
        return self.spinning.get_providers()


class AdaptiveBinding:
    """An IO binding of an `AdaptiveSession`: every bind is applied to the binding of each of its
    sessions (made on first use, with the binds so far replayed), so either can run it."""

    def __init__(self, session: AdaptiveSession):
        self.session = session
        self.binds: dict[tuple[str, str], tuple] = {}  # (method, name) -> arguments, in order
        self.bindings: dict[int, object] = {}  # id(session) -> its onnxruntime binding
        self.last = None  # the binding of the last call, whose outputs `get_outputs` gives

    def on(self, session):
        """`session`'s own binding, with every bind made so far."""
        binding = self.bindings.get(id(session))
        if binding is None:
            binding = self.bindings[id(session)] = session.io_binding()
            for (method, _), arguments in self.binds.items():
                getattr(binding, method)(*arguments)
        return binding

    def _bind(self, method: str, name: str, *arguments) -> None:
        self.binds[(method, name)] = (name, *arguments)
        for binding in self.bindings.values():
            getattr(binding, method)(name, *arguments)

    def bind_cpu_input(self, name, array) -> None:
        self._bind("bind_cpu_input", name, array)

    def bind_ortvalue_input(self, name, value) -> None:
        self._bind("bind_ortvalue_input", name, value)

    def bind_ortvalue_output(self, name, value) -> None:
        self._bind("bind_ortvalue_output", name, value)

    def bind_output(self, name, *arguments) -> None:
        self._bind("bind_output", name, *arguments)

    def get_outputs(self):
        return self.last.get_outputs()
