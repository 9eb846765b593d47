"""Chat: a conversation rendered by the model's own Jinja chat template, in a bounded sandbox.

Covers checking a conversation (`check_messages`), rendering it with a bundle's chat template
exactly as transformers' `tokenizer.apply_chat_template(..., tokenize=False)` renders it
(`ChatTemplate`), reading the chat fields of a Hugging Face directory (`hf_chat_fields`), and
`ChatMixin`, which gives `runtime.Generator` its chat methods (`apply_chat_template`, `chat`,
`stream_chat`, `count_chat_tokens`). It does not run models: the generator's search loop does.

The Jinja environment is transformers' one: `ImmutableSandboxedEnvironment` with `trim_blocks`,
`lstrip_blocks`, loop controls (`{% break %}`), the `{% generation %}` tag, `raise_exception`,
`tojson` (no HTML escaping, non-ASCII kept) and `strftime_now`; the template sees `messages`,
`tools` (the functions a reply may call, OpenAI's `[{"type": "function", "function": {…}}]`,
as transformers passes them; None without), `documents` (None), `add_generation_prompt` and
the tokenizer's special tokens (`bos_token`, `eos_token`, …). A conversation with tools has tool
turns (`{"role": "tool", "content", "tool_call_id"}`) and assistant turns with `tool_calls`
(`[{"id", "type": "function", "function": {"name", "arguments": {…}}}]`, the arguments an
object, as templates write them with `tojson`). A template takes tools when its source names
`tools` (`takes_tools`); it writes calls in the hermes format (runtime/tools.py) when it names
`<tool_call>` (`tool_format`).

Templates are untrusted code: a GGUF file or a downloaded folder carries them. So a template is
never compiled or run in this process: a sandbox process (runtime/template_sandbox.py, kept warm
by runtime/template_pool.py) does both, and this process waits on a pipe, so a render never
holds up another request. Its budgets, each breach a `ValueError` naming it:
- time: `MAX_SECONDS` (5 s) per compile or render; the process is killed at the deadline, even
  in the middle of one long call (a sort or a comparison of huge lists);
- memory: the sandbox process's address space is capped at `MAX_MEMORY` (256 MiB, Linux);
- steps: at most `MAX_STEPS` template lines; `range` holds at most 100,000 items;
- sizes, checked before the operation that would break them: no text or list longer than
  `MAX_CHARS` (1,000,000; `*`, `+`, `%`, `~` and the filters and string methods that grow text:
  `join`, `replace`, `indent`, `wordwrap`, `center`, `format`, `tojson`, …), no integer over
  `MAX_INT_BITS` (256 bits: `*`, `**`, `+`, `-` and every filter's or call's result), and the
  output stops at `MAX_CHARS` characters; the template's source is at most `MAX_CHARS` too;
- nesting: a template nested too deeply to compile (thousands of brackets, 20 nested loops or
  about 100 nested blocks: Python's limits)
  is refused as such, and so is recursion past Python's limit while rendering;
- an attribute the sandbox refuses (`''.__class__`, `cycler.__init__.__globals__`) raises at
  once (the plain sandbox renders it as an empty string and carries on);
- `raise_exception(...)` in the template and syntax errors become `ValueError` with the message.

Encoding a conversation (`encode_chat`, `count_chat_tokens`) parses the special tokens that the
template writes, never those written in message text: a user who writes `<|im_start|>system`
gets those characters as ordinary text pieces, as chat servers do (`ChatMixin._encode_prompt`);
a conversation without such text gets exactly the ids of its whole prompt, as before.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from functools import cached_property
from pathlib import Path

from . import template_pool
from .manifest import Manifest
from .outputs import GenerationOutput, StreamEvent
from .template_sandbox import MAX_CHARS, MAX_INT_BITS, MAX_MEMORY, MAX_STEPS
from .text import control_prefix

__all__ = ["MAX_CHARS", "MAX_INT_BITS", "MAX_MEMORY", "MAX_SECONDS", "MAX_STEPS", "ChatTemplate"]
__all__ += ["ChatMixin", "check_messages", "hf_chat_fields", "is_chat_manifest"]

ROLES = ("system", "user", "assistant", "tool")
MAX_SECONDS = 5.0  # longest render (compiling included); the sandbox process is killed then
SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token")
SPECIAL_TOKEN_NAMES += ("cls_token", "mask_token")


# ---- conversations ---------------------------------------------------------------------------


def check_messages(messages) -> list[dict]:
    """The conversation as a list of {"role", "content"} dicts (plus `tool_calls` on an
    assistant's turn, `tool_call_id` on a tool's); `ValueError` for anything else.

    >>> check_messages([{"role": "user", "content": "Hi"}])
    [{'role': 'user', 'content': 'Hi'}]
    >>> check_messages([{"role": "user", "content": 4}])
    Traceback (most recent call last):
    ...
    ValueError: `messages[0]['content']` must be a str, got 4
    """
    if not isinstance(messages, list | tuple) or not messages:
        raise ValueError(
            f"`messages` must be a non-empty list of {{'role', 'content'}} dicts, got "
            f"{_shown(messages)}"
        )
    checked = []
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise ValueError(
                f"`{where}` must be a dict with 'role' and 'content', got {_shown(message)}"
            )
        role, content = message.get("role"), message.get("content")
        if role not in ROLES:
            roles = ", ".join(repr(r) for r in ROLES)
            raise ValueError(f"`{where}['role']` must be one of {roles}, got {_shown(role)}")
        own = {"assistant": "tool_calls", "tool": "tool_call_id"}.get(role)
        extra = sorted(set(message) - {"role", "content", own})
        if extra:
            allowed = "'role' and 'content'" + (f" (and {own!r})" if own else "")
            raise ValueError(f"`{where}` must have only {allowed}, got {extra[0]!r}")
        if not isinstance(content, str):
            raise ValueError(f"`{where}['content']` must be a str, got {_shown(content)}")
        checked.append({"role": role, "content": content})
        if role == "tool" and message.get("tool_call_id") is not None:
            if not isinstance(message["tool_call_id"], str):
                raise ValueError(
                    f"`{where}['tool_call_id']` must be a str, got "
                    f"{_shown(message['tool_call_id'])}"
                )
            checked[-1]["tool_call_id"] = message["tool_call_id"]
        if role == "assistant" and message.get("tool_calls"):
            checked[-1]["tool_calls"] = [
                _checked_call(f"{where}['tool_calls'][{i}]", call)
                for i, call in enumerate(message["tool_calls"])
            ]
    return checked


def _checked_call(where: str, call) -> dict:
    """One earlier call of an assistant's turn: {"id", "type": "function", "function": {"name",
    "arguments": an object}}."""
    function = call.get("function") if isinstance(call, dict) else None
    if (
        not isinstance(function, dict)
        or not isinstance(function.get("name"), str)
        or not isinstance(function.get("arguments"), dict)
    ):
        raise ValueError(
            f"`{where}` must be {{'id', 'type': 'function', 'function': {{'name': str, "
            f"'arguments': dict}}}}, got {_shown(call)}"
        )
    name, arguments = function["name"], function["arguments"]
    return {
        "id": str(call.get("id", "")),
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def _check_tools(tools) -> list[dict] | None:
    """The functions a reply may call, as templates see them: None, or a non-empty list of
    `{"type": "function", "function": {"name", …}}` dicts."""
    if tools is None:
        return None
    if (
        not isinstance(tools, list | tuple)
        or not tools
        or not all(
            isinstance(t, dict)
            and isinstance(t.get("function"), dict)
            and isinstance(t["function"].get("name"), str)
            for t in tools
        )
    ):
        raise ValueError(
            "`tools` must be None or a non-empty list of {'type': 'function', 'function': "
            f"{{'name', …}}}} dicts, got {_shown(tools)}"
        )
    return list(tools)


def _texts(value) -> Iterator[str]:
    """Every string inside `value` (dicts' values, lists' items), depth first."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _texts(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _texts(item)


