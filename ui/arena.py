"""The arena, a tab of its own: one message to 2–4 chat models (or one model with
different decoding presets) side by side, and a vote on which reply is better.

Shown only when a chat model is installed. The columns' `stream_chat` streams advance in turn, one
token each, so the replies grow together; each column is timed on the wall clock, and the metrics
table is the Compare tab's (tokens/s, distinct-n, repetition rate, mean log p). A contestant is
"model · preset"; two columns must differ. After a round the visitor picks the better reply (or a
tie), once per round; the vote goes to the SQLite store (ui/votes.py: committed per vote, kept
across restarts), and the tally per pair of contestants is shown. Endpoint `/arena` streams the
replies and the metrics; voting is a page action only (no API endpoint). The tally is read from the
database whenever a visitor opens the tab, and after every round and vote. When the votes file
could not be used (the store kept it aside, or refuses votes), the section says so above the tally.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

import gradio as gr

from runtime.parameters import CHAT_MODES, PRESETS

from . import checks, links, votes, widgets
from .compare_tab import METRIC_HEADERS, metric_row, preset_config
from .safe_text import literal
from .streaming import StreamCollector

UPDATE_EVERY = 0.05  # seconds between UI updates while streaming
# The presets a chat model can reply with: those that do not search with beams.
CHAT_PRESETS = [name for name in PRESETS if preset_config(name, 1, 1, 0).mode in CHAT_MODES]
DEFAULT_PRESETS = ["top-p 0.95", "greedy", "top-k 5", "min-p 0.1"]
TIE = "tie: both / all as good"
ARENA_HEADERS = METRIC_HEADERS[: METRIC_HEADERS.index("mean log p") + 1]
TALLY_HEADERS = ["contestant A", "contestant B", "A better", "B better", "ties", "votes"]
# Votes one session may cast a minute: a visitor needs a round (seconds of generation) per vote,
# so this is never felt by one, and a script through the queue API cannot stuff the tally.
VOTES_PER_MINUTE = 6


def contestant(model: str, preset: str) -> str:
    return f"{model} · {preset}"


def check_distinct(labels: list[str]) -> None:
    """ValueError naming the first two columns with the same contestant.

    >>> check_distinct(["m · greedy", "m · top-k 5", "m · greedy"])
    Traceback (most recent call last):
    ...
    ValueError: the columns must differ in model or preset, got columns 1 and 3 both 'm · greedy'
    """
    for j, label in enumerate(labels):
        if label in labels[:j]:
            i = labels.index(label)
            raise ValueError(
                "the columns must differ in model or preset, got columns "
                f"{i + 1} and {j + 1} both {label!r}"
            )


def run_arena(registry, conversation, columns, max_new_tokens, seed):
    """Yield ([reply per column], metrics rows) while every column's reply streams."""
    streams, collectors = [], []
    try:
        for model, preset in columns:
            gen = registry.get(model)
            config = preset_config(preset, max_new_tokens, 1, seed)
            end = gen.end_of_turn_token_ids[0]
            collectors.append(StreamCollector(1, gen.tokenizer, end))
            streams.append(gen.stream_chat(conversation, config))
        running, shown = set(range(len(streams))), 0.0
        while running:
            for i in sorted(running):
                event = next(streams[i], None)
                if event is None:
                    running.discard(i)
                else:
                    collectors[i].add(event)
            if time.perf_counter() - shown >= UPDATE_EVERY or not running:
                shown = time.perf_counter()
                rows = [  # one sample per column: no Self-BLEU, UNGC; chat models: no n-gram index
                    metric_row(i + 1, model, preset, collectors[i])[: len(ARENA_HEADERS)]
                    for i, (model, preset) in enumerate(columns)
                ]
                yield [c.texts[0] for c in collectors], rows
    finally:
        for stream in streams:
            stream.close()


def masked(row: list) -> list:
    """A metrics row with its contestant (model, preset) hidden, for a blind round."""
    return [row[0], "hidden until the vote", "", *row[3:]]


