"""What a batch's KV cache holds in memory, and the one budget (`--kv-budget`) over it.

runtime/models.py's shared-buffer pools are backed only where their rows write, and hand back
the rows a batch leaves; runtime/engine.py keeps its prefix cache inside the budget its batch
leaves free; the app's `--kv-budget` reaches every batching model's engine, as serve's does
(tests/test_serve_metrics.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import app
import runtime
from runtime.engine import MAX_CACHE_BYTES, cache_bytes_per_position, parse_kv_budget
from runtime.models import _cache_zeros, _release_rows
from runtime.prefix_cache import BLOCK
from ui.registry import ModelRegistry

BUNDLE = Path(__file__).resolve().parent.parent / "models" / "bible-lm" / "int8"
MB = 2**20
linux_only = pytest.mark.skipif(sys.platform != "linux", reason="pages backed on write: Linux")


def _resident(array: np.ndarray) -> int:
    """Bytes of `array`'s memory that are backed now: the resident size of the mappings under
    it (/proc/self/smaps), which other threads of the test process do not move."""
    start, resident, mapping = array.ctypes.data, 0, None
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            low, high = (int(part, 16) for part in head.split("-"))
            mapping = low < start + array.nbytes and start < high
        elif mapping and head == "Rss:":
            resident += int(line.split()[1]) * 1024
    return resident


@linux_only
def test_a_pool_is_backed_only_where_its_rows_write():
    pool = _cache_zeros((64, 4, 1024, 64), np.float32)  # 64 MiB, 1 MiB a row
    assert pool.nbytes == 64 * MB and not pool.any()
    pool[:4, :, :100] = 1.0  # four rows, 100 of 1024 slots each
    assert _resident(pool) < 2 * MB  # numpy's own zeros would take 2 MiB pages: all 64
    pool[:32] = 2.0
    assert _resident(pool) >= 32 * MB
    _release_rows((pool,), 8, 32)  # the batch kept its first 8 rows
    assert 8 * MB <= _resident(pool) < 9 * MB
    assert (pool[:8] == 2.0).all() and not pool[8:].any()  # released rows read as zeros


def test_rows_of_plain_arrays_are_left_as_they_are():
    plain = np.ones((4, 2048), np.float32)
    _release_rows((plain,), 1, 4)
    assert plain.all()


CONTEXT = 128  # bible-lm's: a request's rows reach at most this many positions
SPARE = 40  # positions of the budget beyond one full-context request: under 3 blocks


@pytest.fixture(scope="module")
def bible():
    plain = runtime.load(BUNDLE, threads=1, batching=False)
    assert plain.context_length == CONTEXT
    per_position = cache_bytes_per_position(plain.model)
    return plain, runtime.load(BUNDLE, threads=1, kv_budget=(CONTEXT + SPARE) * per_position)


def test_the_prefix_cache_gives_way_to_the_batch(bible):
    plain, batched = bible
    engine = batched.engine
    per_position = engine.bytes_per_position
    assert engine.max_cache_positions == CONTEXT + SPARE
    short_reply = runtime.GenerationConfig(max_new_tokens=4, do_sample=False)
    long_prompt = " ".join(["And God said, Let there be light: and there was light."] * 4)
    length = len(batched.encode_prompt(long_prompt))
    assert 3 * BLOCK <= length <= CONTEXT + SPARE - 4 - 3 * BLOCK
    batched.generate(long_prompt, short_reply)
    kept = engine.prefix_cache.bytes
    assert kept >= 3 * BLOCK * per_position  # its blocks stayed: the batch left them room
    # A request that may fill the whole context: admitted, its tokens what they are alone, and
    # the prefix cache dropped blocks until both fit the one budget.
    long_reply = runtime.GenerationConfig(max_new_tokens=CONTEXT, do_sample=False)
    prompt = "In the beginning"
    expected = plain.generate(prompt, long_reply)[0].token_ids
    assert batched.generate(prompt, long_reply)[0].token_ids == expected
    assert engine.prefix_cache.bytes <= SPARE * per_position < kept


def test_the_prefix_cache_is_never_larger_than_the_budget():
    small = runtime.load(BUNDLE, threads=1, kv_budget=8 * MB)
    assert small.engine.prefix_cache.max_bytes == 8 * MB
    default = runtime.load(BUNDLE, threads=1)
    assert default.engine.max_cache_bytes == MAX_CACHE_BYTES


@pytest.mark.parametrize(
    "text, expected", [("2G", 2 * 2**30), ("512m", 512 * MB), ("4096", 4096), (None, None)]
)
def test_kv_budget_values(text, expected):
    assert parse_kv_budget(text) == expected


@pytest.mark.parametrize("text", ["0", "-1G", "2GB", "1.5G", "", "G"])
def test_a_bad_kv_budget_is_refused(text):
    with pytest.raises(ValueError, match=r"`--kv-budget` must be a positive size in bytes"):
        parse_kv_budget(text)


def test_the_app_refuses_a_bad_kv_budget_before_it_starts(capsys):
    with pytest.raises(SystemExit) as stopped:
        app.main(["--kv-budget", "lots"])
    assert stopped.value.code == 2
    assert "`--kv-budget` must be a positive size in bytes" in capsys.readouterr().err


def test_the_app_s_kv_budget_reaches_each_engine():
    registry = ModelRegistry.discover([BUNDLE.parent], kv_budget=16 * MB)
    name = next(n for n in registry.names if n.endswith("int8"))
    engine = registry.get(name).engine
    assert engine.max_cache_bytes == 16 * MB
    assert engine.max_cache_positions == 16 * MB // engine.bytes_per_position
