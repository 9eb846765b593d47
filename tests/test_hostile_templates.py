"""Hostile chat templates (runtime/chat.py): each is refused with a clear `ValueError` naming the
budget it broke, and none holds up another render, nor do 16 slow ones (runtime/template_pool.py's
slow lane).

Chat templates come from untrusted GGUF files and tokenizer configs. Every case here once ran for
minutes, held the interpreter's lock (so that no other request of the app was served) or raised a
`RecursionError`. Size caps refuse some before they run; the clock refuses the others, so those
run under a one-second budget (the same mechanism as the real one, only shorter). Each test has a
pytest-timeout guard, and no test asserts a timing.
"""

from __future__ import annotations

import threading
import time

import pytest

import runtime.chat as chat
from runtime import template_pool
from runtime.chat import ChatTemplate

HI = [{"role": "user", "content": "Hi"}]

SQUARINGS = "\n".join(
    ["{% set a0 = 123456789123456789 %}"]
    + [f"{{% set a{i + 1} = a{i} * a{i} %}}" for i in range(14)]
    + ["{{ a14 > 0 }}"]
)  # 16 lines: the last square would have 2^14 times the digits of the first

CAPPED = {  # (template, what the refusal names): refused by a cap before the work is done
    "big-int squaring": (SQUARINGS, "bits"),
    "big-int squaring in a loop": (
        "{% set ns = namespace(a=7) %}{% for i in range(40) %}{% set ns.a = ns.a * ns.a %}"
        "{% endfor %}{{ ns.a > 0 }}",
        "bits",
    ),
    "big int from text": ("{{ ('9' * 4000)|int * 2 }}", "bits"),
    "big int by addition": (
        "{% set ns = namespace(a=1) %}{% for i in range(5000) %}{% set ns.a = ns.a + ns.a %}"
        "{% endfor %}{{ ns.a > 0 }}",
        "bits",
    ),
    "wordwrap": ("{{ ('a' * 999999)|wordwrap(1) }}", "`wordwrap` filter"),
    "huge string multiplication": ("{{ 'a' * 10**12 }}", "repeated text"),
    "many big strings": (  # 4 MB each
        "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}"
        "{% set ns.l = ns.l + ['🙂' * 999000 ~ i] %}{% endfor %}{{ ns.l|length }}",
        "memory",
    ),
    "deep parentheses": ("{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}", "nests too deeply"),
    "deep lists": ("{{ " + "[" * 5000 + "1" + "]" * 5000 + " }}", "nests too deeply"),
    "deep ifs": ("{% if true %}" * 200 + "x" + "{% endif %}" * 200, "nests too deeply"),
    "deeper ifs": ("{% if true %}" * 3000 + "x" + "{% endif %}" * 3000, "nests too deeply"),
    "deep for loops": (
        "{% for i in range(1) %}" * 30 + "x" + "{% endfor %}" * 30,
        "nests too deeply",
    ),
    "long chain of +": ("{{ " + " + ".join(["'a'"] * 5000) + " }}", "nests too deeply"),
    "long chain of filters": ("{{ 'a'" + "|upper" * 5000 + " }}", "nests too deeply"),
}

TIMED = {  # refused by the clock: each would run for minutes, most in one call holding the GIL
    "sort bomb": "{{ ([[0] * 999999] * 999999)|sort }}",
    "comparison bomb": "{{ [[0] * 999999] * 999999 == [[0] * 999999] * 999999 }}",
    "sort loop": (
        "{% set l = ('ab' * 499999)|list %}{% for i in range(99999) %}{% set s = l|sort %}"
        "{% endfor %}"
    ),
    "slow wordwrap": "{{ ('a' * 400000)|wordwrap(1) }}",
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(CAPPED))
def test_templates_past_a_cap_are_refused(name):
    source, named = CAPPED[name]
    with pytest.raises(ValueError, match="chat template") as caught:
        ChatTemplate(source).render(HI)
    assert named in str(caught.value)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(TIMED))
def test_templates_past_the_time_budget_are_refused(name, monkeypatch):
    monkeypatch.setattr(chat, "MAX_SECONDS", 1.0)
    with pytest.raises(ValueError, match="the chat template was stopped: it runs longer than 1 s"):
        ChatTemplate(TIMED[name]).render(HI)


