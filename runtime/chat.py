"""Chat: a conversation rendered by the model's own Jinja chat template, in a bounded sandbox.

Covers checking a conversation (`check_messages`), rendering it with a bundle's chat template
exactly as transformers' `tokenizer.apply_chat_template(..., tokenize=False)` renders it
(`ChatTemplate`), reading the chat fields of a Hugging Face directory (`hf_chat_fields`), and
`ChatMixin`, which gives `runtime.Generator` its chat methods (`apply_chat_template`, `chat`,
`stream_chat`, `count_chat_tokens`). It does not run models: the generator's search loop does.

The Jinja environment is transformers' one: `ImmutableSandboxedEnvironment` with `trim_blocks`,
`lstrip_blocks`, loop controls (`{% break %}`), the `{% generation %}` tag, `raise_exception`,
`tojson` (no HTML escaping, non-ASCII kept) and `strftime_now`; the template sees `messages`,
`tools` (None), `documents` (None), `add_generation_prompt` and the tokenizer's special tokens
(`bos_token`, `eos_token`, …).

Templates are untrusted code: a GGUF file or a downloaded folder carries them. Beyond what the
Jinja sandbox does, a render here is bounded, and every breach is a `ValueError` naming it:
- an attribute the sandbox refuses (`''.__class__`, `cycler.__init__.__globals__`) raises at once
  (the plain sandbox renders it as an empty string and carries on);
- at most `MAX_STEPS` template lines run and the render lasts at most `MAX_SECONDS` (a tracer
  counts the lines of the template's own code; `range` holds at most 100,000 items, as in the
  sandbox);
- no text or list longer than `MAX_CHARS` is built: `*`, `+`, `%`, `**` and `~` check sizes before
  they run, as do the filters and string methods that grow text (`join`, `replace`, `indent`,
  `center`, `format`, `tojson`, …), and the output stops at `MAX_CHARS` characters;
- `raise_exception(...)` in the template and syntax errors become `ValueError` with the message.
"""

from __future__ import annotations

import json
import math
import re
import string
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from functools import cached_property
from pathlib import Path

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.compiler import CodeGenerator
from jinja2.exceptions import SecurityError, TemplateError, TemplateSyntaxError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from .outputs import GenerationOutput, StreamEvent
from .text import control_prefix

ROLES = ("system", "user", "assistant")
MAX_CHARS = 1_000_000  # longest text (or list) a template may build, and its longest output
MAX_STEPS = 1_000_000  # template lines one render may run
MAX_SECONDS = 5.0  # longest render
TEMPLATE_FILE = "<chat template>"  # the file name of a compiled template's code
SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token")
SPECIAL_TOKEN_NAMES += ("cls_token", "mask_token")


class TemplateBreach(Exception):
    """A template went past a bound; `ChatTemplate.render` turns it into a `ValueError`."""


class TemplateRefusal(TemplateError):
    """`raise_exception(message)` in a template: it refuses the conversation."""


# ---- conversations ---------------------------------------------------------------------------


def check_messages(messages) -> list[dict]:
    """The conversation as a list of {"role", "content"} dicts; `ValueError` for anything else.

    >>> check_messages([{"role": "user", "content": "Hi"}])
    [{'role': 'user', 'content': 'Hi'}]
    >>> check_messages([{"role": "tool", "content": "4"}])
    Traceback (most recent call last):
    ...
    ValueError: `messages[0]['role']` must be one of 'system', 'user', 'assistant', got 'tool'
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
        extra = sorted(set(message) - {"role", "content"})
        if extra:
            raise ValueError(f"`{where}` must have only 'role' and 'content', got {extra[0]!r}")
        role, content = message.get("role"), message.get("content")
        if role not in ROLES:
            roles = ", ".join(repr(r) for r in ROLES)
            raise ValueError(f"`{where}['role']` must be one of {roles}, got {_shown(role)}")
        if not isinstance(content, str):
            raise ValueError(f"`{where}['content']` must be a str, got {_shown(content)}")
        checked.append({"role": role, "content": content})
    return checked


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:60]}… ({len(text)} characters)"


# ---- the bounded sandbox ---------------------------------------------------------------------


def _size(value) -> int:
    """Length of a string or container, else 0."""
    return len(value) if isinstance(value, str | list | tuple | dict) else 0


def _check_size(size: int, what: str) -> None:
    if size > MAX_CHARS:
        raise TemplateBreach(f"it builds {what} of {size:,} items (the limit is {MAX_CHARS:,})")


def _check_ints(args, kwargs, what: str) -> None:
    """Refuse an int argument larger than MAX_CHARS (widths, counts, repeat sizes)."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_CHARS:
            raise TemplateBreach(f"it passes {value:,} to {what} (the limit is {MAX_CHARS:,})")