def _mapped(value, change):
    """`value` with `change` applied to every string inside it (dicts' values, lists' items)."""
    if isinstance(value, str):
        return change(value)
    if isinstance(value, dict):
        return {key: _mapped(item, change) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_mapped(item, change) for item in value]
    return value


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:60]}… ({len(text)} characters)"


# ---- rendering --------------------------------------------------------------------------


class ChatTemplate:
    """A chat template, checked to compile, and the special-token strings it sees; it is
    compiled and rendered in a sandbox process (runtime/template_pool.py), never here.

    >>> t = ChatTemplate("{% for m in messages %}<{{ m.role }}>{{ m.content }}{{ eos_token }}"
    ...                  "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}",
    ...                  {"eos_token": "</s>"})
    >>> t.render([{"role": "user", "content": "Hi"}])
    '<user>Hi</s><assistant>'
    """

    def __init__(self, source: str, special_tokens: dict | None = None):
        if not isinstance(source, str):
            raise ValueError(f"`chat_template` must be a str, got {_shown(source)}")
        if len(source) > MAX_CHARS:
            raise ValueError(
                f"`chat_template` must be at most {MAX_CHARS:,} characters, got {len(source):,}"
            )
        self.source = source
        self.special_tokens = dict(special_tokens or {})
        for name, value in self.special_tokens.items():
            if not isinstance(value, str | None):
                raise ValueError(f"`{name}` must be a str, got {_shown(value)}")
        self._ask({"op": "compile"})

    @property
    def takes_tools(self) -> bool:
        """Whether the template renders `tools` (its source names them)."""
        return re.search(r"\btools\b", self.source) is not None

    @property
    def tool_format(self) -> str | None:
        """runtime/tools.py's format the template teaches for calls ("hermes" when it writes
        `<tool_call>`), or None when it takes no tools or writes calls some other way."""
        return "hermes" if self.takes_tools and "<tool_call>" in self.source else None

    def render(self, messages, add_generation_prompt: bool = True, tools=None) -> str:
        """The conversation as the model's prompt text (with the functions `tools` a reply may
        call); `ValueError` when the messages are not a conversation, the template refuses them
        (`raise_exception`) or it breaks a bound."""
        messages = check_messages(messages)
        tools = _check_tools(tools)
        if not isinstance(add_generation_prompt, bool):
            raise ValueError(
                f"`add_generation_prompt` must be a bool, got {_shown(add_generation_prompt)}"
            )
        variables = {
            **self.special_tokens,
            "messages": messages,
            "tools": tools,
            "documents": None,
            "add_generation_prompt": add_generation_prompt,
        }
        return self._ask({"op": "render", "variables": variables})

    def _ask(self, request: dict) -> str:
        """The sandbox's text for `request`; `ValueError` with its message, or when it ran past
        the time budget or its process ended."""
        request = {**request, "source": self.source, "seconds": MAX_SECONDS}
        try:
            reply = template_pool.pool().ask(request, MAX_SECONDS)
        except TimeoutError:
            raise ValueError(
                f"the chat template was stopped: it runs longer than {MAX_SECONDS:g} s"
            ) from None
        except template_pool.WorkerLost as error:
            raise ValueError(
                f"the chat template was stopped: its sandbox process failed ({error}; it may "
                f"need more than {MAX_MEMORY // 2**20} MiB of memory)"
            ) from None
        if "error" in reply:
            raise ValueError(reply["error"])
        return reply["text"]