@pytest.mark.timeout(120)
def test_a_template_refused_by_the_clock_leaves_the_next_render_whole(monkeypatch):
    monkeypatch.setattr(chat, "MAX_SECONDS", 1.0)
    normal = ChatTemplate("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}")
    for _ in range(2):
        with pytest.raises(ValueError, match="runs longer than"):
            ChatTemplate(TIMED["comparison bomb"]).render(HI)
        assert normal.render(HI) == "<user>Hi"


@pytest.mark.timeout(120)
def test_a_sandbox_process_that_ended_is_replaced():
    normal = ChatTemplate("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}")
    assert normal.render(HI) == "<user>Hi"
    idle = list(template_pool.pool().idle)
    assert idle  # the worker that rendered it is kept warm
    for worker in idle:
        worker.process.kill()
        worker.process.wait()
    assert normal.render(HI) == "<user>Hi"


@pytest.mark.timeout(120)
def test_a_hostile_render_never_holds_up_another():
    """While a template that holds the interpreter's lock renders in one thread (under the real
    budget), a normal render in another thread finishes first."""
    hostile = ChatTemplate(TIMED["comparison bomb"])
    normal = ChatTemplate("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}")
    finished, errors = [], []

    def run(template, name):
        try:
            finished.append((name, template.render(HI)))
        except ValueError as error:
            errors.append(str(error))
            finished.append((name, None))

    hostile_thread = threading.Thread(target=run, args=(hostile, "hostile"), daemon=True)
    hostile_thread.start()
    time.sleep(0.2)  # let the hostile render begin
    normal_thread = threading.Thread(target=run, args=(normal, "normal"), daemon=True)
    normal_thread.start()
    for _ in range(600):  # bounded: 60 s at most
        if not hostile_thread.is_alive():
            break
        time.sleep(0.1)
    normal_thread.join(timeout=10)
    assert finished == [("normal", "<user>Hi"), ("hostile", None)]
    assert errors == [f"the chat template was stopped: it runs longer than {chat.MAX_SECONDS:g} s"]


SLOW = (  # about 0.5 s of rendering: far past the fast lane's 0.25 s, within any budget below
    "{% for i in range(10000) %}{{ (messages[0].content * 50)|upper|length }}{% endfor %}"
)
NORMAL = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"


@pytest.mark.timeout(300)
def test_one_clients_16_slow_renders_hold_up_no_other_client(monkeypatch):
    """Client "a" sends 16 slow renders at once; then client "b" a normal one and a slow one.
    The normal one finishes first, or behind at most the slow lane's running renders while its
    worker starts on a loaded CPU (before the slow lane, it waited for 4 rounds of 4 slow
    renders; before per-client shares, for a's queue in the fast lane); b's slow one runs at
    once beside a's, which hold at most their share of the slow lane, so it finishes before
    most of them (before per-client shares, after all 16); and every slow render still
    renders in full, its time paused in the slow lane not charged to its budget."""
    monkeypatch.setattr(chat, "MAX_SECONDS", 60.0)  # the slow renders must finish, not time out
    slow, normal = ChatTemplate(SLOW), ChatTemplate(NORMAL)
    finished = []

    def run(template, name):
        with template_pool.client(name[0]):
            try:
                finished.append((name, template.render(HI)))
            except ValueError as error:
                finished.append((name, str(error)))

    threads = [threading.Thread(target=run, args=(slow, "a"), daemon=True) for _ in range(16)]
    for thread in threads:
        thread.start()
    time.sleep(0.2)  # a's renders are queued or rendering
    run(normal, "b normal")
    threads.append(threading.Thread(target=run, args=(slow, "b slow"), daemon=True))
    threads[-1].start()
    for thread in threads:
        thread.join(timeout=240)
    names = [name for name, _ in finished]
    # at most the slow lane's running renders end first (on a loaded CPU, while b's worker starts)
    assert names.index("b normal") <= template_pool.SLOW_MOST, names
    assert names.index("b slow") <= 8, names
    assert sorted(finished) == [("a", "100" * 10000)] * 16 + [
        ("b normal", "<user>Hi"),
        ("b slow", "100" * 10000),
    ]


@pytest.mark.timeout(60)
def test_a_client_is_named_for_each_step_of_a_stream():
    """`steps_as` names the client for every step of a generator, each step in a fresh context
    (as a web framework's worker threads take them), and not after it."""
    import contextvars

    def seen():
        for _ in range(3):
            yield template_pool._CLIENT.get()

    steps = template_pool.steps_as("visitor", seen())
    assert [contextvars.copy_context().run(next, steps) for _ in range(3)] == ["visitor"] * 3
    assert template_pool._CLIENT.get() is None
