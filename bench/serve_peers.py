"""Chat serving over HTTP: `scriptorium serve` against llama.cpp's `llama-server`, same GGUF.

    python -m bench serve-peers [--clients 1 4 16 64] [--rounds 3] [--threads 2] [--contended]
                                [--together] [--peer-slots clients|max] [--schemas] [--no-build]
                                [--out FILE] [--plot FILE] [--work DIR]

The run the lead makes on a quiet machine (then again with `--contended`):

    nice -n 10 python -m bench serve-peers --clients 1 4 16 64 --rounds 3

Both servers serve the flagship's GGUF (SmolLM2-135M-Instruct Q4_1, convert/fetch.py) with
`--threads` threads each. By default one server is up at a time, through all its levels and
rounds, then stopped before the other starts: an idle Ray cluster runs processes of its own (its
controller, raylet, dashboard), and beside them llama-server's threads, which meet at a barrier
after every graph node, lose most of their speed (docs/BENCHMARKS.md); `--together` keeps both
up for the whole run with rounds interleaved instead:

- ours: `python -m serve --models GGUF --threads-per-replica T --max-ongoing N` (its default:
  one process; the GGUF converted once, convert/flagship.py; batching and whatever prefix
  caching runtime/engine.py does are its defaults); with `--with-ray` also "scriptorium serve
  (Ray)", the same on a local Ray cluster of T CPUs (`--ray --num-cpus T`);
- the peer: `llama-server` built from the llama.cpp that llama-cpp-python's sdist
  (`PEER_VERSION`) vendors, with `peer_command`'s flags: T threads for decoding and for
  prompts, `--parallel N` slots of `SLOT_CONTEXT` tokens each, continuous batching and prompt
  caching on (its chat-server defaults, named anyway). With `--peer-slots clients` (the
  default) N is each level's C: llama-server is restarted (and warmed up again) with one slot
  per client, as its README sizes it; `--peer-slots max` keeps the largest C's slots for every
  level. It is built once per machine under `--work` (bench/llama_server_build.py, ≈ 10+
  minutes on 2 busy cores), never by the install or the tests; `--no-build` skips it.

Ours' N is the largest `--clients`. Each of C clients holds a 3-turn conversation through the
`openai` client (`chat.completions.create(stream=True)`): a system prompt of exactly `SYSTEM_TOKENS`
tokens (the flagship's tokenizer) shared by every client and both servers, then three user
turns of its own (new ones every round, so no server can replay a whole conversation from its
cache), each answered with exactly `NEW_TOKENS` tokens at temperature 0 (greedy): ours is sent
`min_tokens`, llama-server `ignore_eos`. Each reply's text goes into the next turn's history, as
a chat client does. Per (server, C) it reports the aggregate output tokens/s (every reply's
tokens over the wall time until the last conversation ends; median over rounds), time to first
token p50 / p95 (request sent → first content chunk), inter-token latency p95 (gaps between
content chunks), failed requests, replies not exactly `NEW_TOKENS` tokens long, and the peak
memory of the server's whole process tree (ours on Ray: the driver, its cluster processes and the
replica) as the sum of each process's PSS (RSS with shared pages split between their users, so
Ray's shared memory and libraries count once) and of its engine process (ours' replica,
llama-server itself), sampled every `RSS_INTERVAL_S`, and the CPU milliseconds per output token
of each part (`role_of`: the engine; ours' gateway, HTTP proxy and the rest of Ray; the
clients). With `--together`, rounds interleave the servers, alternating which goes first, so a
slow spell on a shared host falls on both. The
clients run in this process, on the same cores. `--contended` keeps one plain busy Python loop
running in a child process for the whole timed part. The plot (`--plot`, matplotlib) shows
tokens/s, TTFT p95 and peak memory against clients. `--schemas` runs bench/schemas.py's
structured-output set on the same two servers instead (bench/serve_peers_schemas.py).

This module does not cover the in-process app or Ray Serve replica layouts (bench/serve.py),
nor single-stream decode speed against llama-cpp-python (bench/llm.py).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from . import common
from . import llama_server_build as build
from .llama_server_build import PEER_VERSION, peer_or_reason, peer_version
from .serve import _free_port, percentile
from .serve_peers_schemas import OURS, OURS_RAY, PEER

SERVERS = (OURS, OURS_RAY, PEER)  # in every table's order

SYSTEM_TOKENS = 200
TURNS = 3
NEW_TOKENS = 64
# Per llama-server slot: the longest conversation must fit (`check_fits`); more would only
# grow the peer's KV cache, which it allocates for every slot up front.
SLOT_CONTEXT = 768
TEMPLATE_TOKENS_PER_MESSAGE = 8  # SmolLM2's "<|im_start|>role\n … <|im_end|>\n" is 5
RSS_INTERVAL_S = 0.25
READY_TIMEOUT_S = 900  # ours converts the GGUF on a first start and starts a Ray cluster

SYSTEM_TEXT = (
    "You are Quill, the reference librarian of a small public library by the harbour. You "
    "answer visitors' questions plainly and kindly, in short paragraphs, and you never invent "
    "titles, dates or quotations: when you are not sure, you say so and suggest where in the "
    "library the answer could be found. The library holds local history, maritime records, a "
    "children's corner, maps of the coast going back two centuries, and a small collection of "
    "cookery books donated by the fishermen's guild. Opening hours are nine to six on weekdays "
    "and ten to four on Saturdays; it is closed on Sundays and public holidays. Visitors may "
    "borrow up to eight books for three weeks, renew them twice, and reserve books that are out "
    "on loan. The reading room is quiet; the garden room is for groups and talks. When a child "
    "asks a question, use simple words and one idea per sentence. When someone asks about the "
    "harbour's history, mention the lighthouse of 1852, the great storm of 1903 and the ferry "
    "that ran until 1968, but only if they are relevant to the question. "
)
TOPICS = ("lighthouses", "tides", "bread", "old maps", "ferries", "storms", "seabirds", "rope")
USER_TURNS = (
    "Hello! Conversation {tag}. Could you tell me something about {topic}?",
    "Thanks. What would a child find most surprising about {topic}?",
    "Please sum up what you said about {topic} in two sentences.",
)


# ---- the workload ------------------------------------------------------------------------------


def system_prompt(tokenizer, tokens: int = SYSTEM_TOKENS) -> str:
    """`SYSTEM_TEXT` (repeated as needed) cut to a text that `tokenizer` (a `tokenizers.Tokenizer`)
    encodes to exactly `tokens` tokens; ValueError if no cut does."""
    if tokens < 1:
        raise ValueError(f"`tokens` must be >= 1, got {tokens}")
    text = SYSTEM_TEXT
    while len(tokenizer.encode(text, add_special_tokens=False).ids) < tokens:
        text += SYSTEM_TEXT
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    cut = tokens
    for _ in range(8):  # a cut inside a merge re-encodes a token or two off: move the cut
        candidate = tokenizer.decode(ids[:cut]).strip()
        got = len(tokenizer.encode(candidate, add_special_tokens=False).ids)
        if got == tokens:
            return candidate
        cut += tokens - got
    raise ValueError(f"no cut of the system text encodes to exactly {tokens} tokens")


def user_turns(client: int, round_: int) -> list[str]:
    """The user's messages of client `client`'s conversation in round `round_`: new text every
    round (the tag), so only the shared system prompt repeats across conversations.

    >>> user_turns(2, 1)[0]
    'Hello! Conversation 1.2. Could you tell me something about old maps?'
    """
    topic = TOPICS[(client + round_) % len(TOPICS)]
    return [turn.format(tag=f"{round_}.{client}", topic=topic) for turn in USER_TURNS]


def longest_conversation(tokenizer, system: str, clients: int, rounds: int) -> int:
    """An upper bound on the tokens of any conversation's last turn plus its reply: the system
    prompt, every user turn, every reply, and `TEMPLATE_TOKENS_PER_MESSAGE` per message."""

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    users = max(
        sum(count(turn) for turn in user_turns(client, round_))
        for client in range(clients)
        for round_ in range(rounds + 1)  # round 0 is the warm-up's
    )
    messages = 1 + 2 * TURNS
    return count(system) + users + TURNS * NEW_TOKENS + messages * TEMPLATE_TOKENS_PER_MESSAGE


def check_fits(tokens: int, slot_context: int = SLOT_CONTEXT) -> None:
    """ValueError unless a conversation of `tokens` tokens fits one llama-server slot."""
    if tokens > slot_context:
        raise ValueError(
            f"a conversation must fit one slot of {slot_context} tokens, got up to {tokens}"
        )


# ---- statistics --------------------------------------------------------------------------------


@dataclass
class Reply:
    """One streamed chat completion, as the client saw it."""

    ttft_s: float | None = None  # request sent → first content chunk
    gaps_s: list[float] = field(default_factory=list)  # between successive content chunks
    tokens: int = 0  # completion tokens (the usage chunk's count, else content chunks)
    text: str = ""
    error: str | None = None


def level_summary(walls: list[float], replies: list[list[Reply]]) -> dict:
    """The numbers of one (server, clients) level over its rounds: `walls[r]` is round r's wall
    time and `replies[r]` its replies.

    >>> ok = Reply(ttft_s=0.5, gaps_s=[0.1, 0.3], tokens=64)
    >>> s = level_summary([2.0, 4.0], [[ok, ok], [ok, Reply(error="timeout")]])
    >>> s["tokens_per_second"], s["ttft_p50_s"], s["errors"], s["short_replies"]
    (40.0, 0.5, 1, 0)
    """
    rates = [sum(r.tokens for r in round_) / wall for wall, round_ in zip(walls, replies)]
    every = [reply for round_ in replies for reply in round_]
    answered = [r for r in every if r.error is None and r.ttft_s is not None]
    ttfts = [r.ttft_s for r in answered]
    gaps = [gap for r in answered for gap in r.gaps_s]
    return {
        "tokens_per_second": statistics.median(rates),
        "tokens_per_second_runs": rates,
        "ttft_p50_s": percentile(ttfts, 50) if ttfts else None,
        "ttft_p95_s": percentile(ttfts, 95) if ttfts else None,
        "itl_p95_s": percentile(gaps, 95) if gaps else None,
        "requests": len(every),
        "errors": sum(r.error is not None for r in every),
        "short_replies": sum(r.error is None and r.tokens != NEW_TOKENS for r in every),
        "first_errors": sorted({r.error for r in every if r.error})[:3],
    }


def results_table(results: list[dict]) -> str:
    """One row per (clients, server), ours first; "× peer" is ours over llama-server's."""
    rows = []
    for clients in sorted({r["clients"] for r in results}):
        level = {r["server"]: r for r in results if r["clients"] == clients}
        for server in SERVERS:
            if server not in level:
                continue
            r, peer = level[server], level.get(PEER)
            ratio = r["tokens_per_second"] / peer["tokens_per_second"] if peer else None
            rows.append(
                [
                    clients,
                    server,
                    r["tokens_per_second"],
                    f"{ratio:.2f}×" if ratio else "",
                    _ms(r["ttft_p50_s"]),
                    _ms(r["ttft_p95_s"]),
                    _ms(r["itl_p95_s"]),
                    f"{r['errors']} / {r['short_replies']}",
                    f"{r['peak_tree_pss_mb']:,.0f} ({r['peak_engine_pss_mb']:,.0f})",
                    cpu_column(r["cpu_ms_per_token"]),
                ]
            )
    header = [
        "clients",
        "server",
        "output tok/s",
        "× llama-server",
        "TTFT p50 ms",
        "TTFT p95 ms",
        "ITL p95 ms",
        "errors / short",
        "peak PSS MB: tree (engine)",
        "CPU ms / token",
    ]
    return common.markdown_table(header, rows)


