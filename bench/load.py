"""Other work competing for the cores while a benchmark runs: what a shared CPU looks like.

    >>> LOADS
    ('quiet', 'busy', 'mixed')
    >>> with competing("quiet") as child:
    ...     print(child)
    None

- `quiet`: nothing else runs (the benchmark has the machine, as far as this process can tell);
- `busy`: one process spins without pause (`while True: pass`), taking one core whenever the
  scheduler gives it one;
- `mixed`: one process alternates bursts of numpy work (a 256 × 256 float32 matrix product,
  repeated for `BURST_S`) with sleeps of `SLEEP_S`, as a second app user or a background job
  would: about half a core, arriving at moments the benchmark cannot predict.

The competitor is a child process (the `with` target) started when the block begins and killed
when it ends (also on an exception), so a benchmark never leaves it behind. This module does not
time anything: bench/llm.py runs its rounds inside `competing(load)`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

LOADS = ("quiet", "busy", "mixed")
BURST_S = 0.05  # seconds of work in one burst of the mixed load
SLEEP_S = 0.05  # seconds of sleep between bursts

_PROGRAMS = {
    "busy": "while True:\n    pass\n",
    "mixed": (
        "import time\n"
        "import numpy as np\n"
        "a = np.random.default_rng(0).random((256, 256), dtype=np.float32)\n"
        "while True:\n"
        f"    end = time.perf_counter() + {BURST_S}\n"
        "    while time.perf_counter() < end:\n"
        "        a = (a @ a) / 256.0\n"
        f"    time.sleep({SLEEP_S})\n"
    ),
}


@contextmanager
def competing(load: str) -> Iterator[subprocess.Popen | None]:
    """Run the block with `load` (one of `LOADS`) competing for the cores; the block gets the
    competing process (None when quiet)."""
    if load not in LOADS:
        raise ValueError(f"`load` must be one of {', '.join(LOADS)}, got {load!r}")
    if load == "quiet":
        yield None
        return
    # one numpy thread: the competitor is one process's worth of work, not a thread pool
    env = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    child = subprocess.Popen([sys.executable, "-c", _PROGRAMS[load]], env={**os.environ, **env})
    try:
        time.sleep(0.2)  # let it start before the first timed run
        yield child
    finally:
        child.kill()
        child.wait()
