"""The Chat tab: a conversation with a chat model, streamed, with its numbers beside it.

Chat models are the bundles whose manifest has a chat template (ui/registry.py `chat_models`);
the tab exists only when there is one, and then comes first. A reply streams into the chat as it
is generated, by the model's own template and end-of-turn tokens (runtime/chat.py); the system
prompt and the decoding settings (Generate's widgets, greedy or sampling: chat has no beam
search) apply to every reply. Stop cancels the event, which closes the runtime stream and frees
the CPU; the partial reply stays. Retry generates the last reply again (with the next seed when
sampling), Undo removes the last exchange and puts the message back in the box, Clear starts over.
Beside the chat: a context meter (the conversation's tokens, counted with the template, of the
model's context) and a table with every message's tokens and, for replies, the time to the first
token, tokens/s (wall clock, ui/streaming.py) and why it ended. Under the settings, a "JSON
schema" box (closed by default; empty = free text): a JSON Schema there holds every reply to
JSON that matches it (runtime/structured.py), and `{"type": "object"}` asks for any JSON object.

A visitor's first look: one line on what a 135M model can and cannot do, example prompts as chips
in the empty chat (a chip sends its prompt), and defaults (system prompt, sampling settings)
chosen by bench/chat_defaults.py. A fresh page draws a new seed, shown in the Seed field (so
two visitors get their own replies, and the Link, which carries the seed, still replays one
exactly); a page opened from a link keeps the link's, and Clear keeps the one set.

The conversation is a list of turn records (role, content, tokens, and for replies their timing,
token ids, log-probabilities and settings), kept in the session and downloadable as JSON
(ui/downloads.py). Endpoint `/chat` replays a conversation from its user turns: each gets the
reply the settings and seed give, which is how a link (`?tab=chat&user_turns=[…]&…&run=1`)
reproduces a conversation made with one set of settings. This module draws no arena (ui/arena.py).
"""

from __future__ import annotations

import functools
import html
import time
from dataclasses import dataclass
from pathlib import Path

import gradio as gr
from gradio.context import Context

from runtime.bundle import folder_sha256

from . import (
    chat_memory,
    chat_speed,
    checks,
    downloads,
    expectations,
    links,
    safe_text,
    widgets,
)
from .streaming import StreamCollector

CHAT_MODES = ("greedy", "sampling")  # beam search gives no stream and no chat in the runtime
MAX_REPLAY_TURNS = 16  # user turns `/chat` (and so a link) replays
MAX_REPLAY_CHARS = 4000  # their characters together, so that a link stays a usable URL
UPDATE_EVERY = 0.15  # seconds between UI updates while streaming
# The defaults a fresh Chat tab opens with, chosen by bench/chat_defaults.py (docs/APP.md has its
# table): the system prompt and sampling setting with SmolLM2-135M-Instruct's best share of right,
# loop-free answers to 22 everyday questions (0.79 with 3 seeds; the former defaults, T 0.7 / top-p
# 0.95 with "Answer briefly.", 0.74; SmolLM's own system prompt rambles, 0.65). The other settings
# keep the app's first values (min-p and the repetition penalty off).
SYSTEM_PROMPT = "You are a helpful assistant. Answer in one or two sentences, in English."
DEFAULTS = {"temperature": 0.2, "top_p": 0.9}
# The chips of an empty chat: questions the chosen setting answered right with every seed.
EXAMPLES = (
    "What is the capital of Japan?",
    "Name three primary colors.",
    "How many legs does a spider have?",
    "What is a noun?",
    "What is photosynthesis?",
)
ABOUT = (
    "**SmolLM2-135M-Instruct is a 135M-parameter model**: it gets most short everyday questions "
    "right (facts, simple lists, definitions: 79 % of ours), but often errs on sums, how-tos, "
    "reasoning and anything long or recent. Check what it says."
)
FRESH_SEEDS = 100_000  # a fresh page's seed is drawn from [1, FRESH_SEEDS): short to read
# On page load, in the browser (a load without a link sends no event): a fresh seed, unless the
# page is a link (its query names a tab), whose own seed, or the default, it restores and runs.
# The load clicks a hidden button whose event sets the field, again every 0.1 s (for 10 s at most)
# until the field shows it: Gradio drops an output that arrives before the tab is ready.
SEED_ON_LOAD = f"() => 1 + Math.floor(Math.random() * {FRESH_SEEDS - 1})"
DRAW_SEED = """() => {
  if (new URLSearchParams(window.location.search).has('tab')) return;
  let tries = 0;
  const draw = () => {
    const box = document.querySelector('#chat-seed input');
    if (box && box.value !== '0' && box.value !== '') return;
    if (box) document.getElementById('chat-draw-seed').click();
    if (++tries < 100) setTimeout(draw, 100);
  };
  draw();
}"""


