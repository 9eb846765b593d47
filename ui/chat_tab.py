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
token, tokens/s (wall clock, ui/streaming.py) and why it ended.

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
import hashlib
import html
import inspect
import time
from pathlib import Path

import gradio as gr
from gradio.context import Context

from . import checks, downloads, links, widgets
from .streaming import StreamCollector

CHAT_MODES = ("greedy", "sampling")  # beam search gives no stream and no chat in the runtime
MAX_REPLAY_TURNS = 16  # user turns `/chat` (and so a link) replays
MAX_REPLAY_CHARS = 4000  # their characters together, so that a link stays a usable URL
UPDATE_EVERY = 0.15  # seconds between UI updates while streaming
# The defaults a fresh Chat tab opens with, chosen by bench/chat_defaults.py (docs/APP.md has its
# table): the system prompt and sampling setting with SmolLM2-135M-Instruct's best share of right,
# loop-free answers to 22 everyday questions (0.79 with 3 seeds; the former defaults, T 0.7 / top-p
# 0.95 with "Answer briefly.", 0.74; SmolLM's own system prompt rambles, 0.65).
SYSTEM_PROMPT = "You are a helpful assistant. Answer in one or two sentences, in English."
DEFAULTS = {"temperature": 0.2, "top_p": 0.9, "min_p": 0.0, "repetition_penalty": 1.0}
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
SETTINGS = ("mode", "max_new_tokens", "temperature", "top_k", "top_p", "min_p")
SETTINGS += ("repetition_penalty", "no_repeat_ngram_size", "seed")
MARK_STOPPED = """() => setTimeout(() => {
  document.querySelectorAll('#chat-turns td.finish').forEach((cell) => {
    cell.textContent = cell.textContent.replaceAll('running', 'stopped');
  });
}, 800)"""


# ---- pure functions: settings, conversations, what the page shows -----------------------------


def chat_config(
    mode,
    max_new_tokens,
    temperature,
    top_k,
    top_p,
    min_p,
    repetition_penalty,
    no_repeat_ngram_size,
    seed,
):
    """A validated GenerationConfig for one reply (greedy or sampling, one sequence)."""
    checks.choice("mode", mode, CHAT_MODES)
    return checks.decoding(
        mode,
        max_new_tokens,
        temperature,
        top_k,
        top_p,
        min_p,
        repetition_penalty,
        no_repeat_ngram_size,
        1,
        1,
        seed,
    )


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


def chatbot_value(turns: list[dict]) -> list[dict]:
    """What the Chatbot shows: role and content of every turn."""
    return [{"role": t["role"], "content": t["content"]} for t in turns]


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


