"""The Chat's conversations kept in the visitor's browser: what is stored and how it is read back.

The Chat tab keeps its conversations in a `gr.BrowserState` (the browser's localStorage,
encrypted by Gradio with the server's secret): the latest `MAX_CHATS`, newest first, each with
its model, system prompt, decoding settings (seed included), JSON schema and turns. A turn is kept
without its token ids and log-probabilities (`KEPT`), so the store stays small. A value read back
from a browser is checked (`valid`): anything that is not a list of chats of the stored shape is
dropped, never trusted. The tab (ui/chat_tab.py) wires saving and restoring; this module holds
the pure functions and `wire`, which connects them to the tab's components.
"""

from __future__ import annotations

import secrets

import gradio as gr
from gradio.context import Context

STORAGE_KEY = "scriptorium-chats"
MAX_CHATS = 20  # conversations kept in one browser, the oldest dropped first
TITLE_CHARS = 48  # a past chat is listed by its first message, cut to this length
KEPT = ("role", "content", "tokens", "finish_reason", "earlier_replies", "time_to_first_token_s",
        "tokens_per_second", "served_time_to_first_token_s", "served_tokens_per_second",
        "settings")  # fmt: skip
EMPTY = {"chats": []}
# On page load, in the browser: when it has kept chats and the page is no link, click the hidden
# restore button (again every 0.1 s, for 10 s at most, until the button is there).
RESTORE_ON_LOAD = f"""() => {{
  if (new URLSearchParams(window.location.search).has('tab')) return;
  if (!window.localStorage.getItem('{STORAGE_KEY}')) return;
  let tries = 0;
  const click = () => {{
    const button = document.getElementById('chat-restore');
    if (button) button.click();
    else if (++tries < 100) setTimeout(click, 100);
  }};
  click();
}}"""


def new_id() -> str:
    return secrets.token_hex(6)


def snapshot(chat_id: str, model, system_prompt, json_schema, settings: dict, turns) -> dict:
    """One conversation as stored: its id, title, model, system prompt, schema, settings, turns.

    >>> chat = snapshot("c1", "m", "", "", {"seed": 3}, [{"role": "user", "content": "Hi",
    ...                 "token_ids": [1]}])
    >>> chat["title"], chat["turns"]
    ('Hi', [{'role': 'user', 'content': 'Hi'}])
    """
    kept = [{key: turn[key] for key in KEPT if key in turn} for turn in turns]
    first = next((t["content"] for t in kept if t["role"] == "user"), "")
    title = " ".join(first.split())
    title = title if len(title) <= TITLE_CHARS else title[: TITLE_CHARS - 1] + "…"
    return {
        "id": chat_id,
        "title": title,
        "model": model,
        "system_prompt": system_prompt,
        "json_schema": json_schema,
        "settings": dict(settings),
        "turns": kept,
    }


def valid(memory) -> dict:
    """`memory` as read from a browser, keeping only chats of the stored shape.

    >>> valid({"chats": [{"id": "a", "title": "t", "turns": []}, 5]})["chats"][0]["id"]
    'a'
    >>> valid("junk")
    {'chats': []}
    """
    chats = memory.get("chats") if isinstance(memory, dict) else None
    if not isinstance(chats, list):
        return {"chats": []}
    keep = []
    for chat in chats[:MAX_CHATS]:
        if not (isinstance(chat, dict) and isinstance(chat.get("id"), str)):
            continue
        turns = chat.get("turns")
        if not isinstance(turns, list) or not all(
            isinstance(t, dict) and t.get("role") in ("user", "assistant")
            and isinstance(t.get("content"), str)
            for t in turns
        ):  # fmt: skip
            continue
        settings = chat.get("settings")
        keep.append({**chat, "settings": settings if isinstance(settings, dict) else {}})
    return {"chats": keep}


def remember(memory, chat: dict) -> dict:
    """`memory` with `chat` first (replacing the stored one of its id), at most MAX_CHATS.

    >>> memory = remember(EMPTY, {"id": "a", "turns": [{"role": "user", "content": "x"}]})
    >>> memory = remember(memory, {"id": "b", "turns": []})
    >>> [c["id"] for c in memory["chats"]]
    ['b', 'a']
    """
    others = [c for c in valid(memory)["chats"] if c["id"] != chat["id"]]
    return {"chats": [chat, *others][:MAX_CHATS]}