# ---- bundle fields ---------------------------------------------------------------------------


def hf_chat_fields(directory: Path) -> dict:
    """The manifest's `chat` object, read from a Hugging Face / optimum export directory.

    `template` is tokenizer_config.json's `chat_template` (its "default" one when it names
    several) or chat_template.jinja's; `special_tokens` are the special-token strings the
    template sees (tokenizer_config.json's `bos_token`, `eos_token`, …); `end_of_turn_token_ids`
    are the tokens that end a reply, as transformers stops on them: generation_config.json's
    `eos_token_id` (one or a list) and the tokenizer's `eos_token`; `end_of_turn_tokens` their
    text. Empty when the directory has no chat template.
    """
    config = _read_json(directory / "tokenizer_config.json")
    template = config.get("chat_template")
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    if (directory / "chat_template.jinja").exists():
        template = (directory / "chat_template.jinja").read_text(encoding="utf-8")
    if not isinstance(template, str) or not template:
        return {}
    special = {}
    for name in SPECIAL_TOKEN_NAMES:
        value = config.get(name)
        value = value.get("content") if isinstance(value, dict) else value  # an AddedToken
        if isinstance(value, str):
            special[name] = value
    eos = _read_json(directory / "generation_config.json").get("eos_token_id")
    ends = [i for i in (eos if isinstance(eos, list) else [eos]) if isinstance(i, int)]
    tokenizer = _read_json(directory / "tokenizer.json")
    vocab = tokenizer.get("model", {}).get("vocab")
    texts = {i: t for t, i in vocab.items()} if isinstance(vocab, dict) else {}  # BPE, WordLevel
    texts.update({t.get("id"): t.get("content") for t in tokenizer.get("added_tokens", [])})
    ends += [i for i, text in texts.items() if text == special.get("eos_token")]
    ends = list(dict.fromkeys(ends))
    return {
        "chat": {
            "template": template,
            "special_tokens": special,
            "end_of_turn_token_ids": ends,
            "end_of_turn_tokens": [texts.get(i) for i in ends],
        }
    }


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


