"""The chat-template sandbox: compiles and renders one untrusted Jinja template under caps.

This module runs alone in a worker process (runtime/template_pool.py starts it by its path, so it
imports only the standard library and jinja2, nothing of ours): `serve()` reads one JSON request
a line from stdin and writes one JSON reply a line, `{"text": ...}` or `{"error": message}`
(and `{"ready": true}` first, once it has started).
runtime/chat.py describes the rendering and its budgets; here is how they are kept:

- the Jinja environment is transformers' (`ImmutableSandboxedEnvironment`, `trim_blocks`,
  `lstrip_blocks`, loop controls, `{% generation %}`, `raise_exception`, its `tojson`,
  `strftime_now`), with an attribute the sandbox refuses raising at once;
- a tracer counts the lines of the template's own code (at most `MAX_STEPS`) and watches the
  clock; the process that sent the request kills this one at the deadline all the same, since
  one call (a sort, a comparison of huge lists) can hold the interpreter far longer;
- sizes are checked before the operations that grow them run: text and lists (`*`, `+`, `%`,
  `~`, the filters and string methods that grow text) at most `MAX_CHARS` items, integers at most
  `MAX_INT_BITS` bits (`*`, `**`, `+`, `-`, and every filter's or call's result);
- the process's address space is capped at `MAX_MEMORY` bytes (Linux), so a template that
  builds many large values ends in a `MemoryError` reply, after which the process exits;
- a template that nests too deeply to compile (`RecursionError` in Jinja's parser, Python's own
  nesting limits) is refused as such.

It does not check conversations or choose the budget: runtime/chat.py does, before asking.
"""

from __future__ import annotations

import json
import os
import re
import signal
import string
import sys
import time
from datetime import datetime
from functools import lru_cache

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.compiler import CodeGenerator
from jinja2.exceptions import SecurityError, TemplateError, TemplateSyntaxError
from jinja2.sandbox import ImmutableSandboxedEnvironment

MAX_CHARS = 1_000_000  # longest text (or list) a template may build, and its longest output
MAX_STEPS = 1_000_000  # template lines one render may run
MAX_INT_BITS = 256  # largest integer a template may build (about 77 decimal digits)
MAX_MEMORY = 256 * 2**20  # address space of a worker process, in bytes (Linux)
TEMPLATE_FILE = "<chat template>"  # the file name of a compiled template's code
OVERRUN_S = 1.0  # past the budget, the worker ends itself if its parent has not killed it


class TemplateBreach(Exception):
    """A template went past a bound; the reply is a `ValueError` message naming it."""


class TemplateRefusal(TemplateError):
    """`raise_exception(message)` in a template: it refuses the conversation."""


def _size(value) -> int:
    """Length of a string, bytes or container, else 0."""
    return len(value) if isinstance(value, str | bytes | list | tuple | dict) else 0


def _check_size(size: int, what: str) -> None:
    if size > MAX_CHARS:
        raise TemplateBreach(f"it builds {what} of {size:,} items (the limit is {MAX_CHARS:,})")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_bits(bits: int, what: str) -> None:
    if bits > MAX_INT_BITS:
        raise TemplateBreach(
            f"it builds a number of {bits:,} bits with {what} (the limit is {MAX_INT_BITS:,})"
        )


def _check_number(value, what: str) -> None:
    if _is_int(value):
        _check_bits(value.bit_length(), what)


