"""Tool calls on `POST /v1/chat/completions`: OpenAI's `tools`, `tool_choice` and
`parallel_tool_calls` checked, turned into the runtime's constraint for the model at hand, and
the reply's calls turned into OpenAI's `tool_calls` (whole, or streamed as deltas).

- the request (`parse_tools`, at the gateway, before anything runs): each tool's `parameters`
  must be a JSON Schema of type "object" that keeps runtime/schema_limits.py's limits and that
  llguidance compiles (in the schema sandbox), and so must the schema of a call to any of them
  (`runtime.tools.call_schema`: 128 large schemas may pass alone and not together); names are
  unique; a named `tool_choice` names one
  of the tools; `tool_choice` needs `tools`, and `response_format` does not go with them.
  `tool_choice` "none" (or no tools) is a plain chat: the tools are not shown to the model.
- the model's side (`constraint`, in the replica): a template that writes hermes calls
  (`<tool_call>…</tool_call>`, Qwen2.5's) gets the tools and a grammar for its own format:
  "auto" lets the reply be text or calls, "required" and a named function make it calls only
  (several with `parallel_tool_calls`, the default). A template that takes no tools, or writes
  calls some other way, is refused a 400 naming `tools` for "auto"; with "required" or a named
  function the reply is one bare JSON call (runtime/tools.py's "json" format), the tools given
  to a template that renders them, else described in the system message
  (`runtime.tools.generic_messages`).
- the reply (`reply_message`, `CallDeltas`): the text before the calls is the message's content,
  each call `{"id": "call_…", "type": "function", "function": {"name", "arguments"}}` with the
  arguments as the model wrote them (JSON text the grammar held to the schema), and the finish
  reason "tool_calls". A reply cut inside a call (`max_completion_tokens`) is returned as text,
  with finish reason "length".
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

from runtime.structured import check_schema
from runtime.text_generator import ServedGenerator
from runtime.tools import ToolCalls, call_schema, generic_messages, partial_calls, read_calls

from .protocol import (
    ChatDelta,
    ChatMessage,
    FunctionDelta,
    RequestError,
    ReturnedFunction,
    ReturnedToolCall,
    ToolCallDelta,
)


@dataclass(frozen=True)
class ToolRequest:
    tools: tuple[dict, ...]  # OpenAI's tool objects, as the chat template sees them
    functions: tuple[dict, ...]  # {"name", "parameters"} of the functions a reply may call
    required: bool  # "required" or a named function: the reply is calls only
    parallel: bool  # parallel_tool_calls: several calls may follow one another


def parse_tools(body) -> ToolRequest | None:
    """The checked tools of a chat body (serve/protocol.py's `ChatBody`); None when the reply
    calls nothing (no tools, or `tool_choice` "none"). `RequestError` naming the field."""
    choice = body.tool_choice
    if not body.tools:
        if choice not in (None, "none"):
            raise RequestError(
                f'`tool_choice` must be null or "none" without `tools`, got {_choice(choice)}',
                param="tool_choice",
            )
        return None
    if body.response_format is not None and body.response_format.type != "text":
        raise RequestError(
            "`response_format` must be null or text with `tools` (the calls have their own "
            f"schemas), got {body.response_format.type!r}",
            param="response_format",
        )
    names = [tool.function.name for tool in body.tools]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise RequestError(
            f"`tools` must name each function once, got {repeated[0]!r} more than once",
            param="tools",
        )
    for index, tool in enumerate(body.tools):
        _check_parameters(f"tools[{index}].function.parameters", tool.function.parameters)
    if choice == "none":
        return None
    chosen = names
    if choice is not None and not isinstance(choice, str):
        if choice.function.name not in names:
            raise RequestError(
                f"`tool_choice.function.name` must be one of `tools`' names ({', '.join(names)})"
                f", got {choice.function.name!r}",
                param="tool_choice.function.name",
            )
        chosen = [choice.function.name]
    tools = tuple(tool.model_dump(exclude_none=True) for tool in body.tools)
    functions = tuple(
        {"name": t["function"]["name"], "parameters": t["function"].get("parameters")}
        for t in tools
        if t["function"]["name"] in chosen
    )
    try:  # the schema of a call to any of them, as the replica will constrain it
        check_schema(call_schema(list(functions)))
    except ValueError as error:
        message = str(error).replace("`json_schema`", "`tools` (a call to any of them)")
        raise RequestError(message, param="tools") from None
    return ToolRequest(
        tools=tools,
        functions=functions,
        required=choice not in (None, "auto"),
        parallel=body.parallel_tool_calls is not False,
    )


def _choice(choice) -> str:
    return repr(choice) if isinstance(choice, str) else json.dumps(choice.model_dump())


def _check_parameters(field: str, parameters: dict | None) -> None:
    """A function's `parameters`: absent, or a JSON Schema of type "object" within the schema
    limits that llguidance compiles."""
    if parameters is None:
        return
    if parameters.get("type") != "object":
        raise RequestError(
            f'`{field}` must be a JSON Schema of type "object", got type '
            f"{parameters.get('type')!r}",
            param=field,
        )
    try:
        check_schema(json.dumps(parameters))
    except ValueError as error:
        raise RequestError(str(error).replace("`json_schema`", f"`{field}`"), param=field) from None


def chat_messages(body_messages) -> list[dict]:
    """The runtime's conversation of a body's messages (serve/protocol.py's `Message`): text
    content (a list of parts joined by newlines; null is empty), "developer" as "system", an
    assistant's earlier calls with their arguments as objects, a tool's `tool_call_id`."""
    messages = []
    for index, message in enumerate(body_messages):
        content = message.content
        if content is None and not (message.role == "assistant" and message.tool_calls):
            raise RequestError(
                f"`messages[{index}].content` must be a string or a list of text parts (null "
                "only in an assistant message with tool_calls), got None",
                param=f"messages[{index}].content",
            )
        if isinstance(content, list):
            content = "\n".join(part.text for part in content)
        role = "system" if message.role == "developer" else message.role
        converted = {"role": role, "content": content or ""}
        if message.tool_calls and role != "assistant":
            raise RequestError(
                f"`messages[{index}].tool_calls` must be in an assistant message only, got one "
                f"in a {role} message",
                param=f"messages[{index}].tool_calls",
            )
        if message.tool_calls:
            converted["tool_calls"] = [
                _earlier_call(f"messages[{index}].tool_calls[{i}]", call)
                for i, call in enumerate(message.tool_calls)
            ]
        if message.tool_call_id is not None:
            if role != "tool":
                raise RequestError(
                    f"`messages[{index}].tool_call_id` must be in a tool message only, got one "
                    f"in a {role} message",
                    param=f"messages[{index}].tool_call_id",
                )
            converted["tool_call_id"] = message.tool_call_id
        messages.append(converted)
    return messages


def _earlier_call(where: str, call) -> dict:
    """An earlier call as chat templates take it: the arguments an object, not JSON text."""
    try:
        arguments = json.loads(call.function.arguments)
    except json.JSONDecodeError:
        arguments = None
    if not isinstance(arguments, dict):
        raise RequestError(
            f"`{where}.function.arguments` must be the JSON text of an object, got "
            f"{call.function.arguments[:40]!r}",
            param=f"{where}.function.arguments",
        )
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.function.name, "arguments": arguments},
    }


# ---- the model's side ------------------------------------------------------------------------


def constraint(
    gen: ServedGenerator, messages: list[dict], tools: ToolRequest
) -> tuple[list[dict], list | None, ToolCalls]:
    """(the conversation, the tools for the template, the `ToolCalls`) for `gen`'s template;
    ValueError naming `tools` when the template cannot take them as asked."""
    schema = call_schema(list(tools.functions))
    if gen.chat_tool_format == "hermes":
        calls = ToolCalls("hermes", schema, tools.required, tools.parallel)
        return messages, list(tools.tools), calls
    if not tools.required:
        how = (
            "writes calls in a format this server does not read"
            if gen.chat_takes_tools
            else "takes no tools"
        )
        raise ValueError(
            f'`tools` must come with `tool_choice` "required" or a named function for this '
            f"model (its chat template {how}; forced, the reply is one JSON call), got "
            '`tool_choice` "auto"'
        )
    calls = ToolCalls("json", schema, required=True, parallel=False)
    if gen.chat_takes_tools:
        return messages, list(tools.tools), calls
    return generic_messages(messages, list(tools.tools)), None, calls


# ---- the reply -------------------------------------------------------------------------------


def call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def reply_message(
    text: str, finish_reason: str | None, format: str
) -> tuple[ChatMessage, str | None]:
    """OpenAI's assistant message and finish reason for a finished reply that may hold calls
    (`finish_reason`: OpenAI's for the text alone)."""
    read = read_calls(text, format)
    if read is None or not read[1]:  # no call, or one cut short: the text as it is
        return ChatMessage(role="assistant", content=text, refusal=None), finish_reason
    content, calls = read
    returned = [
        ReturnedToolCall(id=call_id(), type="function", function=ReturnedFunction(**call))
        for call in calls
    ]
    message = ChatMessage(role="assistant", content=content, refusal=None, tool_calls=returned)
    return message, "tool_calls" if finish_reason == "stop" else finish_reason


class CallDeltas:
    """One streamed choice whose reply may hold calls: each token's text in, OpenAI's delta
    out (the content so far, a call's first delta with its id and name, then its arguments as
    they come). The text that may be the start of a call is held back until it is known."""

    def __init__(self, format: str):
        self.format = format
        self.text = ""
        self.content_sent = 0  # characters of content sent
        self.arguments_sent: list[int] = []  # per call announced: characters of arguments sent
        self.called = False  # a call was announced

    def feed(self, text: str, finished: bool) -> ChatDelta:
        """The delta for the next piece of the reply (`finished`: it is the last)."""
        self.text += text
        content, calls = partial_calls(self.text, self.format)
        if finished and not calls:
            content = self.text  # a held-back "<tool_" that never became a call
        delta = ChatDelta()
        if len(content) > self.content_sent:
            delta.content = content[self.content_sent :]
            self.content_sent = len(content)
        updates: list[ToolCallDelta] = []
        for index, call in enumerate(calls):
            if call["name"] is None:
                break
            if index == len(self.arguments_sent):
                self.arguments_sent.append(0)
                function = FunctionDelta(name=call["name"], arguments="")
                updates.append(
                    ToolCallDelta(index=index, id=call_id(), type="function", function=function)
                )
                self.called = True
            new = call["arguments"][self.arguments_sent[index] :]
            if new:
                self.arguments_sent[index] = len(call["arguments"])
                if updates and updates[-1].index == index:
                    updates[-1].function.arguments += new
                else:
                    function = FunctionDelta(arguments=new)
                    updates.append(ToolCallDelta(index=index, function=function))
        if updates:
            delta.tool_calls = updates
        return delta

    def finish_reason(self, finish_reason: str | None) -> str | None:
        """OpenAI's finish reason for this choice (`finish_reason`: the text's)."""
        return "tool_calls" if self.called and finish_reason == "stop" else finish_reason