def find(memory, chat_id) -> dict | None:
    return next((c for c in valid(memory)["chats"] if c["id"] == chat_id), None)


def choices(memory) -> list[tuple[str, str]]:
    """The past chats as a dropdown's (title, id) choices, newest first."""
    return [(c.get("title") or "(empty)", c["id"]) for c in valid(memory)["chats"]]


def wire(page, names: list[str], setting_names, edits: list, show) -> None:
    """Keep the Chat tab's conversation (`page`: chat_tab._Page) in the browser after each reply
    and Undo; on a page load that is no link, restore the latest chat (the load asks the server
    only when this browser has kept a chat: `RESTORE_ON_LOAD`); the past chats' list opens one.
    New chat, the bin and another model (`edits`: the Undo, New chat, bin events and the model's
    `input`) start a new entry at the next save, so the one before stays listed.
    `show(turns, model)`: the values of `page.emptied()` that show a stored conversation."""
    page.memory = gr.BrowserState(EMPTY, storage_key=STORAGE_KEY)
    page.chat_id = gr.State(None)
    settings = [page.model, page.system_prompt, page.json_schema, *page.settings()]
    private = {"queue": False, "api_visibility": "private"}

    def save(memory, chat_id, turns, model, system_prompt, json_schema, *values):
        if not turns or turns[-1].get("finish_reason") == "running":
            return gr.skip(), gr.skip(), gr.skip()
        chat_id = chat_id or new_id()
        chat = snapshot(
            chat_id, model, system_prompt, json_schema, dict(zip(setting_names, values)), turns
        )
        memory = remember(memory, chat)
        return memory, chat_id, gr.Dropdown(choices=choices(memory), value=chat_id)

    saving = [page.memory, page.chat_id, page.turns, *settings]
    saved = [page.memory, page.chat_id, page.past]
    page.result.change(save, saving, saved, **private)  # a reply finished
    undone, *new_chats, model_input = edits
    undone.then(save, saving, saved, **private)
    for new_chat in new_chats:
        new_chat.then(lambda: None, None, page.chat_id, **private)
    model_input(lambda: None, None, page.chat_id, **private)

    shown = page.emptied()
    unchanged = [gr.skip()] * (len(shown) + len(settings) + 1)

    def opened(memory, chat) -> list:
        """The outputs that show `chat` (a stored one) and list `memory`'s chats."""
        listed = gr.Dropdown(choices=choices(memory), value=chat and chat["id"])
        if chat is None:
            return [*unchanged, listed]
        model = chat.get("model") if chat.get("model") in names else names[0]
        values = [chat["settings"].get(name, gr.skip()) for name in setting_names]
        system_prompt, schema = str(chat.get("system_prompt") or ""), chat.get("json_schema")
        return [*show(chat["turns"], model), model, system_prompt, str(schema or ""), *values,
                chat["id"], listed]  # fmt: skip

    def restore(memory, query: str):
        chats = valid(memory)["chats"]
        linked = "tab=" in (query or "")  # a link sets its own conversation
        return opened(memory, None if linked or not chats else chats[0])

    outputs = [*shown, *settings, page.chat_id, page.past]
    with gr.Row(elem_classes="link-triggers"):  # hidden by CSS, so still clicked by the script
        query = gr.Textbox(show_label=False, container=False)
        restorer = gr.Button("restore the chat", elem_id="chat-restore")
    read_query = "(memory, query) => [memory, window.location.search]"
    restorer.click(restore, [page.memory, query], outputs, js=read_query, **private)
    # A page load runs nothing on the server unless this browser has kept a chat.
    Context.root_block.load(None, js=RESTORE_ON_LOAD, api_visibility="private")
    page.past.input(
        lambda memory, chat_id: opened(memory, find(memory, chat_id)),
        [page.memory, page.past],
        outputs,
        **private,
    )
