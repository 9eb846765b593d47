"""Tool calls on `/v1/chat/completions`: the request's checks (no server), the grammar and the
template's rendering (no server), then the real thing on one server (`scriptorium serve`, one
process, in a thread; the Ray path runs the same gateway and routes: tests/test_serve_chat.py).

Two models are served: a tiny random Qwen2 (tests/gguf_models.py, converted as the flagship is)
whose chat template is Qwen2.5's own, tool-aware one (written below: the hermes format,
`<tool_call>…</tool_call>`), and the real flagship, SmolLM2-135M-Instruct, whose template takes no
tools (a forced function: one bare JSON call). Clients: the `openai` package (plain and
streamed) and LangChain's `bind_tools`. Every call must parse as JSON and validate against its
function's schema; the tiny model is random, so only the grammar makes that so, and its schemas
bound every string and number so that the grammar alone ends each call.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import llguidance
import openai
import pytest
from tokenizers import Tokenizer

import runtime
from runtime.tools import ToolCalls, call_schema
from serve.chat import complete, parse_chat
from serve.deployments import ModelSpec
from serve.protocol import RequestError
from tests.app_fixtures import serve_in_thread

# Qwen2.5-Instruct's chat template (tokenizer_config.json's `chat_template`), verbatim.
QWEN25_TEMPLATE = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""  # noqa: E501 (the template's own lines)

TINY, FLAGSHIP = "tiny-qwen", "flagship"
WEATHER_PARAMETERS = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 12},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "unit", "days"],
    "additionalProperties": False,
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather forecast for a city",
        "parameters": WEATHER_PARAMETERS,
    },
}
TIME_PARAMETERS = {
    "type": "object",
    "properties": {"zone": {"enum": ["UTC", "CET", "PST"]}},
    "required": ["zone"],
    "additionalProperties": False,
}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": TIME_PARAMETERS}}
SCHEMAS = {"get_weather": WEATHER_PARAMETERS, "get_time": TIME_PARAMETERS}
ASK = [{"role": "user", "content": "What is the weather in Paris for three days?"}]
NAMED = {"type": "function", "function": {"name": "get_weather"}}


def assert_valid(calls) -> None:
    """Each call (OpenAI's objects) names a known function and its arguments parse as JSON and
    validate against that function's schema."""
    assert calls
    for call in calls:
        assert call.type == "function" and call.id.startswith("call_")
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


# ---- the request, without a server -----------------------------------------------------------


@pytest.mark.parametrize(
    "body, param, message",
    [
        ({"tool_choice": "required"}, "tool_choice", 'must be null or "none" without `tools`'),
        ({"tools": [WEATHER], "tool_choice": "any"}, "tool_choice", "must be"),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "f"}}},
            "tool_choice.function.name",
            "must be one of `tools`' names (get_weather), got 'f'",
        ),
        ({"tools": [WEATHER, WEATHER]}, "tools", "got 'get_weather' more than once"),
        (
            {"tools": [{"type": "function", "function": {"name": "a b"}}]},
            "tools[0].function.name",
            "letters, digits, underscores or dashes",
        ),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]},
            "tools[0].function.parameters",
            'must be a JSON Schema of type "object", got type None',
        ),
        (
            {
                "tools": [
                    {
                        "type": "function",
                        "function": {
                            "name": "f",
                            "parameters": {"type": "object", "properties": {"a": {"type": "x"}}},
                        },
                    }
                ]
            },
            "tools[0].function.parameters",
            "llguidance supports (Invalid type",
        ),
        (
            {"tools": [WEATHER], "response_format": {"type": "json_object"}},
            "response_format",
            "must be null or text with `tools`",
        ),
        (
            {"messages": [{"role": "user", "content": None}]},
            "messages[0].content",
            "null only in an assistant message with tool_calls",
        ),
        (
            {
                "messages": [
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "call_1",
                                "type": "function",
                                "function": {"name": "f", "arguments": "[1]"},
                            }
                        ],
                    }
                ]
            },
            "messages[0].tool_calls[0].function.arguments",
            "must be the JSON text of an object, got '[1]'",
        ),
        (
            {"messages": [{"role": "user", "content": "a", "tool_call_id": "call_1"}]},
            "messages[0].tool_call_id",
            "must be in a tool message only",
        ),
    ],
)
def test_bad_tool_requests_are_refused_naming_the_field(body, param, message):
    with pytest.raises(RequestError) as raised:
        parse_chat({"model": "m", "messages": ASK, **body})
    assert message in str(raised.value) and raised.value.param == param