_PERCENT_WIDTHS = re.compile(r"%[-#0 +]*(\d*)(?:\.(\d+))?")
_SPEC_WIDTHS = re.compile(r"(\d+)")


def _check_format(template: str) -> None:
    """Refuse a %-format or str.format template whose widths or precisions exceed MAX_CHARS."""
    numbers = [n for match in _PERCENT_WIDTHS.finditer(template) for n in match.groups() if n]
    try:
        for _, _, spec, _ in string.Formatter().parse(template):
            numbers += _SPEC_WIDTHS.findall(spec or "")
    except ValueError:
        pass  # not a valid str.format template: str.format itself will say so
    for number in numbers:
        _check_ints((int(number),), {}, "a format width")


def _json_size(value, indent: int, depth: int = 0, budget: int = MAX_CHARS) -> int:
    """An upper bound of len(json.dumps(value, indent=indent)), stopping once over `budget`."""
    if isinstance(value, str):
        return 6 * len(value) + 2
    if isinstance(value, dict | list | tuple):
        items = value.items() if isinstance(value, dict) else ((None, v) for v in value)
        total = 2
        for key, item in items:
            total += 4 + (indent or 0) * (depth + 1) + (6 * len(str(key)) + 2 if key else 0)
            total += _json_size(item, indent, depth + 1, budget - total)
            if total > budget:
                return total
        return total
    return 32


class _Generation(jinja2.ext.Extension):
    """`{% generation %}…{% endgeneration %}`: transformers marks assistant text with it; here
    the body renders unchanged, as transformers renders it without an assistant mask."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


class _CheckedConcat(CodeGenerator):
    """Compiles `a ~ b` so that the joined text's length is checked."""

    def visit_Concat(self, node, frame):
        self.write("environment.checked_text(")
        super().visit_Concat(node, frame)
        self.write(")")


_PASSED = (jinja2.Environment, jinja2.runtime.Context, jinja2.nodes.EvalContext)


def _checked_filter(name: str, function):
    """`function` (a Jinja filter) with sizes checked before and after it runs."""

    def checked(*args, **kwargs):
        # Filters that take the environment or context get it first: skip it when checking.
        values = [a for a in args if not isinstance(a, _PASSED)]
        _check_ints(values[1:], kwargs, f"the `{name}` filter")
        _check_filter_growth(name, values, kwargs)
        result = function(*args, **kwargs)
        _check_size(_size(result), f"text with the `{name}` filter")
        return result

    for attribute in ("jinja_pass_arg",):  # pass_environment / pass_context / pass_eval_context
        if hasattr(function, attribute):
            setattr(checked, attribute, getattr(function, attribute))
    return checked