# chat_config's parameters: the decoding settings of a reply, as the endpoints name them
SETTINGS = tuple(checks.decoding_names(CHAT_MODES, samples=False))
SCHEMA_EXAMPLE = """{
  "type": "object",
  "properties": {
    "answer": {"type": "string", "maxLength": 80},
    "confident": {"type": "boolean"}
  },
  "required": ["answer", "confident"]
}"""
SCHEMA_HELP = (
    "Empty: free text. A JSON Schema here holds every reply to JSON that matches it (enforced "
    'token by token); `{"type": "object"}` asks for any JSON object. A small model fills a '
    "schema best when its prompt asks for the same fields."
)
MARK_STOPPED = """() => setTimeout(() => {
  document.querySelectorAll('#chat-turns td.finish').forEach((cell) => {
    cell.textContent = cell.textContent.replaceAll('running', 'stopped');
  });
}, 800)"""


# ---- pure functions: settings, conversations, what the page shows -----------------------------


@checks.taking(SETTINGS)
def chat_config(mode, **settings):
    """A validated GenerationConfig for one reply (greedy or sampling, one sequence) from the
    `SETTINGS`."""
    checks.choice("mode", mode, CHAT_MODES)
    return checks.decoding(mode, **settings)


def with_schema(config, json_schema: str | None):
    """`config` holding replies to `json_schema` (the box's text; empty or blank: free text).

    >>> greedy = chat_config("greedy", 8, 1.0, 0, 1.0, 0.0, 1.0, 0, 0)
    >>> with_schema(greedy, " ").json_schema, with_schema(greedy, '{"type": "object"}').json_schema
    (None, '{"type": "object"}')
    """
    text = (json_schema or "").strip()
    return config.replace(json_schema=text or None).validate()


def user_turns_value(value) -> list[str]:
    """The `user_turns` argument as a list of non-empty strings within the replay caps.

    >>> user_turns_value(["Hello", "Why?"])
    ['Hello', 'Why?']
    >>> user_turns_value("Hello")
    Traceback (most recent call last):
    ...
    ValueError: `user_turns` must be a list of strings like ["Hello"], got 'Hello'
    """
    if not isinstance(value, list) or not value:
        got = checks.shown(value)
        raise ValueError(f'`user_turns` must be a list of strings like ["Hello"], got {got}')
    if len(value) > MAX_REPLAY_TURNS:
        raise ValueError(
            f"`user_turns` must hold at most {MAX_REPLAY_TURNS} turns, got {len(value)}"
        )
    turns = [checks.text(f"user_turns[{i}]", turn) for i, turn in enumerate(value)]
    total = sum(map(len, turns))
    if total > MAX_REPLAY_CHARS:
        raise ValueError(
            f"`user_turns` must be at most {MAX_REPLAY_CHARS} characters together, got {total}"
        )
    return turns


def messages(system_prompt: str, turns: list[dict]) -> list[dict]:
    """The conversation as the model's messages: the system prompt (if any), then the turns.

    >>> messages("Be brief.", [{"role": "user", "content": "Hi", "tokens": 1}])
    [{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': 'Hi'}]
    """
    system = [{"role": "system", "content": system_prompt}] if system_prompt.strip() else []
    return system + [{"role": t["role"], "content": t["content"]} for t in turns]


CUT_OFF = "✂ **Cut off** at the limit of {limit} new tokens: press **Continue** for more."
CONTEXT_FULL = "✂ **Cut off**: the conversation fills the model's context (Clear to start over)."
CONTINUE = "Continue."  # the message the Continue button sends


