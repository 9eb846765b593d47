"""Structured output over HTTP: `scriptorium serve` against `llama-server` on bench/schemas.py's
schema set (`python -m bench serve-peers --schemas`, started by bench/serve_peers.py's `main`).

Each schema's prompt goes to both servers as one chat message with the schema as OpenAI's
`response_format` (`{"type": "json_schema", "json_schema": {"name", "schema", "strict": true}}`),
greedy (temperature 0), at most bench/schemas.py's `MAX_TOKENS` new tokens (the longest document
of the set in the flagship's tokens), one request at a time, the servers taking turns schema by
schema (`--rounds` passes). A reply is valid when its text parses as JSON and validates against
the schema with `jsonschema`; a request the server refuses (llama-server's grammar converter
does not take every keyword) is counted apart from an invalid reply. Speed is each server's
completion tokens over the wall time of its requests (sent → whole answer, prefill included).

This module does not cover the chat workload (bench/serve_peers.py) nor the grammar libraries
compared directly (bench/grammar_libs.py).
"""

from __future__ import annotations

import json
import statistics
import time

from . import common

OURS, PEER = "scriptorium serve", "llama-server"  # the two servers' names in every table
OURS_RAY = f"{OURS} (Ray)"  # ours on a local Ray cluster (serve-peers --with-ray)


def response_format(case) -> dict:
    """OpenAI's `response_format` asking for `case.schema` (a bench/schemas.py `SchemaCase`)."""
    return {
        "type": "json_schema",
        "json_schema": {"name": case.name, "schema": case.schema, "strict": True},
    }


def check_document(text: str, schema: dict) -> str | None:
    """None when `text` is JSON that `schema` accepts, else why not (one line).

    >>> schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    >>> check_document('{"n": 3}', schema), check_document('{"n": "3"}', schema)[:27]
    (None, "invalid: '3' is not of type")
    >>> check_document('{"n": 3', schema)[:9]
    'not JSON:'
    """
    import jsonschema

    try:
        document = json.loads(text)
    except ValueError as error:
        return f"not JSON: {error}"
    try:
        jsonschema.validate(document, schema)
    except jsonschema.ValidationError as error:
        return f"invalid: {error.message[:160]}"
    return None


def ask(client, server, case, max_tokens: int) -> dict:
    """One schema's request to one server: {"tokens", "seconds", "problem"} where problem is
    None (valid), the validation's reason, or "refused: …" for a request that failed."""
    start = time.perf_counter()
    try:
        answer = client.chat.completions.create(
            model=server.model,
            messages=[{"role": "user", "content": case.prompt}],
            max_tokens=max_tokens,
            temperature=0,
            response_format=response_format(case),
        )
    except Exception as error:  # a refused schema or a failed request: counted, the set goes on
        problem = f"refused: {type(error).__name__}: {str(error)[:160]}"
        return {"tokens": 0, "seconds": time.perf_counter() - start, "problem": problem}
    seconds = time.perf_counter() - start
    text = answer.choices[0].message.content or ""
    return {
        "tokens": answer.usage.completion_tokens,
        "seconds": seconds,
        "problem": check_document(text, case.schema),
    }


def measure_schemas(servers: list, rounds: int) -> list[dict]:
    """Per schema and server, every round's `ask` (the servers taking turns), after one warm-up
    request each."""
    import openai

    from .schemas import MAX_TOKENS, SCHEMAS

    clients = {
        s.name: openai.OpenAI(base_url=s.base_url, api_key="none", max_retries=0, timeout=600)
        for s in servers
    }
    for server in servers:
        ask(clients[server.name], server, SCHEMAS[0], MAX_TOKENS)
    rows = []
    for round_ in range(1, rounds + 1):
        for case in SCHEMAS:
            ordered = servers if round_ % 2 else servers[::-1]
            for server in ordered:
                asked = ask(clients[server.name], server, case, MAX_TOKENS)
                rows.append({"round": round_, "schema": case.name, "server": server.name, **asked})
                print(
                    f"round {round_}/{rounds} {case.name:>18} {server.name:>17}: "
                    f"{asked['tokens']:>3} tokens in {asked['seconds']:.2f} s, "
                    f"{asked['problem'] or 'valid'}",
                    flush=True,
                )
    return rows


def summary(rows: list[dict]) -> list[dict]:
    """Per server: requests, valid, invalid, refused, tokens/s over all its requests, and the
    mean seconds a request took (the servers' documents differ in length: whitespace, wording).

    >>> rows = [{"server": "s", "tokens": 30, "seconds": 1.0, "problem": None},
    ...         {"server": "s", "tokens": 10, "seconds": 1.0, "problem": "invalid: x"}]
    >>> row = summary(rows)[0]
    >>> row["valid"], row["tokens_per_second"], row["mean_s"]
    (1, 20.0, 1.0)
    """
    out = []
    for server in dict.fromkeys(r["server"] for r in rows):
        mine = [r for r in rows if r["server"] == server]
        refused = sum((r["problem"] or "").startswith("refused") for r in mine)
        valid = sum(r["problem"] is None for r in mine)
        out.append(
            {
                "server": server,
                "requests": len(mine),
                "valid": valid,
                "invalid": len(mine) - valid - refused,
                "refused": refused,
                "tokens_per_second": sum(r["tokens"] for r in mine)
                / sum(r["seconds"] for r in mine),
                "mean_s": statistics.mean(r["seconds"] for r in mine),
            }
        )
    return out


def schemas_table(rows: list[dict]) -> str:
    """One row per server (ours first), then the schemas where the two differ."""
    totals = sorted(summary(rows), key=lambda s: (s["server"] != OURS, s["server"]))
    table = common.markdown_table(
        ["server", "requests", "valid", "invalid", "refused", "tok/s", "s per request"],
        [
            [
                s["server"],
                s["requests"],
                s["valid"],
                s["invalid"],
                s["refused"],
                s["tokens_per_second"],
                s["mean_s"],
            ]
            for s in totals
        ],
    )
    first = {(r["schema"], r["server"]): r["problem"] for r in rows if r["round"] == 1}
    differing = [
        f"- {schema}: {OURS}: {first[schema, OURS] or 'valid'}; "
        f"{PEER}: {first[schema, PEER] or 'valid'}"
        for schema in dict.fromkeys(s for s, _ in first)
        if (schema, PEER) in first
        and (first[schema, OURS] is None) != (first[schema, PEER] is None)
    ]
    return "\n".join([table, *([""] + differing if differing else [])])
