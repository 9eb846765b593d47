"""runtime/spinning.py: an engine loop's session spins while the process has its cores and runs on
a sleeping twin while it does not; switching between them never changes a token (both paths the
models use: plain `run` for bible-lm, IO binding into shared cache buffers for a lean Llama)."""

from __future__ import annotations

from pathlib import Path

import pytest

import runtime
from runtime.spinning import HIGH, LOW, AdaptiveSession, Contention, read_run_delay
from tests.llm_fixtures import write_tiny_gguf

MODELS = Path(__file__).resolve().parent.parent / "models"


def test_contention_switches_with_hysteresis():
    contention = Contention(read=lambda: 0.0)

    def samples(rate: float, count: int) -> list[bool]:
        seen = []
        for _ in range(count):
            contention.record(rate * 0.01, 0.01)
            seen.append(contention())
        return seen

    assert samples(0.0, 5) == [False] * 5
    assert samples(HIGH * 2, 1) == [False]  # one contended call is not enough
    assert samples(0.0, 1) == [False]
    assert samples(HIGH * 2, 3) == [False, True, True]  # two in a row are
    assert samples(LOW / 2, 5) == [True] * 4 + [False]  # five quiet ones switch back


def test_a_call_is_measured_at_most_once_a_window():
    now = [0.0]
    delay = [0.0]
    contention = Contention(read=lambda: delay[0], clock=lambda: now[0], window_s=0.1)

    def call():  # 10 ms, of which 8 ms waiting for a core
        now[0] += 0.01
        delay[0] += 0.008
        return "done"

    claims = []
    for _ in range(40):  # 0.4 s of calls: one is measured every 0.1 s
        claims.append(contention.claim())
        if claims[-1]:
            contention.record(0.0, 0.01)  # quiet
        call()
    assert sum(claims) == 4
    assert [contention.measured(call) for _ in range(25)] == ["done"] * 25
    assert contention.contended  # 0.8 s per second in the calls measured, twice in a row


class Scripted(Contention):
    """Contention as a test says: `answer()` per call, nothing measured."""

    def __init__(self, answer):
        super().__init__(read=lambda: None)
        self.answer = answer

    def __call__(self) -> bool:
        return self.answer()


def test_without_scheduler_statistics_it_keeps_spinning():
    contention = Contention(read=lambda: None)
    assert not contention.claim()
    assert [contention.measured(lambda: 1) for _ in range(3)] == [1, 1, 1]
    assert contention() is False


def test_the_process_run_delay_is_read():
    first = read_run_delay()
    assert first is not None and first >= 0
    assert read_run_delay() >= first


@pytest.fixture(scope="module")
def tiny_gguf_bundle(tmp_path_factory) -> Path:
    from convert.gguf import export_gguf

    tmp = tmp_path_factory.mktemp("spinning")
    gguf = write_tiny_gguf(tmp / "tiny.Q4_1.gguf", "Q4_1")
    export_gguf(gguf, tmp / "bundle", parity=False)
    return tmp / "bundle"


@pytest.mark.parametrize("which", ["bible-lm", "lean llama"])
def test_switching_sessions_changes_no_token(which, tiny_gguf_bundle):
    path = MODELS / "bible-lm" / "int8" if which == "bible-lm" else tiny_gguf_bundle
    adaptive = runtime.load(path, threads=2)
    session = adaptive.model.runner.session
    assert isinstance(session, AdaptiveSession)  # the engine loop's own choice
    session.sleeping = session._make_sleeping()
    calls = iter(range(10_000))
    session.contention = Scripted(lambda: next(calls) % 3 == 0)  # every third call sleeps
    plain = runtime.load(path, threads=2, spinning=False, batching=False)
    for seed in range(3):
        config = runtime.GenerationConfig(max_new_tokens=24, do_sample=True, seed=seed)
        ours, theirs = adaptive.generate("In the beginning", config)[0], None
        theirs = plain.generate("In the beginning", config)[0]
        assert ours.token_ids == theirs.token_ids
        assert ours.logprobs == theirs.logprobs
    assert session.calls["spinning"] > 0 and session.calls["sleeping"] > 0


def test_the_sleeping_twin_is_built_only_when_contention_is_seen(tiny_gguf_bundle):
    gen = runtime.load(tiny_gguf_bundle, threads=2)
    session = gen.model.runner.session
    session.contention = Scripted(lambda: False)
    config = runtime.GenerationConfig(max_new_tokens=4)
    gen.generate("hello", config)
    assert session.sleeping is None and session.calls["sleeping"] == 0
    session.contention = Scripted(lambda: True)
    gen.generate("hello", config)  # the twin is built in the background meanwhile
    session._building.join(timeout=120)
    assert session.sleeping is not None
    gen.generate("hello", config)
    assert session.calls["sleeping"] > 0


def test_asked_for_settings_are_kept():
    path = MODELS / "bible-lm" / "int8"
    for spinning in (True, False):
        session = runtime.load(path, threads=2, spinning=spinning).model.runner.session
        assert not isinstance(session, AdaptiveSession)
        options = session.get_session_options()
        assert options.get_session_config_entry("session.intra_op.allow_spinning") == str(
            int(spinning)
        )