def reply_marks(turn: dict) -> str:
    """What the Chat shows under a finished reply (Markdown, "" for none): that it was cut
    off by the token limit or the context, and that it is a repetition loop (as Generate
    labels its samples, ui/expectations.py).

    >>> reply_marks({"role": "assistant", "content": "Hi", "finish_reason": "eos"})
    ''
    >>> print(reply_marks({"role": "assistant", "content": "a, " * 20, "finish_reason": "length",
    ...                    "settings": {"max_new_tokens": 40}}))
    ✂ **Cut off** at the limit of 40 new tokens: press **Continue** for more.
    <BLANKLINE>
    ⚠ **Repetition loop** (\\"a\\,\\" repeated 19 times): the model got stuck repeating itself.
    """
    if turn["role"] != "assistant" or turn.get("finish_reason") in (None, "running"):
        return ""
    marks = []
    if turn.get("finish_reason") == "length":
        limit = (turn.get("settings") or {}).get("max_new_tokens", turn.get("tokens"))
        marks.append(CUT_OFF.format(limit=limit))
    elif turn.get("finish_reason") == "context":
        marks.append(CONTEXT_FULL)
    loop = expectations.repetition_loop(turn["content"])
    if loop:  # on one line, and the model's text as text
        loop = safe_text.literal(" ".join(loop.split()))
        marks.append(f"⚠ **Repetition loop** ({loop}): the model got stuck repeating itself.")
    return "\n\n".join(marks)


def chatbot_value(turns: list[dict]) -> list[dict]:
    """What the Chatbot shows: role and content of every turn, a finished reply with its
    marks (`reply_marks`) in a paragraph of its own under it, and before the reply to a user
    turn the earlier replies Retry replaced (its `earlier_replies`), each folded under a title.

    >>> [m["content"] for m in chatbot_value([{"role": "user", "content": "Hi",
    ...     "earlier_replies": ["Hello"]}, {"role": "assistant", "content": "Hey"}])]
    ['Hi', 'Hello', 'Hey']
    """
    shown = []
    for t in turns:
        marks = reply_marks(t)
        content = f"{t['content']}\n\n{marks}" if marks else t["content"]
        shown.append({"role": t["role"], "content": content})
        earlier = t.get("earlier_replies") or []
        for n, text in enumerate(earlier, start=1):
            title = f"Earlier reply {n} of {len(earlier) + 1} (before Retry)"
            folded = {"title": title, "status": "done"}
            shown.append({"role": "assistant", "content": text, "metadata": folded})
    return shown


def turn_index(turns: list[dict], message: int) -> int:
    """The index in `turns` of the Chatbot's `message`-th message (`chatbot_value` adds the
    earlier replies as messages of their own); ValueError for an earlier reply's message.

    >>> turn_index([{"role": "user", "earlier_replies": ["a"]}, {"role": "assistant"}], 2)
    1
    """
    shown = 0
    for index, turn in enumerate(turns):
        if shown == message:
            return index
        shown += 1 + len(turn.get("earlier_replies") or [])
        if shown > message:
            break
    raise ValueError(f"message {message} is an earlier reply, not a turn: it cannot be edited")


def user_turns_of(turns: list[dict]) -> list[str]:
    return [t["content"] for t in turns if t["role"] == "user"]


def without_last_reply(turns: list[dict]) -> list[dict]:
    """The conversation up to its last user turn (what Retry answers again).

    >>> without_last_reply([{"role": "user"}, {"role": "assistant"}])
    [{'role': 'user'}]
    """
    end = max((i for i, t in enumerate(turns) if t["role"] == "user"), default=-1)
    return list(turns[: end + 1])


def without_last_exchange(turns: list[dict]) -> tuple[list[dict], str]:
    """(the conversation before its last user turn, that turn's text) for Undo.

    >>> without_last_exchange([{"role": "user", "content": "a"}, {"role": "assistant"}])
    ([], 'a')
    """
    kept = without_last_reply(turns)
    if not kept:
        return [], ""
    return kept[:-1], kept[-1]["content"]


