"""The Chat tab and the arena without a browser: the vote store, the tab's pure functions, and the
`/chat` and `/arena` endpoints through gradio_client, whose replies equal `gen.chat`'s for the
same settings and seed. The chat model is the tiny Llama ChatML export (tests/app_fixtures.py).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import app
import runtime
from tests.app_fixtures import chat_model_dir, serve
from ui import arena, chat_paraphrase, chat_tab, votes
from ui.registry import ModelRegistry

__all__ = ["chat_model_dir"]  # a session fixture, used by name
PARAPHRASER = Path(__file__).resolve().parents[1] / "models" / "paraphraser" / "int8"
SETTINGS = dict(
    mode="sampling",
    max_new_tokens=12,
    temperature=0.9,
    top_k=20,
    top_p=0.95,
    min_p=0.0,
    repetition_penalty=1.0,
    no_repeat_ngram_size=0,
    seed=5,
)
CONFIG = runtime.GenerationConfig(max_new_tokens=12, do_sample=True, temperature=0.9, top_k=20)
CONFIG = CONFIG.replace(top_p=0.95, seed=5)


# ---- the vote store ----------------------------------------------------------------------------


def test_votes_are_tallied_per_pair_and_survive_reopening(tmp_path):
    path = tmp_path / "votes" / "arena.sqlite"
    store = votes.VoteStore(path)
    assert store.add(["m · greedy", "m · top-k 5"], 0) == 1
    assert store.add(["m · top-k 5", "m · greedy", "n · greedy"], 2) == 2  # n beats both
    assert store.add(["m · greedy", "m · top-k 5"], None) == 1
    del store
    reopened = votes.VoteStore(path)  # as after a restart: a new connection to the same file
    tallies = {(t.a, t.b): (t.a_wins, t.b_wins, t.ties) for t in reopened.tally()}
    assert tallies == {
        ("m · greedy", "m · top-k 5"): (1, 0, 1),
        ("m · greedy", "n · greedy"): (0, 1, 0),
        ("m · top-k 5", "n · greedy"): (0, 1, 0),
    }
    assert reopened.tally()[0].votes == 2  # the most voted pair first
    with sqlite3.connect(path) as db:  # committed and in write-ahead-log mode
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert db.execute("SELECT COUNT(*) FROM votes").fetchone() == (4,)


def test_a_vote_is_checked_before_anything_is_written(tmp_path):
    store = votes.VoteStore(tmp_path / "v.sqlite")
    with pytest.raises(ValueError, match="`contestants` must be different"):
        store.add(["a", "a"], 0)
    with pytest.raises(ValueError, match=r"`winner` must be in \[0, 1\]"):
        store.add(["a", "b"], 2)
    with pytest.raises(ValueError, match="at least 2"):
        store.add(["a"], 0)
    assert store.tally() == []


def test_the_votes_file_is_configurable(tmp_path, monkeypatch):
    monkeypatch.setenv("SCRIPTORIUM_VOTES", str(tmp_path / "mine.sqlite"))
    assert votes.default_path() == tmp_path / "mine.sqlite"
    monkeypatch.delenv("SCRIPTORIUM_VOTES")
    monkeypatch.setenv("SCRIPTORIUM_CACHE", str(tmp_path / "cache"))
    assert votes.default_path() == tmp_path / "cache" / "arena-votes.sqlite"


# ---- the tabs' pure functions --------------------------------------------------------------


def test_user_turns_are_checked_against_the_replay_caps():
    assert chat_tab.user_turns_value(["a", "b"]) == ["a", "b"]
    with pytest.raises(ValueError, match="at most 16 turns"):
        chat_tab.user_turns_value(["a"] * 17)
    with pytest.raises(ValueError, match="at most 4000 characters together"):
        chat_tab.user_turns_value(["x" * 1500] * 3)
    with pytest.raises(ValueError, match=r"`user_turns\[1\]` must not be empty"):
        chat_tab.user_turns_value(["a", " "])
    with pytest.raises(ValueError, match="must be a list"):
        chat_tab.user_turns_value([])


def test_chat_settings_refuse_beam_search():
    config = chat_tab.chat_config(*SETTINGS.values())
    assert config == CONFIG.validate()
    values = dict(SETTINGS, mode="beam search")
    with pytest.raises(ValueError, match="`mode` must be one of"):
        chat_tab.chat_config(*values.values())


def test_retry_and_undo_cut_the_conversation():
    turns = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"},
        {"role": "assistant", "content": "d"},
    ]
    assert chat_tab.without_last_reply(turns) == turns[:3]
    assert chat_tab.without_last_reply(turns[:3]) == turns[:3]
    assert chat_tab.without_last_exchange(turns) == (turns[:2], "c")
    assert chat_tab.without_last_exchange([]) == ([], "")
    assert chat_tab.user_turns_of(turns) == ["a", "c"]


def test_turns_table_and_context_meter_show_the_numbers():
    turns = [
        {"role": "user", "content": "a", "tokens": 3},
        {"role": "assistant", "content": "b", "tokens": 7, "time_to_first_token_s": 0.0123,
         "tokens_per_second": 41.26, "finish_reason": "eos"},
    ]  # fmt: skip
    table = chat_tab.turns_html(turns)
    assert "<td>3</td>" in table and "<td>7</td>" in table
    assert "0.012" in table and "41.3" in table and ">eos<" in table
    meter = chat_tab.meter_html(32, 128)
    assert "<b>32</b> of 128 tokens (25 %)" in meter and 'value="32"' in meter


def test_arena_votes_name_their_columns():
    labels = ["m · greedy", "m · top-k 5"]
    assert arena.winner_of("2: m · top-k 5", labels) == 1
    assert arena.winner_of(arena.TIE, labels) is None
    with pytest.raises(ValueError, match="`vote` must be one of"):
        arena.winner_of("3: x", labels)
    assert "beam 5" not in arena.CHAT_PRESETS and "greedy" in arena.CHAT_PRESETS


# ---- the model side ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chat_gen(chat_model_dir):
    return runtime.load(chat_model_dir)


def test_stream_reply_is_gen_chat_with_its_numbers(chat_gen):
    turns = [{"role": "user", "content": "Hello", "tokens": None}]
    updates = list(chat_tab.stream_reply(chat_gen, "Be brief.", turns, CONFIG, {}))
    final, used = updates[-1]
    conversation = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    conversation[1]["content"] = "Hello"
    expected = chat_gen.chat(conversation, CONFIG)[0]
    reply = final[-1]
    assert reply["content"] == expected.text and reply["token_ids"] == expected.token_ids
    assert reply["logprobs"] == pytest.approx(expected.logprobs)
    assert reply["tokens"] == len(expected.token_ids)
    assert reply["finish_reason"] == expected.finish_reason
    assert reply["time_to_first_token_s"] is not None
    assert final[0]["tokens"] == len(chat_gen.tokenizer.encode("Hello").ids)
    assert used == chat_gen.count_chat_tokens(conversation) + len(expected.token_ids)


@pytest.fixture(scope="module")
def client(chat_model_dir, tmp_path_factory):
    from gradio_client import Client

    registry = ModelRegistry({})
    registry.add("tiny-chat", chat_model_dir)
    registry.add("paraphraser", PARAPHRASER)  # the shipped seed 003 model (3 MB)
    assert registry.chat_models() == ["tiny-chat"]
    path = tmp_path_factory.mktemp("votes") / "votes.sqlite"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SCRIPTORIUM_VOTES", str(path))
        demo = app.build(registry)
    url = serve(demo)
    yield Client(url, verbose=False)
    demo.close()


def shown_text(message: dict) -> str:
    """A Chatbot message's text as the API returns it (Gradio 6: a list of typed parts)."""
    return "".join(part["text"] for part in message["content"] if part["type"] == "text")