def cpu_column(per_role: dict[str, float]) -> str:
    """CPU milliseconds per output token by role, the engine first, the client last.

    >>> cpu_column({"client": 1.25, "engine": 20.0, "proxy": 3.0})
    'engine 20.0, proxy 3.0, client 1.2'
    """
    order = sorted(per_role, key=lambda role: (role != ENGINE, role == "client", role))
    return ", ".join(f"{role} {per_role[role]:.1f}" for role in order)


def _ms(seconds: float | None) -> str:
    return "" if seconds is None else f"{seconds * 1000:,.0f}"


def peer_command(binary: Path, gguf: Path, threads: int, parallel: int, port: int) -> list[str]:
    """The peer's command line; every flag that matters is spelled out, defaults included."""
    return [
        str(binary),
        *("--model", str(gguf), "--host", "127.0.0.1", "--port", str(port)),
        *("--threads", str(threads), "--threads-batch", str(threads)),
        *("--parallel", str(parallel), "--ctx-size", str(parallel * SLOT_CONTEXT)),
        "--cont-batching",
        "--cache-prompt",
    ]


def ours_command(
    gguf: Path, threads: int, parallel: int, port: int, ray: bool = False
) -> list[str]:
    """Ours' command line: at its default, one process, or with `ray` on a local Ray cluster of
    `threads` CPUs."""
    where = ("--ray", "--num-cpus", str(threads)) if ray else ()
    return [
        *(sys.executable, "-m", "serve", "--models", str(gguf), *where),
        *("--host", "127.0.0.1", "--port", str(port)),
        *("--threads-per-replica", str(threads), "--max-ongoing", str(max(parallel, 1))),
    ]