def _fmt(value, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def _with_served(turn: dict, key: str, spec: str) -> str:
    """A time cell: the figure from the message's arrival (queue included) and, beside it when
    they differ by more than 20 %, the server's own from the stream's start, which the page's
    script (ui/chat_speed.py) reads from `data-stream` when it puts its own from the click."""
    mine, served = turn.get(key), turn.get(f"served_{key}")
    shown = _fmt(mine, spec)
    if mine and served and abs(served - mine) > 0.2 * mine:
        shown += f" (server {format(served, spec)})"
    return f'<td data-stream="{served or 0}">{shown}</td>'


def turns_html(turns: list[dict]) -> str:
    """A table with each message's tokens, and for replies time to first token, tokens/s (from
    the message's arrival, with the server's own figures where they differ) and finish reason."""
    rows = "".join(
        f"<tr><td>{n}</td><td>{t['role']}</td><td>{_fmt(t.get('tokens'), 'd')}</td>"
        f"{_with_served(t, 'time_to_first_token_s', '.3f')}"
        f"{_with_served(t, 'tokens_per_second', '.1f')}"
        f'<td class="finish">{html.escape(t.get("finish_reason") or "")}</td></tr>'
        for n, t in enumerate(turns, start=1)
    )
    return (
        '<table class="chat-turns"><thead><tr><th>#</th><th>role</th><th>tokens</th>'
        "<th>first token (s)</th><th>tokens / s</th><th>finished</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
    )


def meter_html(used: int | None, context: int | None) -> str:
    """The context meter: the conversation's tokens of the model's context, as a bar."""
    if not context:
        return '<div class="context-meter">context: –</div>'
    used = used or 0
    share = min(used / context, 1.0)
    return (
        f'<div class="context-meter"><div class="context-label">context: <b>{used}</b> of '
        f"{context} tokens ({100 * share:.0f} %)</div>"
        f'<progress max="{context}" value="{min(used, context)}"></progress></div>'
    )


# ---- generation ----------------------------------------------------------------------------


def _count_user_tokens(gen, turns: list[dict]) -> None:
    for turn in turns:
        if turn["role"] == "user" and turn.get("tokens") is None:
            turn["tokens"] = len(gen.tokenizer.encode(turn["content"], add_special_tokens=False))


def stream_reply(gen, system_prompt: str, turns: list[dict], config, settings: dict):
    """Yield (turns with the reply so far, tokens in the context: the rendered conversation's
    and the reply's) while the reply to `turns` (which end with a user turn) streams; closing
    this closes the runtime stream."""
    _count_user_tokens(gen, turns)
    # the visitor's wait counts from the message's arrival (`sent_at`), the queue included
    waited = max(0.0, time.time() - turns[-1].get("sent_at", time.time()))
    since = time.perf_counter() - waited
    conversation = messages(system_prompt, turns)
    prompt_tokens = gen.count_chat_tokens(conversation)
    stream = gen.stream_chat(conversation, config)  # every check runs here, before a token
    collector = StreamCollector(1, gen.tokenizer, gen.end_of_turn_token_ids[0], since=since)
    reply = {"role": "assistant", "content": "", "settings": settings}
    turns = [*turns, reply]

    def fill():
        stats = collector.stats()
        reply.update(
            content=collector.texts[0],
            tokens=collector.count,
            time_to_first_token_s=stats["time_to_first_token_s"],
            tokens_per_second=stats["tokens_per_second"],
            served_time_to_first_token_s=collector.served_time_to_first_token,
            served_tokens_per_second=collector.served_tokens_per_second,
            finish_reason=stats["finish_reasons"][0],
            token_ids=list(collector.token_ids[0]),
            logprobs=list(collector.logprobs[0]),
        )

    fill()
    yield turns, prompt_tokens
    shown = time.perf_counter()
    try:
        for event in stream:
            collector.add(event)
            # the first token shows at once: the visitor's first-token figure is what they saw
            if collector.count == 1 or time.perf_counter() - shown >= UPDATE_EVERY:
                shown = time.perf_counter()
                fill()
                yield turns, prompt_tokens + collector.count
    finally:
        stream.close()
    fill()
    yield turns, prompt_tokens + collector.count


# an optimum export's files do not change while the app runs: digest each folder once
files_sha256 = functools.cache(folder_sha256)


def chat_record(registry, model: str, system_prompt: str, turns: list[dict], settings, used):
    """The downloadable record of a conversation (ui/downloads.py's schema, endpoint "chat"):
    the model's manifest.json sha256, or for a folder without one the sha256 of its files."""
    manifest = downloads.manifest_sha256(registry, model)
    folder = Path(registry.paths[model])  # for a `--backend` model, only its id
    optimum = (folder / "config.json").is_file()  # an optimum export on this machine
    run = {
        "model": model,
        "manifest_sha256": manifest,
        "files_sha256": files_sha256(folder) if manifest is None and optimum else None,
        "system_prompt": system_prompt,
        "messages": turns,
    }
    context = registry.get(model).context_length
    return downloads.record("chat", settings, [run], {"context_tokens": used, "context": context})


def context_of(registry, model) -> int | None:
    if not model or model not in registry.paths:
        return None
    return registry.manifest(model).context_length


# ---- the tab -------------------------------------------------------------------------------


def build(registry, missing: str | None = None) -> None:
    """The Chat tab; without a chat model, a tab holding only `missing` (how to get the
    flagship) when it is given, else nothing."""
    names = registry.chat_models()
    if not names:
        if missing:
            with gr.Tab("Chat", id="chat"):
                gr.Markdown(missing, elem_classes="notice", elem_id="chat-missing")
        return
    with gr.Tab("Chat", id="chat"):
        page = _Page(turns=gr.State([]))
        with gr.Row():
            with gr.Column(scale=3):
                _conversation_column(registry, names, page)
            with gr.Column(scale=2, elem_id="chat-settings"):
                _settings_column(registry, names, page)
        page.result.change(
            downloads.button, page.result, page.download, queue=False, api_visibility="private"
        )
        running = _wire_replies(registry, names, page)
        edits = _wire_edits(registry, page)
        chat_memory.wire(
            page, names, SETTINGS, edits, lambda turns, model: _opened(registry, turns, model)
        )
        page.stop.click(None, cancels=running, js=MARK_STOPPED)
        # A fresh page draws its own seed (SEED_ON_LOAD, DRAW_SEED).
        with gr.Row(elem_classes="link-triggers"):  # hidden by CSS, so still clicked by the script
            draw = gr.Button("draw a seed", elem_id="chat-draw-seed")
        seed = page.decoding["seed"]
        draw.click(None, None, seed, js=SEED_ON_LOAD, api_visibility="private")
        Context.root_block.load(None, js=DRAW_SEED, api_visibility="private")
        Context.root_block.load(None, js=chat_speed.MEASURE, api_visibility="private")


@dataclass
class _Page:
    """The tab's components, filled in by the two columns."""

    turns: gr.State  # the conversation's turn records
    chatbot: gr.Chatbot = None
    message: gr.Textbox = None
    send: gr.Button = None
    stop: gr.Button = None
    retry: gr.Button = None
    cont: gr.Button = None  # Continue: after a reply cut off by the token limit
    undo: gr.Button = None
    clear: gr.Button = None
    meter: gr.HTML = None
    table: gr.HTML = None
    result: gr.State = None
    download: gr.DownloadButton = None
    model: gr.Dropdown = None
    system_prompt: gr.Textbox = None
    decoding: widgets.DecodingInputs = None
    json_schema: gr.Code = None
    user_turns: gr.JSON = None
    memory: gr.BrowserState = None  # the visitor's chats (ui/chat_memory.py)
    chat_id: gr.State = None  # the id of the chat on screen, None before its first reply
    past: gr.Dropdown = None  # the chats kept in the browser

    def settings(self) -> list:
        """The decoding settings' components, in `SETTINGS`' order."""
        return self.decoding.components()

    def outputs(self) -> list:
        """What a chat event updates (`_shown`'s values)."""
        return [self.chatbot, self.table, self.meter, self.user_turns, self.turns, self.result]

    def emptied(self) -> list:
        """What a new conversation empties (`_emptied`'s values)."""
        return [self.chatbot, self.table, self.meter, self.user_turns, self.turns]


def _conversation_column(registry, names: list[str], page: _Page) -> None:
    """The chat, the message box, the buttons, the context meter, the turns table and the
    download button."""
    gr.Markdown(ABOUT, elem_id="chat-about")
    page.chatbot = gr.Chatbot(
        label="Chat",
        show_label=False,  # a floating label would cover the first message
        height=460,
        feedback_options=None,
        buttons=["copy"],
        editable="user",  # an edited message is answered again, what followed it dropped
        examples=[{"text": text} for text in EXAMPLES],
        elem_id="chat-conversation",
    )
    with gr.Row():
        page.message = gr.Textbox(
            placeholder="Write a message and press Enter",
            show_label=False,
            lines=1,
            scale=5,
            max_length=checks.LIMITS.max_prompt_chars,
            autofocus=True,  # the page opens ready to type (the first tab is the Chat)
            elem_id="chat-message",
        )
        page.send = gr.Button("Send", variant="primary", scale=1, min_width=80, elem_id="chat-send")
    with gr.Row():
        page.stop = gr.Button("Stop", variant="stop", size="sm", elem_id="chat-stop")
        page.retry = gr.Button("Retry", size="sm", elem_id="chat-retry")
        page.cont = gr.Button("Continue", size="sm", elem_id="chat-continue")
        page.undo = gr.Button("Undo", size="sm", elem_id="chat-undo")
        page.clear = gr.Button("New chat", size="sm", elem_id="chat-clear")
    page.past = gr.Dropdown(
        [], value=None, label="Past chats (kept in this browser)", elem_id="chat-past"
    )
    page.meter = gr.HTML(meter_html(0, context_of(registry, names[0])), elem_id="chat-meter")
    page.table = gr.HTML(turns_html([]), elem_id="chat-turns")
    page.result = gr.State(None)
    page.download = gr.DownloadButton(
        "Download JSON", visible=False, size="sm", elem_id="chat-download"
    )


def _settings_column(registry, names: list[str], page: _Page) -> None:
    """The model, its card, the system prompt, the decoding settings and the link."""
    page.model = widgets.model_picker(names)
    widgets.model_card(registry, page.model)
    page.system_prompt = gr.Textbox(
        SYSTEM_PROMPT,
        label="System prompt",
        lines=2,
        max_length=checks.LIMITS.max_prompt_chars,
    )
    page.decoding = widgets.decoding_inputs(
        with_samples=False, modes=CHAT_MODES, mode="sampling", max_new_tokens=96, **DEFAULTS
    )
    page.decoding["seed"].elem_id = "chat-seed"
    with gr.Accordion("JSON schema (structured output)", open=False, elem_id="chat-schema-box"):
        page.json_schema = gr.Code(
            "",
            language="json",
            label="JSON schema",
            lines=6,
            max_lines=16,
            elem_id="chat-json-schema",
        )
        gr.Markdown(SCHEMA_HELP, elem_classes="hint")
        gr.Button("Fill in an example", size="sm").click(
            lambda: SCHEMA_EXAMPLE, None, page.json_schema, queue=False, api_visibility="private"
        )
    page.user_turns = gr.JSON([], visible=False, label="user_turns")
    links.shareable(
        "chat",
        "chat",
        {"model": page.model, "system_prompt": page.system_prompt, "user_turns": page.user_turns}
        | page.decoding.by_name()
        | {"json_schema": page.json_schema},
    )


def _shown(registry, model, system_prompt, turns, used, settings, done: bool):
    """The outputs of a chat event (`_Page.outputs`) for `turns` with `used` context tokens."""
    record = (
        chat_record(registry, model, system_prompt, turns, settings, used) if done else gr.skip()
    )
    return (
        chatbot_value(turns),
        turns_html(turns),
        meter_html(used, registry.get(model).context_length),
        user_turns_of(turns),
        turns,
        record,
    )


def _checked(registry, names, model, system_prompt, json_schema, *values):
    """(generator, system prompt, config, settings) from an event's arguments."""
    settings = dict(zip(SETTINGS, values))
    system_prompt = checks.text("system_prompt", system_prompt, allow_empty=True)
    config = with_schema(chat_config(*values), json_schema)
    settings["json_schema"] = config.json_schema
    if model not in names:
        raise ValueError(f"`model` must be one of {names}, got {checks.shown(model)}")
    return registry.get(model), system_prompt, config, settings


def _wire_replies(registry, names: list[str], page: _Page) -> list:
    """The events that generate: a reply to a message (sent, or an example chip), Retry, and
    the public `/chat` endpoint that replays user turns. Returns them, for Stop to cancel."""

    @checks.shown_to_user
    def respond(model, system_prompt, turns, json_schema, *values):
        """Stream the reply to the conversation in the session (its last turn a user's)."""
        gen, system_prompt, config, settings = _checked(
            registry, names, model, system_prompt, json_schema, *values
        )
        turns = [dict(t) for t in turns]
        if not turns or turns[-1]["role"] != "user":
            raise ValueError("there is no message to answer: write one first")
        settings = {"model": model, "system_prompt": system_prompt} | settings
        updates = stream_reply(gen, system_prompt, turns, config, settings)
        for turns, used in updates:
            yield _shown(registry, model, system_prompt, turns, used, settings, False)
        yield _shown(registry, model, system_prompt, turns, used, settings, True)

    @checks.shown_to_user
    @checks.taking(["model", "system_prompt", "user_turns", *SETTINGS, "json_schema"])
    def chat(model, system_prompt, user_turns, json_schema, **decoding):
        """Replay a conversation from its user turns (a JSON list of strings): each gets the
        reply these settings and seed give (and, given a JSON Schema, JSON that matches it);
        streams (conversation, turns table HTML, context meter HTML, the user turns)."""
        values = [decoding[name] for name in SETTINGS]
        gen, system_prompt, config, checked = _checked(
            registry, names, model, system_prompt, json_schema, *values
        )
        settings = {"model": model, "system_prompt": system_prompt, **checked}
        asked = user_turns_value(user_turns)
        turns: list[dict] = []
        used = 0
        for text in asked:
            asking = [*turns, {"role": "user", "content": text, "tokens": None}]
            for turns, used in stream_reply(gen, system_prompt, asking, config, settings):
                yield _shown(registry, model, system_prompt, turns, used, settings, False)
        yield _shown(registry, model, system_prompt, turns, used, settings, True)

    def add_message(text, turns):
        text = checks.text("message", text)
        turns = [*turns, {"role": "user", "content": text, "tokens": None, "sent_at": time.time()}]
        return "", chatbot_value(turns), turns

    def add_example(turns, chosen: gr.SelectData):
        return add_message(chosen.value["text"], turns)

    reply_inputs = [page.model, page.system_prompt, page.turns, page.json_schema]
    reply_inputs += page.settings()

    def replying(event):  # the reply that follows a message added to the conversation
        return event.success(
            respond,
            reply_inputs,
            page.outputs(),
            api_visibility="private",
            concurrency_id=checks.CONCURRENCY_ID,
        )

    added = [page.message, page.chatbot, page.turns]
    private = {"queue": False, "api_visibility": "private"}
    running = [replying(page.chatbot.example_select(add_example, page.turns, added, **private))]
    adder = checks.shown_to_user(add_message)
    for trigger in (page.send.click, page.message.submit):
        running.append(replying(trigger(adder, [page.message, page.turns], added, **private)))
    seed, mode = page.decoding["seed"], page.decoding["mode"]
    retried = page.retry.click(
        _retry_setup, [page.turns, mode, seed], [page.chatbot, page.turns, seed], **private
    )
    running.append(replying(retried))
    continued = page.cont.click(
        checks.shown_to_user(_continue_setup), page.turns, [page.chatbot, page.turns], **private
    )
    running.append(replying(continued))
    edited = page.chatbot.edit(
        checks.shown_to_user(_edit_setup), page.turns, [page.chatbot, page.turns], **private
    )
    running.append(replying(edited))
    # The public endpoint (and what a link runs); no button of its own.
    replay = gr.Button("Replay the user turns", visible=False, elem_id="chat-replay")
    running.append(
        replay.click(
            chat,
            [page.model, page.system_prompt, page.user_turns, *page.settings(), page.json_schema],
            page.outputs(),
            api_name="chat",
            concurrency_id=checks.CONCURRENCY_ID,
        )
    )
    return running


def _retry_setup(turns, mode, seed):
    """The conversation without its last reply (and with sampling, the next seed)."""
    kept = without_last_reply(turns)
    if not kept:
        raise gr.Error("there is no message to answer again")
    # Sampling with the same seed would give the same reply: take the next seed.
    again = mode == "sampling" and isinstance(seed, int | float)
    largest = checks.offered("seed").limits.high
    next_seed = int(seed) + 1 if again and seed < largest else gr.skip()
    replaced = [t["content"] for t in turns[len(kept) :] if t["role"] == "assistant"]
    earlier = [*(kept[-1].get("earlier_replies") or []), *replaced]
    # the visitor waits from this click; the replies Retry replaces stay to read
    kept[-1] = {**kept[-1], "sent_at": time.time(), "earlier_replies": earlier}
    return chatbot_value(kept), kept, next_seed


def _edit_setup(turns, edited: gr.EditData):
    """The conversation up to the edited user message, with its new text, to answer again."""
    index = turn_index(turns, edited.index)
    if turns[index]["role"] != "user":
        raise ValueError("only your own messages can be edited")
    text = edited.value if isinstance(edited.value, str) else str(edited.value.get("text", ""))
    text = checks.text("message", text)
    kept = [*turns[:index], {"role": "user", "content": text, "tokens": None}]
    kept[-1]["sent_at"] = time.time()
    return chatbot_value(kept), kept


def _opened(registry, turns: list[dict], model: str) -> list:
    """What shows a stored conversation (`_Page.emptied`'s components); the context meter counts
    its messages' tokens only (the template's would need the model loaded)."""
    used = sum(t.get("tokens") or 0 for t in turns)
    meter = meter_html(used, context_of(registry, model))
    return [chatbot_value(turns), turns_html(turns), meter, user_turns_of(turns), turns]


def _continue_setup(turns):
    """The conversation with CONTINUE as the next user message, when its last reply was cut
    off by the token limit (the model is asked to go on: its template has no way to extend a
    reply it has closed)."""
    if not turns or turns[-1]["role"] != "assistant" or turns[-1].get("finish_reason") != "length":
        raise ValueError("the last reply was not cut off by the token limit: nothing to continue")
    turns = [*turns, {"role": "user", "content": CONTINUE, "tokens": None, "sent_at": time.time()}]
    return chatbot_value(turns), turns


def _wire_edits(registry, page: _Page) -> list:
    """Undo, New chat, the chat's own clear button, and a new model starting a new
    conversation; returns their events."""

    def emptied(name):
        """A new conversation (`_Page.emptied`)."""
        return [], turns_html([]), meter_html(0, context_of(registry, name)), [], []

    private = {"queue": False, "api_visibility": "private"}
    # "input", not "change": a link sets the model without clearing what it restores
    page.model.input(emptied, page.model, page.emptied(), **private)

    def undo_last(turns, model, system_prompt):
        kept, text = without_last_exchange(turns)
        used = 0
        if kept:  # tokenizing only: the model is loaded, since it answered
            conversation = messages(system_prompt, kept)
            used = registry.get(model).count_chat_tokens(conversation, False)
        meter = meter_html(used, context_of(registry, model))
        return text, chatbot_value(kept), turns_html(kept), meter, user_turns_of(kept), kept

    undone = page.undo.click(
        checks.shown_to_user(undo_last),
        [page.turns, page.model, page.system_prompt],
        [page.message, page.chatbot, page.table, page.meter, page.user_turns, page.turns],
        **private,
    )
    cleared = page.clear.click(
        lambda name: ("", *emptied(name)), page.model, [page.message, *page.emptied()], **private
    )
    binned = page.chatbot.clear(emptied, page.model, page.emptied(), **private)
    for new in (cleared, binned):  # the last conversation's download goes with it
        new.then(lambda: gr.DownloadButton(visible=False), None, page.download, **private)
    return [undone, cleared, binned, page.model.input]