def test_chat_endpoint_replays_user_turns_as_gen_chat(client, chat_gen):
    asked = ["Hello", "Name a river."]
    chatbot, table, meter, user_turns = client.predict(
        "tiny-chat", "Be brief.", asked, *SETTINGS.values(), api_name="/chat"
    )
    conversation = [{"role": "system", "content": "Be brief."}]
    shown, cut = [], []
    for text in asked:
        conversation.append({"role": "user", "content": text})
        reply = chat_gen.chat(conversation, CONFIG)[0]
        conversation.append({"role": "assistant", "content": reply.text})
        turn = conversation[-1] | {"finish_reason": reply.finish_reason, "settings": SETTINGS}
        marks = chat_tab.reply_marks(turn)  # a reply cut off at 12 tokens says so under it
        shown += [text, f"{reply.text}\n\n{marks}" if marks else reply.text]
        cut.append(reply.finish_reason == "length")
    # The Chatbot shows each message without surrounding whitespace; the session keeps it.
    assert [(m["role"], shown_text(m)) for m in chatbot] == [
        (m["role"], text.strip()) for m, text in zip(conversation[1:], shown)
    ]
    assert ["Cut off" in shown_text(m) for m in chatbot[1::2]] == cut
    assert user_turns == asked
    assert table.count("<tr>") == 5  # the header and four messages
    assert "of 128 tokens" in meter