def test_tool_choice_none_is_a_plain_chat_and_the_default_is_auto():
    assert parse_chat({"model": "m", "messages": ASK, "tools": [WEATHER]}).tools.required is False
    plain = parse_chat({"model": "m", "messages": ASK, "tools": [WEATHER], "tool_choice": "none"})
    assert plain.tools is None
    named = parse_chat(
        {"model": "m", "messages": ASK, "tools": [WEATHER, TIME], "tool_choice": NAMED}
    )
    assert [f["name"] for f in named.tools.functions] == ["get_weather"] and named.tools.required


# ---- the model, in process -------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_bundle(tmp_path_factory) -> Path:
    from convert.gguf import export_gguf
    from tests.gguf_models import write_tiny_gguf

    root = tmp_path_factory.mktemp("tiny-qwen")
    # Qwen2.5's tool prompt alone is ~700 of this tiny vocabulary's tokens: a longer context.
    metadata = {"tokenizer.chat_template": QWEN25_TEMPLATE, "qwen2.context_length": 2048}
    export_gguf(write_tiny_gguf(root / "tiny.gguf", "qwen2", metadata=metadata), root / "bundle")
    return root / "bundle"


@pytest.fixture(scope="module")
def tiny(tiny_bundle):
    return runtime.load(tiny_bundle, threads=1)


def test_tools_render_as_transformers_renders_them(tiny, tiny_bundle):
    from transformers import PreTrainedTokenizerFast

    reference = PreTrainedTokenizerFast(
        tokenizer_file=str(tiny_bundle / "tokenizer.json"), chat_template=QWEN25_TEMPLATE
    )
    call = {"id": "call_1", "type": "function"}
    call["function"] = {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}
    conversation = [
        {"role": "system", "content": "Be brief."},
        *ASK,
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": '{"temperature": 21}', "tool_call_id": "call_1"},
    ]
    tools = [WEATHER, TIME]
    expected = reference.apply_chat_template(
        conversation, tools=tools, tokenize=False, add_generation_prompt=True
    )
    assert tiny.apply_chat_template(conversation, True, tools) == expected
    assert '<tool_response>\n{"temperature": 21}\n</tool_response>' in expected
    assert (tiny.chat_tool_format, tiny.chat_takes_tools) == ("hermes", True)


def _accepts(tokenizer: Tokenizer, calls: ToolCalls, text: str) -> bool:
    """Whether llguidance, on the grammar of `calls`, takes `text` whole and may end there."""
    matcher = llguidance.LLMatcher(llguidance.LLTokenizer(tokenizer.to_str()), _grammar(calls))
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    return all(matcher.consume_token(i) for i in ids) and matcher.is_accepting()


def _grammar(calls: ToolCalls) -> str:
    calls.check()
    return llguidance.LLMatcher.grammar_from_lark(calls.lark())


def test_the_grammar_allows_text_or_calls_to_the_schema(tiny):
    schema = call_schema([{"name": "get_time", "parameters": TIME_PARAMETERS}])
    call = '<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n</tool_call>'
    wrong = '<tool_call>\n{"name": "get_time", "arguments": {"zone": "Mars"}}\n</tool_call>'
    auto = ToolCalls("hermes", schema, required=False, parallel=True)
    required = ToolCalls("hermes", schema, required=True, parallel=False)
    bare = ToolCalls("json", schema, required=True, parallel=False)
    tokenizer = tiny.tokenizer
    assert _accepts(tokenizer, auto, "In the beginning <tool> x")
    assert _accepts(tokenizer, auto, f"Let me look.\n{call}\n{call}")
    assert not _accepts(tokenizer, auto, f"Let me look.\n{wrong}")
    assert _accepts(tokenizer, required, call)
    assert not _accepts(tokenizer, required, f"{call}\n{call}")  # not parallel: one call
    assert not _accepts(tokenizer, required, "In the beginning")
    assert _accepts(tokenizer, bare, '{"name": "get_time", "arguments": {"zone": "CET"}}')
    assert not _accepts(tokenizer, bare, '{"arguments": {"zone": "CET"}, "name": "get_time"}')