def _check_filter_growth(name: str, values: list, kwargs: dict) -> None:
    """The filters whose output can be far larger than their input, estimated before they run."""
    if not values:
        return
    value, rest = values[0], values[1:]
    if name == "join" and isinstance(value, list | tuple):
        separator = rest[0] if rest else kwargs.get("d", "")
        size = sum(_size(v) or 20 for v in value) + _size(separator) * len(value)
        _check_size(size, "text with the `join` filter")
    elif name == "replace" and isinstance(value, str) and len(rest) >= 2:
        old, new = str(rest[0]), str(rest[1])
        count = len(value) + 1 if not old else value.count(old)
        _check_size(len(value) + count * len(new), "text with the `replace` filter")
    elif name == "indent" and isinstance(value, str):
        width = rest[0] if rest else kwargs.get("width", 4)
        width = len(width) if isinstance(width, str) else int(width)
        _check_size(len(value) + (value.count("\n") + 1) * width, "text with the `indent` filter")
    elif name == "format" and isinstance(value, str):
        _check_format(value)
    elif name == "tojson":
        indent = rest[1] if len(rest) > 1 else kwargs.get("indent")
        indent = len(indent) if isinstance(indent, str) else (indent or 0)
        _check_size(_json_size(value, indent), "JSON with the `tojson` filter")


def _check_method_growth(method, args, kwargs) -> None:
    """The string methods whose output can be far larger than their input."""
    owner, name = getattr(method, "__self__", None), getattr(method, "__name__", "")
    if not isinstance(owner, str):
        return
    if name == "join" and args and isinstance(args[0], list | tuple):
        size = sum(_size(v) for v in args[0]) + len(owner) * len(args[0])
        _check_size(size, "text with str.join")
    elif name == "replace" and len(args) >= 2 and isinstance(args[0], str):
        count = len(owner) + 1 if not args[0] else owner.count(args[0])
        _check_size(len(owner) + count * _size(args[1]), "text with str.replace")
    elif name == "expandtabs":
        size = args[0] if args else kwargs.get("tabsize", 8)
        _check_size(len(owner) + owner.count("\t") * int(size), "text with str.expandtabs")