def test_chat_endpoint_refuses_bad_settings_by_name(client):
    from gradio_client.exceptions import AppError

    bad = dict(SETTINGS, mode="beam search")  # Gradio's Radio refuses it before the function
    with pytest.raises(AppError, match=r"not in the list of choices: \['greedy', 'sampling'\]"):
        client.predict("tiny-chat", "", ["Hi"], *bad.values(), api_name="/chat")
    with pytest.raises(AppError, match="`user_turns` must be a list"):
        client.predict("tiny-chat", "", "Hi", *SETTINGS.values(), api_name="/chat")
    with pytest.raises(AppError, match=r"`top_p` must be in \(0, 1\], got 1.5"):
        client.predict(
            "tiny-chat", "", ["Hi"], *dict(SETTINGS, top_p=1.5).values(), api_name="/chat"
        )


def test_arena_endpoint_streams_each_column_as_gen_chat(client, chat_gen):
    texts_and_rows = client.predict(
        "Name a river.", "", 2, 10, 3, False, "tiny-chat", "greedy", "tiny-chat", "top-k 5",
        api_name="/arena",
    )  # fmt: skip
    *texts, rows, _ = texts_and_rows  # the last: the vote's options, for the page
    conversation = [{"role": "user", "content": "Name a river."}]
    greedy = chat_gen.chat(conversation, runtime.GenerationConfig(max_new_tokens=10, seed=3))
    top_k = runtime.GenerationConfig(max_new_tokens=10, do_sample=True, top_k=5, seed=3)
    assert texts[:2] == [greedy[0].text, chat_gen.chat(conversation, top_k)[0].text]
    assert texts[2:] == ["", ""]
    assert rows["headers"][-1] == "mean log p" and len(rows["data"][0]) == len(rows["headers"]) == 9
    assert [row[:3] for row in rows["data"]] == [
        [1, "tiny-chat", "greedy"],
        [2, "tiny-chat", "top-k 5"],
    ]


def test_paraphrase_beside_chat_scores_both_methods_alike(client, chat_gen):
    sentence = "The Lord is my shepherd; I shall not lack."
    table = client.predict(
        "paraphraser", "tiny-chat", sentence, 20, 4, api_name="/paraphrase_beside_chat"
    )
    rows = table["data"]
    assert table["headers"] == chat_paraphrase.HEADERS
    assert [row[0] for row in rows] == ["seed 003 (paraphraser)"] * 4 + ["chat (tiny-chat)"] * 4
    paraphraser = runtime.load(PARAPHRASER)
    closest = paraphraser.paraphrase(sentence, 20, seed=4)[:4]
    assert [row[1] for row in rows[:4]] == [c.text for c in closest]
    # Scored one sentence at a time, as the chat replies: near the ranking's batched distances
    # (the int8 encoder's activation scale depends on the batch).
    alone = chat_paraphrase.distances(paraphraser, sentence, [c.text for c in closest])
    assert [row[3] for row in rows[:4]] == [round(d, 3) for d in alone]
    assert alone == pytest.approx([c.distance for c in closest], abs=0.05)
    replies = chat_paraphrase.chat_candidates(chat_gen, sentence, 4, 4)
    assert [row[1] for row in rows[4:]] == replies
    for _, text, score, _ in rows:
        assert score == round(chat_paraphrase.chrf(text, sentence), 1)
    assert chat_paraphrase.chrf(sentence, sentence) == 100.0