def test_nested_models_move_to_the_root_and_the_call_schema_keeps_the_limits(tiny):
    from pydantic import BaseModel, Field

    class Place(BaseModel):
        city: str = Field(max_length=10)

    class Trip(BaseModel):
        start: Place
        stops: list[Place] = Field(max_length=2)

    trip = {"name": "plan", "parameters": Trip.model_json_schema()}  # `#/$defs/Place` inside
    body = {"model": "m", "messages": ASK, "tool_choice": "required"}
    request = parse_chat({**body, "tools": [{"type": "function", "function": trip}]})
    calls = ToolCalls("hermes", call_schema(list(request.tools.functions)), True, False)
    arguments = {"start": {"city": "Rome"}, "stops": [{"city": "Pisa"}]}
    call = {"name": "plan", "arguments": arguments}
    assert _accepts(tiny.tokenizer, calls, f"<tool_call>\n{json.dumps(call)}\n</tool_call>")
    call["arguments"]["start"] = {"town": "Rome"}
    assert not _accepts(tiny.tokenizer, calls, f"<tool_call>\n{json.dumps(call)}\n</tool_call>")

    def many_refs(name: str) -> dict:  # 600 `$ref`s: within the limit alone, not two together
        properties = {f"p{i}": {"$ref": "#/$defs/n"} for i in range(600)}
        parameters = {"type": "object", "properties": properties}
        parameters["$defs"] = {"n": {"type": "integer"}}
        return {"type": "function", "function": {"name": name, "parameters": parameters}}

    with pytest.raises(RequestError) as refused:
        parse_chat({**body, "tools": [many_refs("a"), many_refs("b")]})
    assert refused.value.param == "tools"
    assert "`tools` (a call to any of them) must be a schema of at most 1,000 `$ref`s" in str(
        refused.value
    )


@pytest.mark.parametrize("piece", [1, 3, 7])
def test_streamed_deltas_join_to_the_whole_reply(piece):
    """A hermes reply fed in pieces of `piece` characters: the content deltas join to the text
    before the calls, each call's first delta has its id and name, its argument deltas join to
    its arguments; a `<tool_` that never becomes a call comes out as text at the end."""
    from serve.tools import CallDeltas, reply_message

    first = '{"name": "get_time", "arguments": {"zone": "UTC"}}'
    second = (
        '{"name": "get_weather", "arguments": {"city": "a\\"}b", "unit": "celsius", "days": 2}}'
    )
    text = f"Let me see.\n<tool_call>\n{first}\n</tool_call>\n<tool_call>\n{second}\n</tool_call>"
    for reply, calls in ((text, [first, second]), ("Almost <tool_", [])):
        reading, deltas = CallDeltas("hermes"), []
        pieces = [reply[i : i + piece] for i in range(0, len(reply), piece)]
        for index, part in enumerate(pieces):
            deltas.append(reading.feed(part, finished=index == len(pieces) - 1).answer())
        content = "".join(d.get("content", "") for d in deltas)
        updates = [u for d in deltas for u in d.get("tool_calls", [])]
        message, finish_reason = reply_message(reply, "stop", "hermes")
        message = message.answer()
        assert content == (message["content"] or "")
        assert reading.finish_reason("stop") == finish_reason
        for index, call in enumerate(calls):
            own = [u for u in updates if u["index"] == index]
            assert own[0]["id"].startswith("call_") and all("id" not in u for u in own[1:])
            assert own[0]["function"]["name"] == json.loads(call)["name"]
            arguments = "".join(u["function"]["arguments"] for u in own)
            assert arguments == message["tool_calls"][index]["function"]["arguments"]
            assert json.loads(arguments) == json.loads(call)["arguments"]
    assert finish_reason == "stop" and message["content"] == "Almost <tool_"


