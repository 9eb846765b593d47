"""bench/serve_peers.py without llama-server or a model: the workload (a system prompt of exactly
200 tokens, conversations new every round, the slot-size check), the statistics and the table,
one streamed reply read from a stand-in OpenAI-compatible server, the command lines, the
arguments, and the skip message when the peer is not built.

Does not cover: building llama-server or timing the two real servers (the benchmark itself,
`python -m bench serve-peers`).
"""

from __future__ import annotations

import json
import threading
import types
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from bench import cli, llama_server_build, serve_peers, serve_peers_plot, serve_peers_schemas
from bench.schemas import MAX_TOKENS, SCHEMAS
from bench.serve_peers import NEW_TOKENS, OURS, PEER, Reply


@pytest.fixture(scope="module")
def tokenizer():
    """A small byte-level BPE trained on the system text, as the flagship's tokenizer is."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator([serve_peers.SYSTEM_TEXT] * 4, trainer)
    return tok


def count(tokenizer, text: str) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False).ids)


@pytest.mark.parametrize("tokens", [1, 37, 200, 500])
def test_system_prompt_encodes_to_exactly_the_asked_tokens(tokenizer, tokens):
    text = serve_peers.system_prompt(tokenizer, tokens)
    assert count(tokenizer, text) == tokens
    assert serve_peers.SYSTEM_TEXT.startswith(text[:20])


def test_system_prompt_refuses_no_tokens(tokenizer):
    with pytest.raises(ValueError, match=r"`tokens` must be >= 1, got 0"):
        serve_peers.system_prompt(tokenizer, 0)


def test_conversations_are_three_turns_and_new_every_round():
    conversations = [serve_peers.user_turns(c, r) for c in range(64) for r in range(4)]
    assert all(len(turns) == serve_peers.TURNS for turns in conversations)
    first_turns = [turns[0] for turns in conversations]
    assert len(set(first_turns)) == len(first_turns)


def test_the_longest_conversation_is_checked_against_a_slot(tokenizer):
    system = serve_peers.system_prompt(tokenizer)
    longest = serve_peers.longest_conversation(tokenizer, system, clients=64, rounds=3)
    users = count(tokenizer, "".join(serve_peers.user_turns(0, 1)))
    assert longest > serve_peers.SYSTEM_TOKENS + users + 3 * NEW_TOKENS
    serve_peers.check_fits(longest)
    with pytest.raises(ValueError, match=rf"one slot of 100 tokens, got up to {longest}$"):
        serve_peers.check_fits(longest, slot_context=100)


def test_level_summary_and_table_of_made_up_rounds():
    fast = Reply(ttft_s=0.1, gaps_s=[0.01, 0.02], tokens=NEW_TOKENS)
    slow = Reply(ttft_s=0.3, gaps_s=[0.03], tokens=NEW_TOKENS)
    short = Reply(ttft_s=0.2, gaps_s=[], tokens=10)
    ours = serve_peers.level_summary([1.0, 2.0], [[fast, slow], [fast, short]])
    assert ours["tokens_per_second"] == pytest.approx((128 + 74 / 2) / 2)
    assert ours["ttft_p50_s"] == pytest.approx(0.15)
    assert ours["ttft_p95_s"] == pytest.approx(0.285)
    assert ours["itl_p95_s"] == pytest.approx(0.028)  # gaps 0.01, 0.01, 0.02, 0.02, 0.03
    assert (ours["requests"], ours["errors"], ours["short_replies"]) == (4, 0, 1)
    failed = Reply(error="APIConnectionError: refused")
    peer = serve_peers.level_summary([1.0], [[slow, failed]])
    assert (peer["errors"], peer["first_errors"]) == (1, ["APIConnectionError: refused"])
    assert peer["ttft_p95_s"] == pytest.approx(0.3)
    rss = {"peak_tree_pss_mb": 1234.4, "peak_engine_pss_mb": 600.0}
    rss["cpu_ms_per_token"] = {"client": 1.0, "engine": 12.0, "proxy": 2.5}
    results = [
        {"server": PEER, "clients": 2, **peer, **rss},
        {"server": OURS, "clients": 2, **ours, **rss},
    ]
    rows = serve_peers.results_table(results).splitlines()[2:]
    assert rows == [
        "| 2 | scriptorium serve | 82.5 | 1.29× | 150 | 285 | 28 | 0 / 1 | 1,234 (600) | "
        "engine 12.0, proxy 2.5, client 1.0 |",
        "| 2 | llama-server | 64.0 | 1.00× | 300 | 300 | 30 | 1 / 0 | 1,234 (600) | "
        "engine 12.0, proxy 2.5, client 1.0 |",
    ]


def test_a_level_without_any_answer_has_no_latencies():
    summary = serve_peers.level_summary([1.0], [[Reply(error="boom")]])
    assert summary["ttft_p50_s"] is None and summary["itl_p95_s"] is None
    assert summary["tokens_per_second"] == 0.0


class _StreamingChat(BaseHTTPRequestHandler):
    """POST /v1/chat/completions as server-sent events: a role chunk, three content chunks,
    a usage chunk, [DONE]; the request body is kept on the server."""

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.bodies.append(body)
        if not body.get("stream"):
            self._answer_whole(body)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        base = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
        deltas = [{"role": "assistant", "content": ""}, {"content": "Hel"}, {"content": "lo"}]
        deltas.append({"content": "!"})
        for delta in deltas:
            choice = {"index": 0, "delta": delta, "finish_reason": None}
            self._event({**base, "choices": [choice]})
        usage = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
        self._event({**base, "choices": [], "usage": usage})
        self.wfile.write(b"data: [DONE]\n\n")

    def _answer_whole(self, body):
        """A chat.completion whose content is the server's `document`."""
        message = {"role": "assistant", "content": self.server.document}
        answer = {
            "id": "c",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 9, "total_tokens": 14},
        }
        payload = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _event(self, payload):
        self.wfile.write(f"data: {json.dumps(payload)}\n\n".encode())
        self.wfile.flush()

    def log_message(self, *args):
        pass


