"""What a model that writes text offers its callers: `TextGenerator` and the two protocols that
extend it, as typing.Protocol (structural: the classes do not inherit from them).

Three levels, each what its callers call and no more:

- `TextGenerator`: `generate` (a batch of prompts, `num_return_sequences` outputs each) and
  `stream` (one prompt, event by event), with the model's `name`, `task` and `controls`. The
  app's tabs call these. `runtime.Generator`, `runtime.hierarchical.HierarchicalGenerator` and
  ui/remote.py's `RemoteGenerator` (a model `scriptorium serve` serves) have them.
- `ChatGenerator`: a `TextGenerator` that also answers a conversation, `chat` and
  `stream_chat`, as the app's Chat tab, arena and paraphrase comparison call them (no tools):
  `runtime.Generator` and `RemoteGenerator`; for a model without a chat template, both raise
  `ValueError`.
- `ServedGenerator`: a `ChatGenerator` with what serve/'s routes read in a replica: the
  tokenizer, manifest and context, prompt and conversation encoding, tool calls through the
  chat template (`tools`), and `score_ids` (echo scoring). `runtime.Generator` has it; serve's
  replica (serve/replica.py) holds one.

A method only some models have stays off these (`HierarchicalGenerator.paraphrase`,
`Generator.memorised`): the tabs that call it hold that class. tests/test_text_generator.py
checks each class's members against its protocols: names, parameters in order, defaults.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol

from tokenizers import Tokenizer

from .config import GenerationConfig
from .manifest import Manifest
from .outputs import GenerationOutput, Score, StreamEvent


class TextGenerator(Protocol):
    """A model that continues text: what the app's tabs call."""

    @property
    def name(self) -> str: ...

    @property
    def task(self) -> str: ...

    @property
    def controls(self) -> Mapping[str, list]:
        """Each control's values, e.g. {"section": ["law", …]}; {} for a model without any."""
        ...

    def generate(
        self, prompts: str | list[str], config: GenerationConfig | None = None, controls=None
    ) -> list[GenerationOutput]:
        """`num_return_sequences` outputs per prompt, prompt-major."""
        ...

    def stream(
        self, prompt: str, config: GenerationConfig | None = None, controls=None
    ) -> Iterator[StreamEvent]:
        """One prompt's outputs event by event; closing the iterator stops generating."""
        ...


class ChatGenerator(TextGenerator, Protocol):
    """A `TextGenerator` that answers a conversation ({"role", "content"} messages)."""

    def chat(
        self, messages: Sequence[dict], config: GenerationConfig | None = None, controls=None
    ) -> list[GenerationOutput]:
        """The assistant's replies, ending at the end of its turn."""
        ...

    def stream_chat(
        self, messages: Sequence[dict], config: GenerationConfig | None = None, controls=None
    ) -> Iterator[StreamEvent]:
        """The reply event by event; the checks run when this is called, before any event."""
        ...


class ServedGenerator(ChatGenerator, Protocol):
    """A `ChatGenerator` as serve/'s routes use it in a replica."""

    manifest: Manifest
    tokenizer: Tokenizer
    context_length: int

    @property
    def end_of_turn_token_ids(self) -> tuple[int, ...]: ...

    @property
    def chat_tool_format(self) -> str | None: ...

    @property
    def chat_takes_tools(self) -> bool: ...

    def encode_prompt(self, prompt: str, controls: dict | None = None) -> list[int]: ...

    def encode_chat(self, messages, controls: dict | None = None, tools=None) -> list[int]: ...

    def chat(
        self,
        messages: Sequence[dict],
        config: GenerationConfig | None = None,
        controls=None,
        tools=None,
    ) -> list[GenerationOutput]: ...

    def stream_chat(
        self,
        messages: Sequence[dict],
        config: GenerationConfig | None = None,
        controls=None,
        tools=None,
    ) -> Iterator[StreamEvent]: ...

    def score_ids(self, ids, start: int | None = None, source_ids=None, top: int = 0) -> Score: ...