@pytest.mark.parametrize("format, takes_tools", [("hermes", True), (None, True), (None, False)])
def test_each_template_gets_its_format(format, takes_tools):
    """Hermes templates get the tools and their own format; others, forced, one bare JSON call
    (the tools shown by a template that renders them, else described in the system message);
    "auto" on those is refused naming `tools`."""
    from types import SimpleNamespace

    from serve.tools import constraint

    gen = SimpleNamespace(chat_tool_format=format, chat_takes_tools=takes_tools)
    body = {"model": "m", "messages": ASK, "tools": [WEATHER, TIME]}
    forced = parse_chat({**body, "tool_choice": "required"})
    messages, tools, calls = constraint(gen, list(forced.messages), forced.tools)
    assert calls.format == (format or "json") and calls.required
    assert tools == ([WEATHER, TIME] if takes_tools else None)
    if takes_tools:
        assert messages == ASK
    else:
        assert messages[0]["role"] == "system" and '"name": "get_time"' in messages[0]["content"]
        assert messages[1:] == ASK
    auto = parse_chat(body)
    if format is None:
        with pytest.raises(ValueError, match='`tools` must come with `tool_choice` "required"'):
            constraint(gen, list(auto.messages), auto.tools)
    else:
        assert not constraint(gen, list(auto.messages), auto.tools)[2].required


# ---- served ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def flagship_bundle():
    from convert.flagship import flagship_bundle

    try:
        return flagship_bundle()
    except Exception:  # no GGUF here and no registry: the flagship's tests skip
        return None


@pytest.fixture(scope="module")
def server(tiny_bundle, flagship_bundle) -> str:
    specs = [ModelSpec(TINY, str(tiny_bundle), threads=1)]
    if flagship_bundle is not None:
        specs.append(ModelSpec(FLAGSHIP, str(flagship_bundle), threads=1))
    url, _, stop = serve_in_thread(specs)
    yield url
    stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server, api_key="unused", max_retries=0, timeout=300)


@pytest.fixture
def flagship(client, flagship_bundle):
    if flagship_bundle is None:
        pytest.skip("the flagship is not converted here (no GGUF, no registry)")
    return client


def test_a_required_call_is_the_runtime_s_and_streams_the_same(client, tiny):
    settings = dict(temperature=0.9, seed=5, max_completion_tokens=120)
    body = dict(tools=[WEATHER, TIME], tool_choice="required", parallel_tool_calls=False)
    reply = client.chat.completions.create(model=TINY, messages=ASK, **settings, **body)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and len(choice.message.tool_calls) == 1
    assert_valid(choice.message.tool_calls)
    local = complete(tiny, parse_chat({"model": TINY, "messages": ASK, **settings, **body}))
    expected = local["choices"][0].message.tool_calls[0].function.answer()
    assert choice.message.tool_calls[0].function.model_dump() == expected
    # Streamed: a first delta with the id and name, then the arguments in pieces.
    chunks = list(
        client.chat.completions.create(model=TINY, messages=ASK, stream=True, **settings, **body)
    )
    deltas = [call for c in chunks if c.choices for call in c.choices[0].delta.tool_calls or []]
    assert deltas[0].id.startswith("call_") and deltas[0].function.name == expected["name"]
    assert len(deltas) > 2 and all(d.index == 0 and d.id is None for d in deltas[1:])
    assert "".join(d.function.arguments for d in deltas) == expected["arguments"]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert not any(c.choices[0].delta.content for c in chunks if c.choices)


def test_named_and_parallel_calls_follow_their_schemas(client):
    """Parallel calls (the default): the random model goes on calling until the token limit, so
    the reply comes back as its text, cut inside a call; every whole call in it is to the named
    function and validates. One call only: the reply ends after it."""
    settings = dict(tools=[WEATHER, TIME], tool_choice=NAMED, temperature=0.9, seed=1)
    reply = client.chat.completions.create(
        model=TINY, messages=ASK, max_completion_tokens=200, **settings
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "length" and not choice.message.tool_calls
    blocks = choice.message.content.split("<tool_call>\n")[1:]
    whole = [json.loads(block.split("\n</tool_call>")[0]) for block in blocks[:-1]]
    assert len(blocks) >= 2 and {call["name"] for call in whole} == {"get_weather"}
    for call in whole:
        jsonschema.validate(call["arguments"], WEATHER_PARAMETERS)
    single = client.chat.completions.create(
        model=TINY, messages=ASK, max_completion_tokens=200, parallel_tool_calls=False, **settings
    )
    assert single.choices[0].finish_reason == "tool_calls"
    assert [call.function.name for call in single.choices[0].message.tool_calls] == ["get_weather"]
    assert_valid(single.choices[0].message.tool_calls)


def test_auto_lets_the_model_answer_in_text_and_tool_turns_are_taken(client, tiny):
    call = {"id": "call_1", "type": "function"}
    call["function"] = {"name": "get_time", "arguments": json.dumps({"zone": "UTC"})}
    conversation = [
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "12:00"},
    ]
    reply = client.chat.completions.create(
        model=TINY,
        messages=conversation,
        tools=[WEATHER, TIME],
        temperature=0,
        max_completion_tokens=16,
    )
    choice = reply.choices[0]
    if choice.message.tool_calls:
        assert_valid(choice.message.tool_calls)
    else:  # the random model's text, exactly as the runtime writes it for the same prompt
        assert choice.finish_reason in ("stop", "length")
        runtime_messages = [
            *ASK,
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {**call, "function": {"name": "get_time", "arguments": {"zone": "UTC"}}}
                ],
            },
            {"role": "tool", "content": "12:00", "tool_call_id": "call_1"},
        ]
        tools = [WEATHER, TIME]
        assert reply.usage.prompt_tokens == tiny.count_chat_tokens(runtime_messages, True, tools)