@pytest.fixture
def stand_in():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _StreamingChat)
    server.bodies, server.document = [], ""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


@pytest.mark.parametrize("name", [OURS, PEER])
def test_a_streamed_reply_is_timed_and_counted(stand_in, name):
    import openai

    url = f"http://127.0.0.1:{stand_in.server_address[1]}/v1"
    client = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=30)
    server = types.SimpleNamespace(name=name, model="m")
    replies = serve_peers.converse(client, server, "Be brief.", ["Hi", "Again"])
    assert [(r.text, r.tokens, r.error, len(r.gaps_s)) for r in replies] == [
        ("Hello!", 3, None, 2)
    ] * 2
    assert all(r.ttft_s > 0 for r in replies)
    first, second = stand_in.bodies
    assert (first["temperature"], first["max_tokens"], first["stream"]) == (0, NEW_TOKENS, True)
    assert first["stream_options"] == {"include_usage": True}
    exact = {"min_tokens": NEW_TOKENS} if name == OURS else {"ignore_eos": True}
    assert {k: first[k] for k in exact} == exact
    assert second["messages"][1:] == [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Again"},
    ]


def test_a_failed_request_is_an_error_and_ends_the_conversation():
    import openai

    client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="none", max_retries=0)
    server = types.SimpleNamespace(name=PEER, model="m")
    replies = serve_peers.converse(client, server, "Be brief.", ["Hi", "Again"])
    assert len(replies) == 1 and replies[0].error.startswith("APIConnectionError")


def test_command_lines_name_threads_slots_and_context():
    peer = serve_peers.peer_command(Path("/bin/llama-server"), Path("m.gguf"), 2, 16, 8081)
    flags = dict(zip(peer[1::2], peer[2::2]))
    assert flags["--threads"] == flags["--threads-batch"] == "2"
    assert flags["--parallel"] == "16"
    assert flags["--ctx-size"] == str(16 * serve_peers.SLOT_CONTEXT)
    assert flags["--host"] == "127.0.0.1" and {"--cont-batching", "--cache-prompt"} <= set(peer)
    ours = serve_peers.ours_command(Path("m.gguf"), 2, 16, 8082)
    assert ours[1:3] == ["-m", "serve"] and "--ray" not in ours and "--num-cpus" not in ours
    ours_flags = dict(zip(ours[5::2], ours[6::2]))
    assert ours_flags["--threads-per-replica"] == "2"
    assert (ours_flags["--max-ongoing"], ours_flags["--host"]) == ("16", "127.0.0.1")
    on_ray = serve_peers.ours_command(Path("m.gguf"), 2, 16, 8083, ray=True)
    assert "--ray" in on_ray and on_ray[on_ray.index("--num-cpus") + 1] == "2"
    assert serve_peers.role_of(ours) == serve_peers.ENGINE  # one process: all of it the engine