# ---- the servers -------------------------------------------------------------------------------


class Server:
    """A server process started with `command`, its log in `log`, its process tree's memory
    sampled in a thread until `stop`."""

    def __init__(self, name: str, command: list[str], port: int, log: Path):
        self.name, self.log = name, log
        self._start(command, port)
        self.model = None
        self.peak_tree = self.peak_process = 0  # bytes since the last `take_peaks`
        self.run_peak_tree = self.run_peak_process = 0  # bytes over the whole run
        self._done = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _start(self, command: list[str], port: int) -> None:
        self.command = command
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self.process = subprocess.Popen(
            command, stdout=open(self.log, "a"), stderr=subprocess.STDOUT, start_new_session=True
        )

    def restart(self, command: list[str], port: int) -> None:
        """Stop the process and start `command` in its place, listening on `port`; ready when
        this returns. Memory peaks carry on."""
        self._end_process()
        self._start(command, port)
        self.wait_ready()

    def _tree(self) -> list:
        import psutil

        root = psutil.Process(self.process.pid)
        return [root, *root.children(recursive=True)]

    def _sample(self) -> None:
        import psutil

        while not self._done.wait(RSS_INTERVAL_S):
            tree, engine = 0, 0
            try:
                processes = self._tree()
            except psutil.Error:
                continue
            for process in processes:
                try:
                    pss = process.memory_full_info().pss
                    role = role_of(process.cmdline())
                except psutil.Error:  # it ended between the listing and the reading
                    continue
                tree += pss
                engine += pss if role == ENGINE else 0
            self.peak_tree = max(self.peak_tree, tree)
            self.peak_process = max(self.peak_process, engine)
            self.run_peak_tree = max(self.run_peak_tree, self.peak_tree)
            self.run_peak_process = max(self.run_peak_process, self.peak_process)

    def take_peaks(self) -> tuple[float, float]:
        """(tree PSS, engine process PSS) peaks in MB since the last call, then start afresh."""
        peaks = self.peak_tree / 1e6, self.peak_process / 1e6
        self.peak_tree = self.peak_process = 0
        return peaks

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds (user + system) its live processes have used so far, by `role_of`."""
        import psutil

        seconds: dict[str, float] = {}
        for process in self._tree():
            try:
                times, role = process.cpu_times(), role_of(process.cmdline())
            except psutil.Error:
                continue
            seconds[role] = seconds.get(role, 0.0) + times.user + times.system
        return seconds

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Poll GET /models until it lists a model (kept in `model`); RuntimeError naming the
        log if the process ends or `timeout` passes first."""
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited ({self.process.returncode}) while starting: {self.log}"
                )
            try:
                listed = httpx.get(self.base_url + "/models", timeout=5).json()["data"]
                if listed:
                    self.model = listed[0]["id"]
                    return
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            time.sleep(1)
        raise RuntimeError(f"{self.name} was not ready after {timeout:g} s: {self.log}")

    def stop(self) -> None:
        """SIGTERM to its session (ours stops its Ray cluster on it), SIGKILL after 60 s."""
        self._done.set()
        self._end_process()

    def _end_process(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


ENGINE = "engine"
# Ray's process titles of ours' parts; every other process of ours is Ray's own (driver, GCS,
# raylet, controller, dashboard and agents)
RAY_ROLES = (
    ("ServeReplica:scriptorium:model", ENGINE),
    ("ServeReplica:scriptorium:gateway", "gateway"),
    ("ProxyActor", "proxy"),
)


def role_of(cmdline: list[str]) -> str:
    """The part a server's process plays: the one that runs the model (`ENGINE`: ours in one
    process, or its replica on Ray; llama-server), ours' gateway or HTTP proxy, or the rest of
    Ray ("ray", the `--ray` command's own process included).

    >>> role_of(["ray::ServeReplica:scriptorium:gateway"]), role_of(["/x/llama-server", "-m"])
    ('gateway', 'engine')
    >>> ours = ["python", "-m", "serve", "--port", "8000"]
    >>> role_of(ours), role_of([*ours, "--ray"])
    ('engine', 'ray')
    """
    line = " ".join(cmdline)
    one_process = cmdline[1:3] == ["-m", "serve"] and "--ray" not in cmdline
    if cmdline and Path(cmdline[0]).name == "llama-server" or one_process:
        return ENGINE
    return next((role for title, role in RAY_ROLES if title in line), "ray")


def exact_length_body(server: str) -> dict:
    """The request fields beyond OpenAI's that make a reply exactly `NEW_TOKENS` tokens."""
    return {"ignore_eos": True} if server == PEER else {"min_tokens": NEW_TOKENS}


def stream_reply(client, server: Server, messages: list[dict]) -> Reply:
    """One streamed greedy chat completion of `NEW_TOKENS` tokens; a failure is kept in
    `Reply.error`, not raised."""
    reply = Reply()
    last = start = time.perf_counter()
    try:
        stream = client.chat.completions.create(
            model=server.model,
            messages=messages,
            max_tokens=NEW_TOKENS,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
            extra_body=exact_length_body(server.name),
        )
        chunks = 0
        for chunk in stream:
            if chunk.usage is not None:
                reply.tokens = chunk.usage.completion_tokens
            content = chunk.choices[0].delta.content if chunk.choices else None
            if not content:
                continue
            now = time.perf_counter()
            if reply.ttft_s is None:
                reply.ttft_s = now - start
            else:
                reply.gaps_s.append(now - last)
            last = now
            chunks += 1
            reply.text += content
        reply.tokens = reply.tokens or chunks
    except Exception as error:  # any failure of one request is counted, the level goes on
        reply.error = f"{type(error).__name__}: {str(error)[:160]}"
    return reply


def converse(client, server: Server, system: str, turns: list[str]) -> list[Reply]:
    """A whole conversation: each user turn, answered, its reply kept in the history."""
    messages = [{"role": "system", "content": system}]
    replies = []
    for turn in turns:
        messages.append({"role": "user", "content": turn})
        reply = stream_reply(client, server, messages)
        replies.append(reply)
        if reply.error:
            break
        messages.append({"role": "assistant", "content": reply.text})
    return replies


def run_level(
    client, server: Server, system: str, clients: int, round_: int
) -> tuple[float, list[Reply]]:
    """(wall seconds, every reply) of `clients` conversations at once."""
    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        conversations = pool.map(
            lambda number: converse(client, server, system, user_turns(number, round_)),
            range(clients),
        )
        replies = [reply for conversation in conversations for reply in conversation]
    return time.perf_counter() - start, replies


def measure(
    servers: list[Server],
    system: str,
    client_counts: list[int],
    rounds: int,
    for_load: dict | None = None,
) -> list:
    """Per (server, clients) the `level_summary` plus peak memory and CPU per token; rounds
    interleave the servers, the first of them alternating from round to round. `for_load`:
    {server name: clients -> (command, port)}, a server set up for each level's load, restarted
    (and warmed up again) when its command changes."""
    import openai

    clients = {}

    def client_of(server: Server):
        if server.base_url not in clients:
            clients[server.base_url] = openai.OpenAI(
                base_url=server.base_url, api_key="none", max_retries=0, timeout=600
            )
        return clients[server.base_url]

    def set_up(server: Server, count: int) -> None:
        command, port = (for_load or {}).get(server.name, lambda _: (server.command, 0))(count)
        if command != server.command:
            server.restart(command, port)
            run_level(client_of(server), server, system, 1, 0)  # warm again: a fresh cache

    for server in servers:  # warm-up (round 0): first calls, caches of the system prompt
        set_up(server, client_counts[0])
        run_level(client_of(server), server, system, 1, 0)
    samples = {(s.name, c): ([], []) for s in servers for c in client_counts}
    peaks = {key: (0.0, 0.0) for key in samples}
    cpu = {key: {} for key in samples}  # CPU seconds by role (and "client": this process's)
    commands = {}
    for round_ in range(1, rounds + 1):
        for count in client_counts:
            ordered = servers if round_ % 2 else servers[::-1]
            for server in ordered:
                set_up(server, count)
                server.take_peaks()
                before, client_before = server.cpu_seconds(), _own_cpu_seconds()
                wall, replies = run_level(client_of(server), server, system, count, round_)
                tree, largest = server.take_peaks()
                key = server.name, count
                commands[key] = server.command
                after = {**server.cpu_seconds(), "client": _own_cpu_seconds() - client_before}
                for role, seconds in after.items():
                    cpu[key][role] = cpu[key].get(role, 0.0) + seconds - before.get(role, 0.0)
                samples[key][0].append(wall)
                samples[key][1].append(replies)
                peaks[key] = max(peaks[key][0], tree), max(peaks[key][1], largest)
                tokens = sum(r.tokens for r in replies)
                failed = sum(r.error is not None for r in replies)
                print(
                    f"round {round_}/{rounds} {server.name:>17} × {count:>2} clients: "
                    f"{tokens / wall:7.1f} tok/s, {failed} errors, {tree:,.0f} MB",
                    flush=True,
                )
    return [
        {
            "server": name,
            "clients": count,
            **level_summary(walls, replies),
            "peak_tree_pss_mb": peaks[name, count][0],
            "peak_engine_pss_mb": peaks[name, count][1],
            "command": commands[name, count],
            "cpu_ms_per_token": {
                role: 1000 * seconds / max(1, sum(r.tokens for rs in replies for r in rs))
                for role, seconds in sorted(cpu[name, count].items())
            },
        }
        for (name, count), (walls, replies) in samples.items()
    ]


def _own_cpu_seconds() -> float:
    """CPU seconds this process (the clients, and the samplers) has used so far."""
    times = os.times()
    return times.user + times.system


def busy_process() -> subprocess.Popen:
    """One plain busy loop competing for the cores (`--contended`)."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


# ---- plot and main -----------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench serve-peers", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2, help="threads of each server")
    parser.add_argument("--contended", action="store_true", help="a busy process beside both")
    parser.add_argument(
        "--together",
        dest="apart",
        action="store_false",
        help="both servers up for the whole run, rounds interleaved (default: one server at a "
        "time, so neither's processes run beside the other's levels)",
    )
    parser.add_argument(
        "--peer-slots",
        choices=("clients", "max"),
        default="clients",
        help="llama-server's --parallel: each level's clients (restarted per level, default) "
        "or the largest --clients for every level",
    )
    parser.add_argument(
        "--with-ray", action="store_true", help=f"also {OURS_RAY!r}: ours on a local Ray cluster"
    )
    parser.add_argument(
        "--schemas", action="store_true", help="bench/schemas.py's structured outputs instead"
    )
    parser.add_argument(
        "--no-build", dest="build", action="store_false", help="skip the peer if not built"
    )
    parser.add_argument("--gguf", type=Path, default=None, help="default: the flagship's")
    parser.add_argument("--work", type=Path, default=common.DEFAULT_WORK)
    parser.add_argument("--out", type=Path, default=None, help="default: bench/results/…json")
    parser.add_argument("--plot", type=Path, default=None, help="default: docs/bench/…png")
    args = parser.parse_args(argv)
    for name in ("rounds", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"`--{name}` must be >= 1, got {getattr(args, name)}")
    if min(args.clients) < 1:
        parser.error(f"`--clients` must all be >= 1, got {args.clients}")
    stem = "serve_peers" + ("-schemas" if args.schemas else "")
    stem += "-contended" if args.contended else ""
    args.out = args.out or common.RESULTS / f"{stem}.json"
    args.plot = args.plot or common.REPO / "docs" / "bench" / f"{stem}.png"
    return args


def chat_settings() -> dict:
    return {
        "system_prompt_tokens": SYSTEM_TOKENS,
        "turns": TURNS,
        "new_tokens": NEW_TOKENS,
        "decoding": "greedy (temperature 0); ours min_tokens, llama-server ignore_eos",
        "slot_context": SLOT_CONTEXT,
    }


def schema_settings() -> dict:
    from .schemas import MAX_TOKENS, SCHEMAS

    return {
        "schema_count": len(SCHEMAS),
        "max_tokens": MAX_TOKENS,
        "decoding": "greedy (temperature 0), response_format json_schema (strict)",
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from tokenizers import Tokenizer

    from convert import flagship
    from convert.fetch import fetch_gguf

    gguf = args.gguf or fetch_gguf()
    tokenizer = Tokenizer.from_file(str(flagship.ensure_bundle(gguf) / "tokenizer.json"))
    system = system_prompt(tokenizer)
    if not args.schemas:
        check_fits(longest_conversation(tokenizer, system, max(args.clients), args.rounds))
    binary, skipped = peer_or_reason(args.work, args.build)
    if skipped:
        print(f"peer skipped: {skipped}", flush=True)
    parallel = 1 if args.schemas else max(args.clients)  # the schema set goes one at a time
    logs = Path(args.work).expanduser() / "serve-peers"
    logs.mkdir(parents=True, exist_ok=True)
    commands = {OURS: ours_command(gguf, args.threads, parallel, _free_port())}
    if args.with_ray:
        commands[OURS_RAY] = ours_command(gguf, args.threads, parallel, _free_port(), ray=True)
    if binary:
        commands[PEER] = peer_command(binary, gguf, args.threads, parallel, _free_port())
    for_load = None
    if binary and args.peer_slots == "clients" and not args.schemas:
        ports = {count: _free_port() for count in args.clients}
        for_load = {
            PEER: lambda count: (
                peer_command(binary, gguf, args.threads, count, ports[count]),
                ports[count],
            )
        }

    def start(name: str, command: list[str]) -> Server:
        port = int(command[command.index("--port") + 1])
        server = Server(name, command, port, logs / f"{name.replace(' ', '-')}.log")
        servers.append(server)
        return server

    servers, busy, results = [], None, []
    try:
        if args.apart and not args.schemas:  # one server up at a time, all its levels
            for name, command in commands.items():
                server = start(name, command)
                server.wait_ready()
                busy = busy_process() if args.contended else None
                results += measure([server], system, args.clients, args.rounds, for_load)
                if busy:
                    busy.kill()
                    busy.wait()
                    busy = None
                server.stop()
        else:
            for name, command in commands.items():
                start(name, command)
            for server in servers:
                server.wait_ready()
            busy = busy_process() if args.contended else None
            if args.schemas:
                from .serve_peers_schemas import measure_schemas

                results = measure_schemas(servers, args.rounds)
            else:
                results = measure(servers, system, args.clients, args.rounds, for_load)
    finally:
        if busy:
            busy.kill()
            busy.wait()
        for server in servers:
            server.stop()
    if args.schemas:
        from .serve_peers_schemas import schemas_table

        table = schemas_table(results)
    else:
        table = results_table(results)
        mode = "one busy process beside both servers" if args.contended else "no busy process"
        title = f"Chat serving, SmolLM2-135M Q4_1, {args.threads} threads each, {mode}"
        from .serve_peers_plot import plot

        plot(results, args.plot, title)
    print(table)
    common.write_results(
        args.out,
        {
            "benchmark": "serve-peers" + (" --schemas" if args.schemas else ""),
            "environment": common.environment(threads=args.threads),
            "gguf": str(gguf),
            "settings": {
                "clients": args.clients,
                "rounds": args.rounds,
                "contended": args.contended,
                "peer_slots": args.peer_slots,
                "apart": args.apart,
                "schemas": args.schemas,
                **(schema_settings() if args.schemas else chat_settings()),
            },
            "servers": {
                name: {
                    "command": command,
                    "peak_tree_pss_mb": server.run_peak_tree / 1e6,
                    "peak_engine_pss_mb": server.run_peak_process / 1e6,
                }
                for (name, command), server in zip(commands.items(), servers)
            },
            "peer": {
                "llama_cpp_python": PEER_VERSION,
                "llama_cpp_commit": build.PEER_LLAMA_CPP_COMMIT,
                "cmake_options": list(build.CMAKE_OPTIONS),
                "version": peer_version(binary) if binary else None,
                "skipped": skipped,
            },
            "results": results,
            "table": table,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