def tally_rows(store: votes.VoteStore) -> list[list]:
    """The tally as table rows (none before the first vote: the file is made by the first)."""
    return [[t.a, t.b, t.a_wins, t.b_wins, t.ties, t.votes] for t in store.tally()]


def vote_choices(contestants: list[str], blind: bool = False) -> list[str]:
    """The vote's options: each column's contestant (in a blind round only its reply's
    number), then the tie.

    >>> vote_choices(["m · greedy", "m · top-k 5"])
    ['1: m · greedy', '2: m · top-k 5', 'tie: both / all as good']
    >>> vote_choices(["m · greedy", "m · top-k 5"], blind=True)
    ['reply 1', 'reply 2', 'tie: both / all as good']
    """
    if blind:
        return [f"reply {n}" for n in range(1, len(contestants) + 1)] + [TIE]
    return [f"{n}: {label}" for n, label in enumerate(contestants, start=1)] + [TIE]


def blind_draw(names: list[str], columns: int, rng: random.Random) -> list[tuple[str, str]]:
    """`columns` distinct (model, preset) contestants drawn at random from every chat model and
    chat preset, with as many different models as there are (one model: its presets differ).

    >>> blind_draw(["m"], 2, random.Random(0))
    [('m', 'greedy'), ('m', 'top-k 50')]
    """
    models = rng.sample(names, min(columns, len(names)))
    models += [rng.choice(names) for _ in range(columns - len(models))]
    drawn: list[tuple[str, str]] = []
    for model in models:
        taken = {preset for m, preset in drawn if m == model}
        drawn.append((model, rng.choice([p for p in CHAT_PRESETS if p not in taken])))
    return drawn


def winner_of(choice: str, contestants: list[str], blind: bool = False) -> int | None:
    """The column index a vote option names, None for the tie; ValueError for anything else."""
    options = vote_choices(contestants, blind)
    if choice not in options:
        raise ValueError(f"`vote` must be one of {options}, got {choice!r}")
    return None if choice == TIE else options.index(choice)


def build(
    registry, store: votes.VoteStore | None = None, tab=None, limit: votes.RateLimit | None = None
) -> None:
    """The arena (the Arena tab's content); nothing without a chat model. `store`: where votes
    go (default: a `votes.VoteStore` at `votes.default_path()`); `tab`: the tab it is in, whose
    opening reads the tally; `limit`: the votes each session may cast (default:
    VOTES_PER_MINUTE a minute)."""
    names = registry.chat_models()
    if not names:
        return
    store = store or votes.VoteStore()
    gr.Markdown(
        "## Arena\nThe same message to 2–4 chat models or decoding presets; vote for the better "
        "reply. Votes are kept on this machine and tallied per pair."
    )
    if store.notice:
        gr.Markdown(store.notice, elem_classes="notice", elem_id="arena-notice")
    page = _settings()
    _columns(names, page)
    with gr.Row():
        page.run = gr.Button("Ask every column", variant="primary", elem_id="arena-run")
        page.stop = gr.Button("Stop", variant="stop")
    _results(page)
    private = {"queue": False, "api_visibility": "private"}
    page.count.change(
        lambda n: [gr.update(visible=i < n) for i in range(checks.LIMITS.max_columns)],
        page.count,
        page.blocks,
        **private,
    )
    # a blind round draws its own contestants: the pickers would only mislead
    page.blind.change(
        lambda blind: [gr.update(visible=not blind)] * len(page.columns),
        page.blind,
        page.columns,
        **private,
    )
    event = _wire_rounds(registry, names, page)
    settings = {"message": page.message, "system_prompt": page.system_prompt}
    settings |= {"columns": page.count, "max_new_tokens": page.max_tokens, "seed": page.seed}
    pickers = {
        f"{kind}_{i // 2 + 1}": picker
        for i, (kind, picker) in enumerate(
            zip(["model", "preset"] * checks.LIMITS.max_columns, page.columns)
        )
    }
    links.shareable("arena", "arena", settings | {"blind": page.blind} | pickers)
    _wire_votes(store, page, event, tab, limit or votes.RateLimit(VOTES_PER_MINUTE, 60.0))