def test_the_peer_is_skipped_with_a_reason_when_not_built(tmp_path):
    binary, reason = serve_peers.peer_or_reason(tmp_path, build=False)
    assert binary is None
    assert reason.startswith(f"llama-server {serve_peers.PEER_VERSION} is not built in ")
    assert str(tmp_path) in reason and "--no-build" in reason
    built = llama_server_build.peer_binary(tmp_path)
    built.parent.mkdir(parents=True)
    built.write_text("")
    assert serve_peers.peer_or_reason(tmp_path, build=False) == (built, None)


def test_arguments_defaults_and_refusals(capsys):
    args = serve_peers.parse_args([])
    assert (args.clients, args.rounds, args.threads, args.build) == ([1, 4, 16, 64], 3, 2, True)
    assert args.out.name == "serve_peers.json" and args.plot.name == "serve_peers.png"
    contended = serve_peers.parse_args(["--contended", "--no-build", "--clients", "1", "4"])
    assert contended.out.name == "serve_peers-contended.json" and not contended.build
    assert serve_peers.parse_args(["--schemas"]).out.name == "serve_peers-schemas.json"
    for bad, said in (
        (["--rounds", "0"], "`--rounds` must be >= 1, got 0"),
        (["--clients", "4", "0"], "`--clients` must all be >= 1, got [4, 0]"),
    ):
        with pytest.raises(SystemExit):
            serve_peers.parse_args(bad)
        assert said in capsys.readouterr().err
    assert cli.BENCHMARKS["serve-peers"] == "bench.serve_peers"


def test_the_plot_is_a_png(tmp_path):
    row = {"tokens_per_second": 100.0, "ttft_p95_s": 0.2, "peak_tree_pss_mb": 900.0}
    row["peak_engine_pss_mb"] = 400.0
    results = [{"server": s, "clients": c, **row} for s in (OURS, PEER) for c in (1, 4)]
    path = tmp_path / "plot.png"
    serve_peers_plot.plot(results, path, "test")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "document, problem",
    [
        ('{"name": "Abraham", "age": 100}', None),
        ('{"name": "Abraham", "age": 300}', "invalid: 300 is greater than the maximum of 150"),
        ('{"name": "Abraham", "age"', "not JSON: "),
    ],
)
def test_a_schema_request_asks_for_the_schema_and_validates_the_reply(stand_in, document, problem):
    import openai

    stand_in.document = document
    url = f"http://127.0.0.1:{stand_in.server_address[1]}/v1"
    client = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=30)
    person = SCHEMAS[0]
    asked = serve_peers_schemas.ask(client, types.SimpleNamespace(model="m"), person, MAX_TOKENS)
    assert asked["tokens"] == 9 and asked["seconds"] > 0
    assert (asked["problem"] or "").startswith(problem or "") and (problem is None) == (
        asked["problem"] is None
    )
    (body,) = stand_in.bodies
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "person", "schema": person.schema, "strict": True},
    }
    assert (body["temperature"], body["max_tokens"]) == (0, MAX_TOKENS)
    assert body["messages"] == [{"role": "user", "content": person.prompt}]


def test_a_refused_schema_request_is_counted_apart():
    import openai

    client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="none", max_retries=0)
    asked = serve_peers_schemas.ask(client, types.SimpleNamespace(model="m"), SCHEMAS[0], 8)
    assert asked["problem"].startswith("refused: APIConnectionError")


def test_the_schema_table_counts_and_names_the_schemas_where_servers_differ():
    def row(schema, server, problem, tokens=20):
        return {
            "round": 1,
            "schema": schema,
            "server": server,
            "tokens": tokens,
            "seconds": 1.0,
            "problem": problem,
        }

    rows = [
        row("person", OURS, None),
        row("person", PEER, None),
        row("address", OURS, None),
        row("address", PEER, "refused: BadRequestError: bad pattern", tokens=0),
        row("timeline", OURS, "invalid: too short"),
        row("timeline", PEER, "not JSON: cut", tokens=40),
    ]
    assert serve_peers_schemas.schemas_table(rows).splitlines()[2:] == [
        "| scriptorium serve | 3 | 2 | 1 | 0 | 20.0 | 1.00 |",
        "| llama-server | 3 | 1 | 1 | 1 | 20.0 | 1.00 |",
        "",
        "- address: scriptorium serve: valid; llama-server: refused: BadRequestError: bad pattern",
    ]