def _check_ints(args, kwargs, what: str) -> None:
    """Refuse an int argument larger than MAX_CHARS (widths, counts, repeat sizes)."""
    for value in (*args, *kwargs.values()):
        if _is_int(value) and abs(value) > MAX_CHARS:
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
        if len(number) > 7:  # more digits than MAX_CHARS has: never parse a huge number
            number = str(MAX_CHARS + 1)
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
        _check_number(result, f"the `{name}` filter")
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
    elif name == "wordwrap" and isinstance(value, str):
        width = int(rest[0] if rest else kwargs.get("width", 79))
        wrap = rest[2] if len(rest) > 2 else kwargs.get("wrapstring")
        lines = len(value) // max(width, 1) + 1
        size = len(value) + lines * len(str(wrap or "\n"))
        _check_size(size, "text with the `wordwrap` filter")
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
    intercepted_binops = frozenset({"*", "+", "-", "%", "**"})

    def unsafe_undefined(self, obj, attribute):
        raise SecurityError(
            f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe"
        )

    def call_binop(self, context, operator, left, right):
        if operator == "*":
            for sized, count in ((left, right), (right, left)):
                if _size(sized) and _is_int(count):
                    _check_size(_size(sized) * count, "a repeated text or list")
            if _is_int(left) and _is_int(right):
                _check_bits(left.bit_length() + right.bit_length(), "`*`")
        elif operator == "+" and _size(left) and _size(right):
            _check_size(_size(left) + _size(right), "a joined text or list")
        elif operator == "%" and isinstance(left, str):
            _check_format(left)
        elif operator == "**" and _is_int(left) and _is_int(right) and abs(left) > 1:
            _check_bits((abs(left).bit_length() - 1) * max(right, 0) + 1, "`**`")
        result = super().call_binop(context, operator, left, right)
        _check_number(result, f"`{operator}`")
        return result

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 (Jinja's own signature)
        _check_ints(args, kwargs, getattr(__obj, "__name__", "a function"))
        _check_method_growth(__obj, args, kwargs)
        result = super().call(__context, __obj, *args, **kwargs)
        what = getattr(__obj, "__name__", "a call")
        _check_size(_size(result), f"text with {what}")
        _check_number(result, what)
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
    """A tracer that counts the lines the template's own code runs, and watches its CPU
    clock (time spent paused in the pool's slow lane, runtime/template_pool.py, is not counted)."""

    def __init__(self, seconds: float):
        self.steps, self.seconds = 0, seconds
        self.deadline = time.process_time() + seconds

    def __call__(self, frame, event, arg):
        return self.line if frame.f_code.co_filename == TEMPLATE_FILE else None

    def line(self, frame, event, arg):
        if event == "line":
            self.steps += 1
            if self.steps > MAX_STEPS:
                raise TemplateBreach(f"it runs more than {MAX_STEPS:,} steps")
            if self.steps % 1024 == 0 and time.process_time() > self.deadline:
                raise TemplateBreach(f"it runs longer than {self.seconds:g} s")
        return self.line


_ENVIRONMENT = _environment()


@lru_cache(maxsize=16)
def compiled(source: str) -> jinja2.Template:
    """The template compiled in the bounded sandbox; `ValueError` when it does not compile."""
    env = _ENVIRONMENT
    try:
        code = env.compile(source, filename=TEMPLATE_FILE)
    except TemplateSyntaxError as error:
        raise ValueError(
            f"the chat template does not parse: {error.message} (line {error.lineno})"
        ) from None
    except (RecursionError, SyntaxError) as error:  # Jinja's parser, or Python's own limits
        reason = "" if isinstance(error, RecursionError) else f" ({error.msg})"
        raise ValueError(f"the chat template nests too deeply to compile{reason}") from None
    return env.template_class.from_code(env, code, env.make_globals(None))


def render(source: str, variables: dict, seconds: float) -> str:
    """The template's output for `variables`; `ValueError` naming the bound it broke, its
    `raise_exception` message or its error."""
    template = compiled(source)
    budget, previous = _Budget(seconds), sys.gettrace()
    pieces, size = [], 0
    sys.settrace(budget)
    try:
        for piece in template.generate(**variables):
            size += len(piece)
            if size > MAX_CHARS:
                raise TemplateBreach(f"its output passes {MAX_CHARS:,} characters")
            pieces.append(piece)
    except TemplateBreach as error:
        raise ValueError(f"the chat template was stopped: {error}") from None
    except SecurityError as error:
        raise ValueError(
            f"the chat template reached for Python internals, which the sandbox refuses: {error}"
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


MEMORY_MESSAGE = f"the chat template was stopped: it needs more than {MAX_MEMORY // 2**20} MiB"


def answer(request: dict) -> dict:
    """The reply to one request: {"op": "compile" | "render", "source", "variables", "seconds"}."""
    try:
        if request["op"] == "compile":
            compiled(request["source"])
            return {"text": ""}
        return {"text": render(request["source"], request["variables"], request["seconds"])}
    except ValueError as error:
        return {"error": str(error)}
    except MemoryError:
        return {"error": f"{MEMORY_MESSAGE} of memory", "fatal": True}


def serve() -> None:
    """Answer requests, one JSON line each, until stdin closes or a render runs out of memory."""
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything else printed goes to stderr, never into the replies
    sys.stdout = sys.stderr
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (MAX_MEMORY, MAX_MEMORY))
    except (ImportError, ValueError, OSError):
        pass  # no address-space limit here (not Linux): the parent's deadline still holds
    sys.setrecursionlimit(1000)
    signal.signal(signal.SIGVTALRM, signal.SIG_DFL)  # even if the parent ignored it
    replies.write(b'{"ready": true}\n')  # the parent's clock starts after this
    replies.flush()
    for line in sys.stdin.buffer:
        request = json.loads(line)
        # SIGVTALRM (CPU time: a worker paused in the pool's queue is not counted), left
        # to its default action, ends this process even while one call holds
        # the interpreter, should the parent that kills it at the deadline be gone.
        signal.setitimer(signal.ITIMER_VIRTUAL, request.get("seconds", 0) + OVERRUN_S)
        reply = answer(request)
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        replies.write(json.dumps(reply).encode("ascii") + b"\n")
        replies.flush()
        if reply.get("fatal"):
            return