@dataclass
class _Page:
    """The arena's components, filled in part by part."""

    message: gr.Textbox
    count: gr.Radio  # how many columns show
    system_prompt: gr.Textbox
    max_tokens: gr.Slider
    seed: gr.Number
    blind: gr.Checkbox  # names hidden until the vote
    columns: list = field(default_factory=list)  # model, preset, model, preset, …
    outputs: list = field(default_factory=list)  # each column's reply
    blocks: list = field(default_factory=list)  # each column
    run: gr.Button = None
    stop: gr.Button = None
    table: gr.Dataframe = None  # the metrics
    round_state: gr.State = None  # {"contestants": [...], "voted": bool} of the latest round
    choice: gr.Radio = None  # the vote's options
    vote: gr.Button = None
    said: gr.Markdown = None  # what the vote did
    tally: gr.Dataframe = None


def _settings() -> _Page:
    """The message, the number of columns, the system prompt and the shared settings."""
    with gr.Row():
        message = gr.Textbox(
            "Name three rivers.",
            label="Message",
            lines=2,
            scale=4,
            max_length=checks.LIMITS.max_prompt_chars,
            elem_id="arena-message",
        )
        count = gr.Radio([2, 3, 4], value=2, label="Columns", scale=1)
    with gr.Row():
        system_prompt = gr.Textbox("", label="System prompt (optional)", scale=3)
        max_tokens = widgets.setting("max_new_tokens", value=48, scale=2)
        seed = widgets.setting("seed")
    blind = gr.Checkbox(
        True,
        label="Blind: the server draws the contestants and names them after your vote",
        elem_id="arena-blind",
    )
    return _Page(message, count, system_prompt, max_tokens, seed, blind)


def _columns(names: list[str], page: _Page) -> None:
    """`LIMITS.max_columns` columns (two shown), each a model, a preset and the reply."""
    with gr.Row(equal_height=True):
        for i in range(checks.LIMITS.max_columns):
            with gr.Column(visible=i < 2, min_width=240) as block:
                model = gr.Dropdown(
                    names, value=names[i % len(names)], label=f"Model {i + 1}", visible=False
                )
                preset = gr.Dropdown(
                    CHAT_PRESETS, value=DEFAULT_PRESETS[i], label="Preset", visible=False
                )
                output = gr.Textbox(
                    label=f"Reply {i + 1}",
                    lines=10,
                    elem_classes="column-output",
                    elem_id=f"arena-output-{i + 1}",
                )
            page.columns += [model, preset]
            page.outputs.append(output)
            page.blocks.append(block)


def _results(page: _Page) -> None:
    """The metrics table, the vote and the tally."""
    page.table = gr.Dataframe(
        headers=ARENA_HEADERS,
        label="Metrics per column",
        interactive=False,
        wrap=True,
        elem_id="arena-metrics",
        elem_classes="numbers",
    )
    page.round_state = gr.State(None)
    with gr.Row():
        page.choice = gr.Radio([], label="Which reply is better?", scale=4, elem_id="arena-choice")
        page.vote = gr.Button("Vote", scale=1, interactive=False, elem_id="arena-vote")
    page.said = gr.Markdown(elem_id="arena-said")
    page.tally = gr.Dataframe(
        value=None,  # read when the tab opens (`_wire_votes`)
        headers=TALLY_HEADERS,
        label="Tally per pair",
        interactive=False,
        elem_id="arena-tally",
    )


