"""The JSON Schema sandbox: compiles one client's schema with llguidance under caps, in a process
of its own, so that a schema that crashes or runs away costs only this process.

This module runs alone in a worker process (runtime/template_pool.py starts it by its path, so it
imports only the standard library and llguidance, nothing of ours): `serve()` reads one JSON
request a line from stdin and writes one JSON reply a line (and `{"ready": true}` first).
A request `{"schema": text, "seconds": s}` asks for the schema's llguidance grammar (`{"lark":
text, …}` for a Lark grammar's: runtime/tools.py's tool calls, a schema inside); with
`"tokenizer": key` it also builds the matcher over that tokenizer's tokens and computes its first
mask, as a request's first step does. Its replies:

- `{"grammar": text, "bytes": n}`: n is how much the process's resident memory grew while
  compiling (freed memory handed back to the system first, with `malloc_trim`, so that the growth
  is the compile's own): the size runtime/structured.py charges the compiled schema in its cache;
- `{"error": message}`: llguidance refuses the schema (the message is its own);
- `{"unknown_tokenizer": true}`: send the request again with `"tokenizer_json"` (the tokenizer's
  JSON text), which this process keeps for its next requests.

Its caps: the process's address space (`MAX_MEMORY`, Linux: past it llguidance's allocation
fails and the process ends, or Python's `MemoryError` is a `fatal` reply), llguidance's own parser
limits (`LIMITS`, the same the parent's matchers use) and the deadline, at which the parent kills
the process (and at `seconds` + `OVERRUN_S`, this process ends itself should the parent be gone).
It does not check the schema's shape first: runtime/schema_limits.py does, in the parent.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import signal
import sys

import llguidance

MAX_MEMORY = 2 * 2**30  # address space of a worker process, in bytes (Linux)
MAX_TOKENIZERS = 4  # token tables kept (~10 MB each for V = 49,152)
OVERRUN_S = 1.0  # past the budget, the worker ends itself if its parent has not killed it
# llguidance's JSON compiler options, as runtime/structured.py documents them.
JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
# llguidance's parser limits, here and in the parent's matchers: the lexer's states (1-2 kB each)
# grow lazily while decoding; 20,000 bound one schema's lexer to about 40 MB (default 250,000).
LIMITS = {"max_lexer_states": 20_000}

_tables: dict[str, llguidance.LLTokenizer] = {}
_libc = ctypes.CDLL(ctypes.util.find_library("c") or None)


def _resident() -> int:
    """This process's resident memory, in bytes (Linux; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def _trim() -> None:
    """Hand freed memory back to the system, so that the next growth measured is real."""
    if hasattr(_libc, "malloc_trim"):
        _libc.malloc_trim(0)


def compile_schema(request: dict) -> dict:
    """The reply to one request (see the module docstring)."""
    key = request.get("tokenizer")
    if key is not None and key not in _tables:
        if "tokenizer_json" not in request:
            return {"unknown_tokenizer": True}
        if len(_tables) >= MAX_TOKENIZERS:
            _tables.pop(next(iter(_tables)))
        _tables[key] = llguidance.LLTokenizer(request["tokenizer_json"])
    _trim()
    before = _resident()
    try:
        if "lark" in request:
            grammar = llguidance.LLMatcher.grammar_from_lark(request["lark"])
        else:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(
                request["schema"], overrides=JSON_OPTIONS
            )
    except ValueError as error:
        return {"error": str(error)}
    problem = llguidance.LLMatcher.validate_grammar(grammar)
    if problem:
        return {"error": problem}
    if key is not None:
        limits = llguidance.LLParserLimits(**LIMITS)
        matcher = llguidance.LLMatcher(_tables[key], grammar, log_level=0, limits=limits)
        if not matcher.is_error():
            matcher.compute_bitmask()  # the first step's mask: the lexer's first states
        if matcher.is_error():  # its first line: the rest dumps the parser's state
            return {"error": matcher.get_error().strip().splitlines()[0]}
    grown = max(_resident() - before, 0)
    return {"grammar": grammar, "bytes": grown + len(grammar)}


def serve() -> None:
    """Answer requests, one JSON line each, until stdin closes or one runs out of memory."""
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything else printed goes to stderr, never into the replies
    sys.stdout = sys.stderr
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (MAX_MEMORY, MAX_MEMORY))
    except (ImportError, ValueError, OSError):
        pass  # no address-space limit here (not Linux): the parent's deadline still holds
    signal.signal(signal.SIGVTALRM, signal.SIG_DFL)  # even if the parent ignored it
    replies.write(b'{"ready": true}\n')  # the parent's clock starts after this
    replies.flush()
    for line in sys.stdin.buffer:
        request = json.loads(line)
        # SIGVTALRM (CPU time: a worker paused in the pool's queue is not counted), left
        # to its default action, ends this process even inside llguidance's code,
        # should the parent that kills it at the deadline be gone.
        signal.setitimer(signal.ITIMER_VIRTUAL, request.get("seconds", 0) + OVERRUN_S)
        try:
            reply = compile_schema(request)
        except MemoryError:
            reply = {"error": f"it needs more than {MAX_MEMORY // 2**20} MiB", "fatal": True}
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        replies.write(json.dumps(reply).encode("ascii") + b"\n")
        replies.flush()
        if reply.get("fatal"):
            return