class _BoundedSandbox(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox with sizes checked and unsafe attributes raising at once."""

    code_generator_class = _CheckedConcat
    intercepted_binops = frozenset({"*", "+", "%", "**"})

    def unsafe_undefined(self, obj, attribute):
        raise SecurityError(
            f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe"
        )

    def call_binop(self, context, operator, left, right):
        if operator == "*":
            for sized, count in ((left, right), (right, left)):
                if _size(sized) and isinstance(count, int) and not isinstance(count, bool):
                    _check_size(_size(sized) * count, "a repeated text or list")
        elif operator == "+" and _size(left) and _size(right):
            _check_size(_size(left) + _size(right), "a joined text or list")
        elif operator == "%" and isinstance(left, str):
            _check_format(left)
        elif operator == "**" and isinstance(left, int) and isinstance(right, int):
            digits = right * math.log10(abs(left)) if abs(left) > 1 and right > 0 else 0
            _check_size(int(digits), "a number with that many digits")
        return super().call_binop(context, operator, left, right)

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 (Jinja's own signature)
        _check_ints(args, kwargs, getattr(__obj, "__name__", "a function"))
        _check_method_growth(__obj, args, kwargs)
        result = super().call(__context, __obj, *args, **kwargs)
        _check_size(_size(result), f"text with {getattr(__obj, '__name__', 'a call')}")
        return result

    def wrap_str_format(self, value):
        owner = getattr(value, "__self__", None)
        if isinstance(owner, str) and getattr(value, "__name__", "") in ("format", "format_map"):
            _check_format(value.__self__)
        return super().wrap_str_format(value)

    def checked_text(self, text):
        _check_size(_size(text), "a joined text (~)")
        return text


def _raise_exception(message):
    raise TemplateRefusal(message)


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # transformers' filter: Jinja's own escapes HTML characters, which a prompt must keep.
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(format):
    return datetime.now().strftime(format)


def _environment() -> _BoundedSandbox:
    env = _BoundedSandbox(
        trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.filters = {name: _checked_filter(name, f) for name, f in env.filters.items()}
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    lipsum = env.globals["lipsum"]

    def bounded_lipsum(n=5, html=True, min=20, max=100):  # noqa: A002 (Jinja's names)
        _check_size(n * max, "lorem ipsum words")
        return lipsum(n=n, html=html, min=min, max=max)

    env.globals["lipsum"] = bounded_lipsum
    return env


class _Budget:
    """A tracer that counts the lines the template's own code runs, and watches the clock."""

    def __init__(self):
        self.steps = 0
        self.deadline = time.monotonic() + MAX_SECONDS

    def __call__(self, frame, event, arg):
        return self.line if frame.f_code.co_filename == TEMPLATE_FILE else None

    def line(self, frame, event, arg):
        if event == "line":
            self.steps += 1
            if self.steps > MAX_STEPS:
                raise TemplateBreach(f"it runs more than {MAX_STEPS:,} steps")
            if self.steps % 1024 == 0 and time.monotonic() > self.deadline:
                raise TemplateBreach(f"it runs longer than {MAX_SECONDS:g} seconds")
        return self.line


class ChatTemplate:
    """A compiled chat template and the special-token strings it sees.

    >>> t = ChatTemplate("{% for m in messages %}<{{ m.role }}>{{ m.content }}{{ eos_token }}"
    ...                  "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}",
    ...                  {"eos_token": "</s>"})
    >>> t.render([{"role": "user", "content": "Hi"}])
    '<user>Hi</s><assistant>'
    """

    def __init__(self, source: str, special_tokens: dict | None = None):
        if not isinstance(source, str):
            raise ValueError(f"`chat_template` must be a str, got {_shown(source)}")
        self.source = source
        self.special_tokens = dict(special_tokens or {})
        env = _environment()
        try:
            code = env.compile(source, filename=TEMPLATE_FILE)
            self.template = env.template_class.from_code(env, code, env.make_globals(None))
        except TemplateSyntaxError as error:
            raise ValueError(
                f"the chat template does not parse: {error.message} (line {error.lineno})"
            ) from None

    def render(self, messages, add_generation_prompt: bool = True) -> str:
        """The conversation as the model's prompt text; `ValueError` when the messages are not
        a conversation, the template refuses them (`raise_exception`) or it breaks a bound."""
        messages = check_messages(messages)
        if not isinstance(add_generation_prompt, bool):
            raise ValueError(
                f"`add_generation_prompt` must be a bool, got {_shown(add_generation_prompt)}"
            )
        variables = {
            **self.special_tokens,
            "messages": messages,
            "tools": None,
            "documents": None,
            "add_generation_prompt": add_generation_prompt,
        }
        budget, previous = _Budget(), sys.gettrace()
        pieces, size = [], 0
        sys.settrace(budget)
        try:
            for piece in self.template.generate(**variables):
                size += len(piece)
                if size > MAX_CHARS:
                    raise TemplateBreach(f"its output passes {MAX_CHARS:,} characters")
                pieces.append(piece)
        except TemplateBreach as error:
            raise ValueError(f"the chat template was stopped: {error}") from None
        except SecurityError as error:
            raise ValueError(
                f"the chat template reached for Python internals, which the sandbox refuses: "
                f"{error}"
            ) from None
        except OverflowError as error:  # the sandbox's `range` over 100,000 items
            raise ValueError(f"the chat template was stopped: {error}") from None
        except TemplateRefusal as error:
            raise ValueError(f"the chat template refused the conversation: {error}") from None
        except RecursionError:
            raise ValueError("the chat template was stopped: it recurses too deeply") from None
        except (
            TemplateError,
            TypeError,
            ValueError,
            AttributeError,
            LookupError,
            ArithmeticError,
        ) as error:
            raise ValueError(
                f"the chat template failed on this conversation: {type(error).__name__}: {error}"
            ) from None
        finally:
            sys.settrace(previous)
        return "".join(pieces)


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


def is_chat_manifest(manifest: dict) -> bool:
    """Whether a manifest is a chat model's: a causal LM with a chat template."""
    chat = manifest.get("chat") or {}
    return manifest.get("task") == "causal-lm" and bool(chat.get("template"))


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
        chat = self.manifest["chat"]
        special = chat.get("special_tokens")
        if special is None:  # the strings of the manifest's special token ids
            ids = self.manifest.get("special_tokens", {})
            special = {
                name: self.tokenizer.id_to_token(ids[f"{name}_id"])
                for name in SPECIAL_TOKEN_NAMES
                if ids.get(f"{name}_id") is not None
            }
        return ChatTemplate(chat["template"], special)

    @cached_property
    def end_of_turn_token_ids(self) -> tuple[int, ...]:
        """The tokens that end the assistant's turn: the manifest's
        `chat.end_of_turn_token_ids`, else the EOS token."""
        self._chat_template  # noqa: B018 (raises for a model that is not a chat model)
        ids = self.manifest["chat"].get("end_of_turn_token_ids") or [self.eos_token_id]
        return tuple(dict.fromkeys(int(i) for i in ids if i is not None))

    def apply_chat_template(self, messages, add_generation_prompt: bool = True) -> str:
        """The conversation as prompt text, rendered as transformers'
        `tokenizer.apply_chat_template(messages, tokenize=False, ...)` renders it."""
        return self._chat_template.render(messages, add_generation_prompt)

    def count_chat_tokens(self, messages, add_generation_prompt: bool = True) -> int:
        """Tokens the conversation takes in the context (the generation prompt included)."""
        text = self.apply_chat_template(messages, add_generation_prompt)
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def encode_chat(self, messages, controls: dict | None = None) -> list[int]:
        """Token ids of the conversation followed by the assistant's turn opening, checked
        against the context (the template writes its own BOS; nothing else is added)."""
        text = control_prefix(self.manifest.get("controls", {}), controls)
        text += self.apply_chat_template(messages, add_generation_prompt=True)
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        if len(ids) >= self.context_length:
            raise ValueError(
                f"the conversation is {len(ids)} tokens; the model's context is "
                f"{self.context_length} tokens, which leaves no room for a reply (remove "
                "earlier turns or shorten them)"
            )
        return ids

    def _chat_events(self, messages, config, controls, alternatives, live=True):
        """(prompt tokens, the reply's events, step by step when `live`); every check runs
        before this returns."""
        config = self._settings(config)
        if config.num_beams > 1:
            raise ValueError(f"`num_beams` must be 1 for chat, got {config.num_beams}")
        ids = self.encode_chat(messages, controls)
        plan = self._plan([ids], config, controls)
        events = self._token_events(plan, alternatives, self.end_of_turn_token_ids, live)
        return len(ids), events

    def chat(self, messages, config=None, controls=None) -> list[GenerationOutput]:
        """The assistant's reply to `messages` (`num_return_sequences` of them), ending at the
        end of its turn; `text` holds no template tokens. Raises `ValueError` for a model without
        a chat template, a malformed conversation or one that fills the context."""
        prompt_tokens, events = self._chat_events(
            messages, config, controls, alternatives=0, live=False
        )
        outputs: dict[int, GenerationOutput] = {}
        for event in events:
            out = outputs.setdefault(
                event.index, GenerationOutput("", [], [], "", 0, prompt_tokens)
            )
            if event.token_id is not None:
                out.token_ids.append(event.token_id)
                out.logprobs.append(event.logprob)
            out.text += event.text
            if event.finish_reason:
                out.finish_reason = event.finish_reason
        return [outputs[i] for i in sorted(outputs)]

    def stream_chat(self, messages, config=None, controls=None) -> Iterator[StreamEvent]:
        """The reply token by token, as `stream` gives it (each event with its top-5
        alternatives). The checks run when this is called, before any event."""
        return self._chat_events(messages, config, controls, alternatives=5)[1]