def _wire_rounds(registry, names: list[str], page: _Page):
    """The `/arena` endpoint on the button, and Stop; returns the round's event."""

    @checks.shown_to_user
    def arena(
        message,
        system_prompt,
        columns,
        max_new_tokens,
        seed,
        blind,
        model_1,
        preset_1,
        model_2,
        preset_2,
        model_3=None,
        preset_3=None,
        model_4=None,
        preset_4=None,
    ):
        """Stream each column's reply to `message` and the metrics table. Blind (`blind`
        true): the contestants are drawn at random (the model and preset arguments are not
        used) and the table names them only after the vote."""
        message = checks.text("message", message)
        system_prompt = checks.text("system_prompt", system_prompt, allow_empty=True)
        columns = checks.integer("columns", columns, 2, checks.LIMITS.max_columns)
        max_new_tokens = checks.setting("max_new_tokens", max_new_tokens)
        seed = checks.setting("seed", seed)
        pairs = [(model_1, preset_1), (model_2, preset_2), (model_3, preset_3)]
        pairs = (pairs + [(model_4, preset_4)])[:columns]
        if not isinstance(blind, bool):
            raise ValueError(f"`blind` must be true or false, got {checks.shown(blind)}")
        if blind:
            pairs = blind_draw(names, columns, random.SystemRandom())
        for n, (model, preset) in enumerate(pairs, start=1):
            checks.choice(f"model_{n}", model, names)
            checks.choice(f"preset_{n}", preset, CHAT_PRESETS)
        labels = [contestant(model, preset) for model, preset in pairs]
        check_distinct(labels)
        system = [{"role": "system", "content": system_prompt}] if system_prompt.strip() else []
        conversation = [*system, {"role": "user", "content": message}]
        blank = [""] * (checks.LIMITS.max_columns - columns)
        hidden = gr.Radio(choices=[], value=None)
        for texts, rows in run_arena(registry, conversation, pairs, max_new_tokens, seed):
            shown = [masked(row) for row in rows] if blind else rows
            yield *texts, *blank, shown, None, hidden, gr.Button(interactive=False)
        done = {"contestants": labels, "voted": False, "blind": blind, "rows": rows}
        choices = gr.Radio(choices=vote_choices(labels, blind), value=None)
        yield *texts, *blank, shown, done, choices, gr.Button(interactive=True)

    settings = [page.message, page.system_prompt, page.count, page.max_tokens, page.seed]
    settings.append(page.blind)
    event = page.run.click(
        arena,
        [*settings, *page.columns],
        [*page.outputs, page.table, page.round_state, page.choice, page.vote],
        api_name="arena",
        concurrency_id=checks.CONCURRENCY_ID,
    )
    page.stop.click(None, cancels=[event])
    return event


def _wire_votes(store: votes.VoteStore, page: _Page, event, tab, limit: votes.RateLimit) -> None:
    """The tally, read when the tab opens and after each round, and the vote (`limit` per
    session)."""

    @checks.shown_to_user
    def read_tally():
        return tally_rows(store) or gr.skip()  # none yet: the empty table stays

    # Whenever a visitor opens the tab (not on page load: a page load runs nothing) and after
    # each round, so every visitor sees every vote kept so far.
    if tab is not None:
        tab.select(read_tally, None, page.tally, queue=False, api_visibility="private")
    event.then(read_tally, None, page.tally, queue=False, api_visibility="private")

    @checks.shown_to_user
    def cast(chosen, current, request: gr.Request):
        if not current or current["voted"]:
            raise ValueError("there is no round to vote on: ask every column first")
        contestants, blind = current["contestants"], current.get("blind", False)
        winner = winner_of(chosen, contestants, blind)
        wait = limit.wait(request.session_hash or "")
        if wait:
            raise ValueError(
                f"too many votes from this page: at most {limit.limit} every "
                f"{limit.window_s:g} s; vote again in {wait:.0f} s"
            )
        store.add(contestants, winner)
        thanks = "Vote recorded: " + ("a tie." if winner is None else f"reply {winner + 1}.")
        named = "; ".join(f"reply {n}: `{label}`" for n, label in enumerate(contestants, 1))
        said = f"{thanks} " + ("The contestants were " if blind else "") + literal(named)
        voted = {**current, "voted": True}
        return tally_rows(store), voted, said, gr.Button(interactive=False), current["rows"]

    page.vote.click(
        cast,
        [page.choice, page.round_state],
        [page.tally, page.round_state, page.said, page.vote, page.table],
        api_visibility="private",
        concurrency_limit=1,  # one writer at a time (SQLite would wait anyway)
    )