def test_langchain_bind_tools_gets_calls_that_validate(server):
    from langchain_openai import ChatOpenAI
    from pydantic import BaseModel, Field

    class get_time(BaseModel):  # noqa: N801 (the function's name, as LangChain takes it)
        """The time now in a time zone."""

        zone: str = Field(pattern="^(UTC|CET|PST)$")

    model = ChatOpenAI(
        model=TINY,
        base_url=server,
        api_key="unused",
        temperature=0,
        max_tokens=120,
        max_retries=0,
        timeout=300,
    )
    bound = model.bind_tools(
        [get_time], tool_choice="get_time", strict=True, parallel_tool_calls=False
    )
    message = bound.invoke("What time is it in Berlin?")
    assert [call["name"] for call in message.tool_calls] == ["get_time"]
    get_time.model_validate(message.tool_calls[0]["args"])
    streamed = None
    for piece in bound.stream("What time is it in Berlin?"):
        streamed = piece if streamed is None else streamed + piece
    assert streamed.tool_calls == [{**message.tool_calls[0], "id": streamed.tool_calls[0]["id"]}]


def test_the_flagship_calls_a_forced_function_that_validates(flagship):
    for stream in (False, True):
        settings = dict(tools=[WEATHER], tool_choice=NAMED, temperature=0, max_tokens=60)
        if not stream:
            reply = flagship.chat.completions.create(model=FLAGSHIP, messages=ASK, **settings)
            assert reply.choices[0].finish_reason == "tool_calls"
            assert_valid(reply.choices[0].message.tool_calls)
            whole = reply.choices[0].message.tool_calls[0].function
            continue
        chunks = list(
            flagship.chat.completions.create(model=FLAGSHIP, messages=ASK, stream=True, **settings)
        )
        deltas = [
            c for chunk in chunks if chunk.choices for c in chunk.choices[0].delta.tool_calls or []
        ]
        assert deltas[0].function.name == whole.name == "get_weather"
        assert "".join(d.function.arguments for d in deltas) == whole.arguments
    for choice in ("auto", None):
        with pytest.raises(openai.BadRequestError) as refused:
            flagship.chat.completions.create(
                model=FLAGSHIP,
                messages=ASK,
                tools=[WEATHER],
                max_tokens=8,
                **({"tool_choice": choice} if choice else {}),
            )
        assert refused.value.body["param"] == "tools"
        assert "its chat template takes no tools" in refused.value.body["message"]
    # "required" after a call and its result (shown to SmolLM2 as text): a call to either tool.
    call = {"id": "call_1", "type": "function"}
    call["function"] = {"name": "get_time", "arguments": json.dumps({"zone": "CET"})}
    conversation = [
        {"role": "user", "content": "What time is it in Berlin?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "14:05"},
        {"role": "user", "content": "And the weather in Rome for two days?"},
    ]
    reply = flagship.chat.completions.create(
        model=FLAGSHIP,
        messages=conversation,
        tools=[WEATHER, TIME],
        tool_choice="required",
        temperature=0,
        max_tokens=60,
    )
    assert reply.choices[0].finish_reason == "tool_calls"
    assert_valid(reply.choices[0].message.tool_calls)