# ---- the generator's chat methods ------------------------------------------------------------


def is_chat_manifest(manifest: Manifest) -> bool:
    """Whether a manifest is a chat model's: a causal LM with a chat template."""
    chat = manifest.chat
    return manifest.task == "causal-lm" and chat is not None and bool(chat.template)


class ChatMixin:
    """Chat for `runtime.Generator`: a causal LM whose bundle carries a chat template."""

    @property
    def is_chat_model(self) -> bool:
        """A causal LM whose manifest's `chat` object has a template (docs/bundle.md)."""
        return is_chat_manifest(self.manifest)

    @cached_property
    def _chat_template(self) -> ChatTemplate:
        if not self.is_chat_model:
            raise ValueError(
                f"{self.name!r} is not a chat model: its bundle has no chat template (use "
                "`generate` with a plain prompt)"
            )
        chat = self.manifest.chat
        special = chat.special_tokens
        if special is None:  # the strings of the manifest's special token ids
            ids = self.manifest.special_tokens
            special = {
                name: self.tokenizer.id_to_token(getattr(ids, f"{name}_id"))
                for name in SPECIAL_TOKEN_NAMES
                if getattr(ids, f"{name}_id", None) is not None
            }
        return ChatTemplate(chat.template, special)

    @cached_property
    def end_of_turn_token_ids(self) -> tuple[int, ...]:
        """The tokens that end the assistant's turn: the manifest's
        `chat.end_of_turn_token_ids`, else the EOS token."""
        self._chat_template  # noqa: B018 (raises for a model that is not a chat model)
        ids = self.manifest.chat.end_of_turn_token_ids or [self.eos_token_id]
        return tuple(dict.fromkeys(int(i) for i in ids if i is not None))

    @property
    def chat_tool_format(self) -> str | None:
        """How this model's template writes tool calls: runtime/tools.py's "hermes", or None
        (it takes no tools, or writes calls in a format this runtime does not read)."""
        return self._chat_template.tool_format

    @property
    def chat_takes_tools(self) -> bool:
        """Whether this model's chat template renders the `tools` it is given."""
        return self._chat_template.takes_tools

    def apply_chat_template(self, messages, add_generation_prompt: bool = True, tools=None) -> str:
        """The conversation as prompt text, rendered as transformers'
        `tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, ...)` renders it."""
        return self._chat_template.render(messages, add_generation_prompt, tools)

    def count_chat_tokens(self, messages, add_generation_prompt: bool = True, tools=None) -> int:
        """Tokens the conversation takes in the context (the generation prompt included)."""
        return len(self._encode_prompt(messages, add_generation_prompt, tools=tools))

    def encode_chat(self, messages, controls: dict | None = None, tools=None) -> list[int]:
        """Token ids of the conversation (with the functions `tools` a reply may call) followed
        by the assistant's turn opening, checked against the context (the template writes its
        own BOS; nothing else is added). Special tokens written in message text (or in the
        tools' and earlier calls' text) are encoded as ordinary text."""
        prefix = control_prefix(self.manifest.controls, controls)
        ids = self._encode_prompt(messages, True, prefix, tools)
        if len(ids) >= self.context_length:
            raise ValueError(
                f"the conversation is {len(ids)} tokens; the model's context is "
                f"{self.context_length} tokens, which leaves no room for a reply (remove "
                "earlier turns or shorten them)"
            )
        return ids

    @cached_property
    def _special_texts(self) -> tuple[str, ...]:
        """The texts of the tokenizer's special tokens, longest first."""
        added = self.tokenizer.get_added_tokens_decoder().values()
        return tuple(sorted({t.content for t in added if t.special and t.content}, key=len)[::-1])

    @cached_property
    def _plain_tokenizer(self):
        """The tokenizer with special-token parsing off: their texts encode as ordinary text."""
        plain = type(self.tokenizer).from_str(self.tokenizer.to_str())
        plain.encode_special_tokens = True
        return plain

    def _encode_prompt(
        self, messages, add_generation_prompt: bool, prefix: str = "", tools=None
    ) -> list[int]:
        """`prefix` and the rendered conversation as token ids, with the special tokens that the
        prefix and the template write parsed, and those inside message text not.

        A conversation whose text holds no special token's text is the whole prompt encoded (the
        ids transformers' `apply_chat_template(..., tokenize=True)` gives). Otherwise it is
        rendered again with each such text in the messages replaced by a private-use character
        found nowhere else; the special tokens the tokenizer finds in that render are the
        template's, and the text between them, with the replaced texts put back, is encoded with
        special-token parsing off."""
        messages = check_messages(messages)
        text = prefix + self.apply_chat_template(messages, add_generation_prompt, tools)
        written = list(_texts([messages, tools]))
        found = [s for s in self._special_texts if any(s in t for t in written)]
        if not found:
            return self.tokenizer.encode(text, add_special_tokens=False).ids
        taken = set(re.findall("[\U00100000-\U0010ffff]", text))
        free = (chr(c) for c in range(0x100000, 0x10FFFE) if chr(c) not in taken)
        stand_in = dict(zip(found, free, strict=False))  # `found` is longest first, as is `|`
        if len(stand_in) < len(found):
            raise ValueError(
                "the conversation uses every private-use character; it cannot be encoded"
            )
        hiding = re.compile("|".join(re.escape(s) for s in found))

        def hide(text: str) -> str:
            return hiding.sub(lambda hit: stand_in[hit.group()], text)

        masked, masked_tools = _mapped([messages, tools], hide)
        masked_text = prefix + self.apply_chat_template(masked, add_generation_prompt, masked_tools)
        original = {c: s for s, c in stand_in.items()}
        showing = re.compile("|".join(re.escape(c) for c in original))
        encoding = self.tokenizer.encode(masked_text, add_special_tokens=False)
        special_ids = {self.tokenizer.token_to_id(s) for s in self._special_texts}
        ids, position = [], 0
        for token_id, (start, end) in zip(encoding.ids, encoding.offsets, strict=True):
            if token_id in special_ids:
                ids += self._plain_ids(showing, original, masked_text[position:start])
                ids.append(token_id)
                position = end
        return ids + self._plain_ids(showing, original, masked_text[position:])

    def _plain_ids(self, showing, original: dict, piece: str) -> list[int]:
        if not piece:
            return []
        piece = showing.sub(lambda hit: original[hit.group()], piece)
        return self._plain_tokenizer.encode(piece, add_special_tokens=False).ids

    def _chat_events(self, messages, config, controls, alternatives, live=True, tools=None):
        """(prompt tokens, the reply's events, step by step when `live`); every check runs
        before this returns."""
        config = self._settings(config)
        if config.num_beams > 1:
            raise ValueError(f"`num_beams` must be 1 for chat, got {config.num_beams}")
        ids = self.encode_chat(messages, controls, tools)
        plan = self._plan([ids], config, controls)
        events = self._token_events(plan, alternatives, self.end_of_turn_token_ids, live)
        return len(ids), events

    def chat(self, messages, config=None, controls=None, tools=None) -> list[GenerationOutput]:
        """The assistant's reply to `messages` (`num_return_sequences` of them), ending at the
        end of its turn; `text` holds no template tokens. `tools` go to the template (the
        config's `tool_calls` constrains the calls). Raises `ValueError` for a model without a
        chat template, a malformed conversation or one that fills the context."""
        prompt_tokens, events = self._chat_events(
            messages, config, controls, alternatives=0, live=False, tools=tools
        )
        outputs: dict[int, GenerationOutput] = {}
        for event in events:
            if event.index not in outputs:
                outputs[event.index] = GenerationOutput("", [], [], "", 0, prompt_tokens)
            outputs[event.index].add(event)
        return [outputs[i] for i in sorted(outputs)]

    def stream_chat(
        self, messages, config=None, controls=None, tools=None
    ) -> Iterator[StreamEvent]:
        """The reply token by token, as `stream` gives it (each event with its top-5
        alternatives). The checks run when this is called, before any event."""
        return self._chat_events(messages, config, controls, alternatives=5, tools=tools)[1]