def turns_html(turns: list[dict]) -> str:
    """A table with each message's tokens, and for replies time to first token, tokens/s and
    finish reason."""
    rows = "".join(
        f"<tr><td>{n}</td><td>{t['role']}</td><td>{_fmt(t.get('tokens'), 'd')}</td>"
        f"<td>{_fmt(t.get('time_to_first_token_s'), '.3f')}</td>"
        f"<td>{_fmt(t.get('tokens_per_second'), '.1f')}</td>"
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
    conversation = messages(system_prompt, turns)
    prompt_tokens = gen.count_chat_tokens(conversation)
    stream = gen.stream_chat(conversation, config)  # every check runs here, before a token
    collector = StreamCollector(1, gen.tokenizer, gen.end_of_turn_token_ids[0])
    reply = {"role": "assistant", "content": "", "settings": settings}
    turns = [*turns, reply]

    def fill():
        stats = collector.stats()
        reply.update(
            content=collector.texts[0],
            tokens=collector.count,
            time_to_first_token_s=stats["time_to_first_token_s"],
            tokens_per_second=stats["tokens_per_second"],
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
            if time.perf_counter() - shown >= UPDATE_EVERY:
                shown = time.perf_counter()
                fill()
                yield turns, prompt_tokens + collector.count
    finally:
        stream.close()
    fill()
    yield turns, prompt_tokens + collector.count


@functools.cache
def files_sha256(folder: Path) -> str:
    """sha256 over a folder's files (each one's relative path and sha256, in order): the digest
    of a model without a manifest.json (an optimum export), computed once per folder."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        with path.open("rb") as file:
            digest.update(f"{path.relative_to(folder)}\0".encode())
            digest.update(hashlib.file_digest(file, "sha256").digest())
    return digest.hexdigest()


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
    return registry.manifest(model).get("context_length")


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
        turns_state = gr.State([])
        with gr.Row():
            with gr.Column(scale=3):
                gr.Markdown(ABOUT, elem_id="chat-about")
                chatbot = gr.Chatbot(
                    label="Chat",
                    show_label=False,  # a floating label would cover the first message
                    height=460,
                    feedback_options=None,
                    buttons=["copy"],
                    examples=[{"text": text} for text in EXAMPLES],
                    elem_id="chat-conversation",
                )
                with gr.Row():
                    message = gr.Textbox(
                        placeholder="Write a message and press Enter",
                        show_label=False,
                        lines=1,
                        scale=5,
                        max_length=checks.LIMITS.max_prompt_chars,
                        elem_id="chat-message",
                    )
                    send = gr.Button("Send", variant="primary", scale=1, min_width=80)
                with gr.Row():
                    stop = gr.Button("Stop", variant="stop", size="sm", elem_id="chat-stop")
                    retry = gr.Button("Retry", size="sm", elem_id="chat-retry")
                    undo = gr.Button("Undo", size="sm", elem_id="chat-undo")
                    clear = gr.Button("Clear", size="sm", elem_id="chat-clear")
                meter = gr.HTML(meter_html(0, context_of(registry, names[0])), elem_id="chat-meter")
                table = gr.HTML(turns_html([]), elem_id="chat-turns")
                result = gr.State(None)
                download = gr.DownloadButton(
                    "Download JSON", visible=False, size="sm", elem_id="chat-download"
                )
            with gr.Column(scale=2, elem_id="chat-settings"):
                model = widgets.model_picker(names)
                widgets.model_card(registry, model)
                system_prompt = gr.Textbox(
                    SYSTEM_PROMPT,
                    label="System prompt",
                    lines=2,
                    max_length=checks.LIMITS.max_prompt_chars,
                )
                decoding = widgets.decoding_inputs(
                    mode="sampling",
                    max_new_tokens=96,
                    temperature=DEFAULTS["temperature"],
                    top_p=DEFAULTS["top_p"],
                    with_samples=False,
                )
                decoding.mode.choices = [(mode, mode) for mode in CHAT_MODES]
                decoding.min_p.value = DEFAULTS["min_p"]
                decoding.repetition_penalty.value = DEFAULTS["repetition_penalty"]
                decoding.seed.elem_id = "chat-seed"
                settings_inputs = {
                    name: component
                    for name, component in decoding.by_name().items()
                    if name != "num_beams"
                }
                user_turns = gr.JSON([], visible=False, label="user_turns")
                links.shareable(
                    "chat",
                    "chat",
                    {"model": model, "system_prompt": system_prompt, "user_turns": user_turns}
                    | settings_inputs,
                )
        result.change(downloads.button, result, download, queue=False, api_visibility="private")
        settings_components = list(settings_inputs.values())
        outputs = [chatbot, table, meter, user_turns, turns_state, result]

        def shown(model, system_prompt, turns, used, settings, done: bool):
            """The outputs of a chat event for `turns` with `used` context tokens."""
            record = (
                chat_record(registry, model, system_prompt, turns, settings, used)
                if done
                else gr.skip()
            )
            return (
                chatbot_value(turns),
                turns_html(turns),
                meter_html(used, registry.get(model).context_length),
                user_turns_of(turns),
                turns,
                record,
            )

        def checked(model, system_prompt, *values):
            """(generator, system prompt, config, settings) from an event's arguments."""
            settings = dict(zip(SETTINGS, values))
            system_prompt = checks.text("system_prompt", system_prompt, allow_empty=True)
            config = chat_config(*values)
            if model not in names:
                raise ValueError(f"`model` must be one of {names}, got {checks.shown(model)}")
            return registry.get(model), system_prompt, config, settings

        @checks.shown_to_user
        def respond(model, system_prompt, turns, *values):
            """Stream the reply to the conversation in the session (its last turn a user's)."""
            gen, system_prompt, config, settings = checked(model, system_prompt, *values)
            turns = [dict(t) for t in turns]
            if not turns or turns[-1]["role"] != "user":
                raise ValueError("there is no message to answer: write one first")
            settings = {"model": model, "system_prompt": system_prompt} | settings
            updates = stream_reply(gen, system_prompt, turns, config, settings)
            for turns, used in updates:
                yield shown(model, system_prompt, turns, used, settings, False)
            yield shown(model, system_prompt, turns, used, settings, True)

        @checks.shown_to_user
        def chat(
            model,
            system_prompt,
            user_turns,
            mode,
            max_new_tokens,
            temperature,
            top_k,
            top_p,
            min_p,
            repetition_penalty,
            no_repeat_ngram_size,
            seed,
        ):
            """Replay a conversation from its user turns (a JSON list of strings): each gets the
            reply these settings and seed give; streams (conversation, turns table HTML, context
            meter HTML, the user turns)."""
            arguments = locals()
            settings = {name: arguments[name] for name in inspect.signature(chat).parameters}
            del settings["user_turns"]
            values = [arguments[name] for name in SETTINGS]
            gen, system_prompt, config, _ = checked(model, system_prompt, *values)
            asked = user_turns_value(user_turns)
            turns: list[dict] = []
            used = 0
            for text in asked:
                asking = [*turns, {"role": "user", "content": text, "tokens": None}]
                for turns, used in stream_reply(gen, system_prompt, asking, config, settings):
                    yield shown(model, system_prompt, turns, used, settings, False)
            yield shown(model, system_prompt, turns, used, settings, True)

        def add_message(text, turns):
            text = checks.text("message", text)
            turns = [*turns, {"role": "user", "content": text, "tokens": None}]
            return "", chatbot_value(turns), turns

        def add_example(turns, chosen: gr.SelectData):
            return add_message(chosen.value["text"], turns)

        reply_inputs = [model, system_prompt, turns_state, *settings_components]

        def replying(event):  # the reply that follows a message added to the conversation
            return event.success(
                respond,
                reply_inputs,
                outputs,
                api_visibility="private",
                concurrency_id=checks.CONCURRENCY_ID,
            )

        added = [message, chatbot, turns_state]
        private = {"queue": False, "api_visibility": "private"}
        running = [replying(chatbot.example_select(add_example, turns_state, added, **private))]
        adder = checks.shown_to_user(add_message)
        for trigger in (send.click, message.submit):
            adding = trigger(adder, [message, turns_state], added, **private)
            running.append(replying(adding))

        def retry_setup(turns, mode, seed):
            kept = without_last_reply(turns)
            if not kept:
                raise gr.Error("there is no message to answer again")
            # Sampling with the same seed would give the same reply: take the next seed.
            again = mode == "sampling" and isinstance(seed, int | float)
            next_seed = int(seed) + 1 if again and seed < checks.LIMITS.max_seed else gr.skip()
            return chatbot_value(kept), kept, next_seed

        running.append(
            retry.click(
                retry_setup,
                [turns_state, decoding.mode, decoding.seed],
                [chatbot, turns_state, decoding.seed],
                queue=False,
                api_visibility="private",
            ).success(
                respond,
                reply_inputs,
                outputs,
                api_visibility="private",
                concurrency_id=checks.CONCURRENCY_ID,
            )
        )

        def emptied(name):
            """A new conversation: (chatbot, table, meter, user turns, turns)."""
            return [], turns_html([]), meter_html(0, context_of(registry, name)), [], []

        emptied_outputs = [chatbot, table, meter, user_turns, turns_state]
        # "input", not "change": a link sets the model without clearing what it restores
        model.input(emptied, model, emptied_outputs, queue=False, api_visibility="private")

        def undo_last(turns, model, system_prompt):
            kept, text = without_last_exchange(turns)
            used = 0
            if kept:  # tokenizing only: the model is loaded, since it answered
                conversation = messages(system_prompt, kept)
                used = registry.get(model).count_chat_tokens(conversation, False)
            meter = meter_html(used, context_of(registry, model))
            return text, chatbot_value(kept), turns_html(kept), meter, user_turns_of(kept), kept

        undo.click(
            checks.shown_to_user(undo_last),
            [turns_state, model, system_prompt],
            [message, chatbot, table, meter, user_turns, turns_state],
            queue=False,
            api_visibility="private",
        )
        clear.click(
            lambda name: ("", *emptied(name)),
            model,
            [message, *emptied_outputs],
            queue=False,
            api_visibility="private",
        )
        chatbot.clear(emptied, model, emptied_outputs, queue=False, api_visibility="private")
        # The public endpoint (and what a link runs); no button of its own.
        replay = gr.Button("Replay the user turns", visible=False, elem_id="chat-replay")
        running.append(
            replay.click(
                chat,
                [model, system_prompt, user_turns, *settings_components],
                outputs,
                api_name="chat",
                concurrency_id=checks.CONCURRENCY_ID,
            )
        )
        stop.click(None, cancels=running, js=MARK_STOPPED)
        # A fresh page draws its own seed (SEED_ON_LOAD, DRAW_SEED).
        with gr.Row(elem_classes="link-triggers"):  # hidden by CSS, so still clicked by the script
            draw = gr.Button("draw a seed", elem_id="chat-draw-seed")
        draw.click(None, None, decoding.seed, js=SEED_ON_LOAD, api_visibility="private")
        Context.root_block.load(None, js=DRAW_SEED, api_visibility="private")
