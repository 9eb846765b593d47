"""Same seed, same text through the API: the real flagship served by `scriptorium serve` (one
replica, its engine batching every request; in one process, its default, and on Ray) answers each
of several concurrent chat requests, greedy and seeded-sampled, with the reply it gives alone in
process, token for token.
Batch invariance itself: tests/test_flagship_invariance.py."""

from __future__ import annotations

import threading

import openai
import pytest

import runtime
from serve.deployments import ModelSpec
from tests.app_fixtures import free_port

CHATS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "user", "content": "Write a haiku about rain."}],
    [{"role": "user", "content": "Name three colours."}],
    [{"role": "user", "content": "Why do birds sing?"}],
]
SAMPLING = dict(temperature=0.9, top_p=0.95, seed=0, extra_body={"top_k": 40})


@pytest.fixture(scope="module")
def flagship_bundle():
    from convert.flagship import flagship_bundle

    try:
        return flagship_bundle()
    except Exception as error:  # no GGUF here and no registry: nothing to test against
        pytest.skip(f"the flagship is not converted ({error})")


@pytest.fixture(scope="module")
def client(ray_cluster, flagship_bundle):
    from serve.cli import deploy

    port = free_port()
    deploy([ModelSpec("flagship", str(flagship_bundle), threads=1, cpus=1)], "127.0.0.1", port)
    return openai.OpenAI(
        base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=300
    )


def test_concurrent_api_replies_are_the_replies_alone(client, flagship_bundle):
    replies_are_the_replies_alone(client, flagship_bundle)


def test_concurrent_replies_in_one_process_are_the_replies_alone(flagship_bundle):
    from tests.app_fixtures import serve_in_thread

    url, _, stop = serve_in_thread([ModelSpec("flagship", str(flagship_bundle), threads=1)])
    try:
        client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=300)
        replies_are_the_replies_alone(client, flagship_bundle)
    finally:
        stop()


def replies_are_the_replies_alone(client, flagship_bundle) -> None:
    """Every reply to the concurrent `CHATS` (greedy, then sampled) is the reply alone."""
    local = runtime.load(flagship_bundle, threads=1, batching=False)
    jobs = [(chat, {"temperature": 0}) for chat in CHATS] + [(chat, SAMPLING) for chat in CHATS]
    answers: list = [None] * len(jobs)
    barrier = threading.Barrier(len(jobs))

    def ask(index: int) -> None:
        chat, settings = jobs[index]
        barrier.wait(timeout=60)
        answers[index] = client.chat.completions.create(
            model="flagship", messages=chat, max_completion_tokens=24, **settings
        )

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    for (chat, settings), answer in zip(jobs, answers):
        sampled = settings.get("temperature", 0) > 0
        config = runtime.GenerationConfig(
            max_new_tokens=24,
            do_sample=sampled,
            **({"temperature": 0.9, "top_p": 0.95, "seed": 0, "top_k": 40} if sampled else {}),
        )
        assert answer.choices[0].message.content == local.chat(chat, config)[0].text
