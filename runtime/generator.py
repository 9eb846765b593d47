"""`Generator`, the class `runtime.load` returns for token models ("causal-lm", "seq2seq"):
prompts in, text out.

The generator turns prompts (plus control tokens) into token ids, validates the settings once,
picks the decoding mode once, runs a search loop from `runtime.search` on the model from
`runtime.models`, and turns tokens back into text. Decisions documented here:

- A causal-LM prompt longer than the context raises `ValueError` (nothing is truncated silently);
  generation ends with finish_reason "context" when the context fills up before max_new_tokens.
- An empty prompt is allowed only for a causal LM that prepends a BOS token (unconditional
  generation, e.g. from control tokens alone); otherwise it raises `ValueError`.
- `logprobs` and `alternatives` are the model's own log-probabilities (log-softmax of the raw
  logits), before penalties, temperature and filters.
- `token_ids` are the generated tokens, EOS included when generation ended on it; `text`
  leaves out special tokens and is cut before a stop string.
- A prompt is `controls` (in manifest order), then the manifest's `prompt_prefix` (e.g. "[s:text]",
  even when no control is chosen), then the text (docs/bundle.md, "Controls").
- A call made inside `runtime.cancel.cancel_when(event)` stops at its next decoding step once
  `event` is set, raising `runtime.cancel.Cancelled` (a server whose client has gone sets it).
- An adapter bundle runs on its base's directory (tokenizer, LoRA slot graph, in a session shared
  by every adapter of that base) with the adapter's factors fed to every call
  (runtime/adapters.py); its own files (the memorisation index) are read from the adapter's.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from .adapters import Adapter
from .chat import ChatMixin
from .config import GenerationConfig
from .engine import MAX_CACHE_BYTES, Engine, uses_engine
from .manifest import Manifest
from .memorisation import Memorisation, memorised
from .models import CausalLM, Seq2SeqLM
from .outputs import GenerationOutput, StreamEvent
from .recurrent import RECURRENT_ARCHITECTURES, RecurrentSeq2SeqLM
from .scoring import ScoringMixin
from .search import TokenSearch, beam_search
from .sessions import available_providers, create_session, shared_session
from .spinning import AdaptiveSession
from .text import RowTexts, control_prefix, find_stop


@dataclass(frozen=True)
class DecodingPlan:
    """Everything a search loop needs for one call, worked out once when the call starts."""

    config: GenerationConfig  # validated, with the model's forced / suppressed tokens merged in
    encoded: list[list[int]]  # each prompt's token ids (controls and BOS included)
    input_ids: np.ndarray  # (B, T) the prompts padded: left for a causal LM, right for a source
    mask: np.ndarray  # (B, T) 1 on real tokens
    history: np.ndarray  # (B, H) the tokens penalties look back on (prompt, or decoder start)
    history_mask: np.ndarray  # (B, H) bool
    max_steps: int  # new tokens allowed: max_new_tokens or what the context leaves
    limit_reason: str  # finish reason on reaching max_steps: "length" or "context"
    rng: np.random.Generator  # seeded from config.seed


class Generator(ChatMixin, ScoringMixin):
    """A loaded model: `generate`, `stream`, its `manifest` and `controls`; `chat` and
    `stream_chat` when its bundle has a chat template (runtime/chat.py); `score` and `score_ids`
    (runtime/scoring.py)."""

    def __init__(
        self,
        directory: Path,
        manifest: Manifest,
        providers=None,
        threads=None,
        io_binding=None,
        spinning=None,
        batching=None,
        adapter_directory: Path | None = None,
        kv_budget: int | None = None,
    ):
        self.directory = directory  # the bundle, or an adapter's base bundle
        self.adapter_directory = adapter_directory  # the adapter bundle, or None
        self.manifest = manifest
        self.providers = available_providers(providers)
        self.tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        graphs = manifest.graphs
        batched = uses_engine(manifest, batching)
        # An engine loop is its session's only caller, one call at a time, so by default the
        # session's worker threads spin between operators while the process has its cores and
        # sleep while it does not (runtime/spinning.py; docs/RUNTIME.md, "Spinning"); the
        # adapters of one base share a session, and their loops could call it at once.
        adaptive = spinning is None and batched and adapter_directory is None
        spinning = adaptive or bool(spinning)
        adapter = None
        if adapter_directory is not None:
            spec = manifest.adapter
            adapter = Adapter(adapter_directory / spec.file, spec.base.lora_slots)
            path = directory / graphs["decoder"].file
            sessions = {"decoder": shared_session(path, self.providers, threads, spinning)}
        else:
            sessions = {
                role: create_session(directory / graph.file, self.providers, threads, spinning)
                for role, graph in graphs.items()
            }
            if adaptive:
                path, providers = directory / graphs["decoder"].file, self.providers
                sessions["decoder"] = AdaptiveSession(
                    sessions["decoder"], lambda: create_session(path, providers, threads, False)
                )
        if manifest.task == "seq2seq" and manifest.architecture in RECURRENT_ARCHITECTURES:
            start = manifest.special_tokens.decoder_start_token_id
            self.model = RecurrentSeq2SeqLM(sessions["encoder"], sessions["decoder"], start)
        elif manifest.task == "seq2seq":
            self.model = Seq2SeqLM(sessions["encoder"], sessions["decoder"], manifest, io_binding)
        else:
            self.model = CausalLM(sessions["decoder"], manifest, io_binding, adapter)
        special = manifest.special_tokens
        self.eos_token_id = special.eos_token_id
        self.bos_token_id = special.bos_token_id
        pad = special.pad_token_id
        self.pad_token_id = pad if pad is not None else (self.eos_token_id or 0)
        self.context_length = manifest.context_length
        self.defaults = GenerationConfig.from_dict(manifest.generation_defaults.given())
        self._ngram_index: np.ndarray | None = None  # loaded on the first `memorised` call
        # With batching, greedy and sampled generations of a causal LM run in one engine loop
        # (runtime/engine.py) that batches concurrent calls step by step.
        self.engine = (
            Engine(self, max_cache_bytes=kv_budget or MAX_CACHE_BYTES) if batched else None
        )

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def task(self) -> str:
        return self.manifest.task

    @property
    def controls(self) -> dict[str, list]:
        """Each control's values, e.g. {"section": ["law", …], "length_ratio": [0.1, …, 2.0]}."""
        out = {}
        for name, spec in self.manifest.controls.items():
            values = list(spec.values)
            out[name] = [float(v) for v in values] if spec.kind == "numeric" else values
        return out

    @property
    def has_memorisation_index(self) -> bool:
        return self.manifest.memorisation_index is not None

    def memorised(self, text: str) -> Memorisation:
        """How much of `text` is copied from the training text: the share of its word n-grams
        (n = 8) found there and the longest copied span (runtime/memorisation.py).

        Raises ValueError if the bundle carries no training n-gram index.
        """
        if not self.has_memorisation_index:
            raise ValueError(
                f"`model` must have a training n-gram index for the memorisation meter, got "
                f"{self.name!r} without one (build it with `python -m export.ngram_index`)"
            )
        if self._ngram_index is None:
            entry = self.manifest.memorisation_index
            folder = self.adapter_directory or self.directory  # an adapter's index is its own
            self._ngram_index = np.load(folder / entry.file, allow_pickle=False)
        return memorised(text, self._ngram_index, self.manifest.memorisation_index.n)

    def config(self, **overrides) -> GenerationConfig:
        """The model's default settings (from its manifest) with `overrides` applied."""
        return self.defaults.replace(**overrides)

    # ---- prompts -----------------------------------------------------------------------------

    def prompt_head(self, controls: dict | None = None) -> str:
        """The text in front of a prompt: the chosen controls' strings in manifest order, then
        the manifest's `prompt_prefix` (docs/bundle.md, "Controls")."""
        prefix = control_prefix(self.manifest.controls, controls)
        return prefix + (self.manifest.prompt_prefix or "")

    def encode_prompt(self, prompt: str, controls: dict | None = None) -> list[int]:
        """Token ids the model sees for `prompt` with `controls` applied as in training."""
        if not isinstance(prompt, str):
            raise ValueError(f"`prompt` must be a str, got {type(prompt).__name__}")
        text = self.prompt_head(controls) + prompt
        if self.task == "seq2seq":
            ids = self.tokenizer.encode(text, add_special_tokens=True).ids
            if not prompt.strip():
                raise ValueError("`prompt` must not be empty for a seq2seq model")
            if len(ids) > self.context_length:
                raise ValueError(
                    f"`prompt` is {len(ids)} tokens; the model's source limit is "
                    f"{self.context_length} tokens"
                )
            return ids
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        if self.manifest.add_bos_token and self.bos_token_id is not None:
            ids = [self.bos_token_id, *ids]
        if not ids:
            raise ValueError("`prompt` must not be empty for a causal LM without a BOS token")
        if len(ids) >= self.context_length:
            raise ValueError(
                f"`prompt` is {len(ids)} tokens; the model's context is {self.context_length} "
                "tokens, which leaves no room to generate"
            )
        return ids

    def _batch(self, prompts, controls):
        """Encode prompts and pad them: left for a causal LM, right for a seq2seq source. A
        prompt may come encoded already (a list of token ids: a chat's rendered conversation)."""
        encoded = [p if isinstance(p, list) else self.encode_prompt(p, controls) for p in prompts]
        width = max(len(ids) for ids in encoded)
        input_ids = np.full((len(encoded), width), self.pad_token_id, dtype=np.int64)  # (B, T)
        mask = np.zeros((len(encoded), width), dtype=np.int64)
        for row, ids in enumerate(encoded):
            if self.task == "seq2seq":
                input_ids[row, : len(ids)], mask[row, : len(ids)] = ids, 1
            else:
                input_ids[row, width - len(ids) :], mask[row, width - len(ids) :] = ids, 1
        return encoded, input_ids, mask

    def _settings(self, config: GenerationConfig | None) -> GenerationConfig:
        """Validate `config`; tokens the model itself forces or suppresses come from its manifest
        when the config leaves them unset (as transformers merges a model's generation config),
        and the manifest's own `stop` strings (where the model's text ends, e.g. seed 000's
        `[e:text]`) are added to the config's."""
        config = config or self.defaults
        model_settings = {
            key: getattr(self.defaults, key)
            for key in ("forced_bos_token_id", "forced_eos_token_id", "suppress_tokens")
            if not getattr(config, key) and getattr(self.defaults, key)
        }
        own_stop = [text for text in self.manifest.stop or () if text not in config.stop]
        if own_stop:
            model_settings["stop"] = (*config.stop, *own_stop)
        return config.replace(**model_settings).validate() if model_settings else config.validate()

    def _plan(self, prompts, config: GenerationConfig, controls) -> DecodingPlan:
        """The call's plan for `prompts`; `config` is already validated by `_settings`."""
        if isinstance(prompts, str):
            prompts = [prompts]
        if not prompts:
            raise ValueError("`prompts` must contain at least one prompt")
        encoded, input_ids, mask = self._batch(prompts, controls)
        if self.task == "seq2seq":
            start = self.manifest.special_tokens.decoder_start_token_id
            history = np.full((len(prompts), 1), start, dtype=np.int64)  # (B, 1)
            history_mask = np.ones_like(history, dtype=bool)
            room = self.context_length - 1
        else:
            history, history_mask = input_ids, mask.astype(bool)
            room = self.context_length - input_ids.shape[1]
        max_steps = min(config.max_new_tokens, room)
        return DecodingPlan(
            config=config,
            encoded=encoded,
            input_ids=input_ids,
            mask=mask,
            history=history,
            history_mask=history_mask,
            max_steps=max_steps,
            limit_reason="length" if max_steps == config.max_new_tokens else "context",
            rng=np.random.default_rng(config.seed),
        )

    # ---- generation --------------------------------------------------------------------------

    def generate(
        self, prompts: str | list[str], config: GenerationConfig | None = None, controls=None
    ) -> list[GenerationOutput]:
        """Generate for one prompt or a batch; `num_return_sequences` outputs per prompt."""
        config = self._settings(config)
        if config.num_beams > 1:
            return self._generate_beam(prompts, config, controls)
        plan = self._plan(prompts, config, controls)
        copies, encoded = config.num_return_sequences, plan.encoded
        outputs = {
            index: GenerationOutput("", [], [], "", index // copies, len(encoded[index // copies]))
            for index in range(len(encoded) * copies)
        }
        for event in self._token_events(plan, alternatives=0, live=False):
            outputs[event.index].add(event)
        return [outputs[i] for i in sorted(outputs)]

    def stream(
        self, prompt: str, config: GenerationConfig | None = None, controls=None
    ) -> Iterator[StreamEvent]:
        """Yield text increments token by token; stop iterating to stop generating.

        Each event carries the token, its log-probability and the model's top-5 alternatives.
        With beam search there is nothing final until the search ends, so each returned
        sequence arrives as one event.
        """
        config = self._settings(config)
        if config.num_beams > 1:
            for index, out in enumerate(self._generate_beam([prompt], config, controls)):
                yield StreamEvent(out.text, None, None, [], index, out.finish_reason)
            return
        yield from self._token_events(self._plan([prompt], config, controls), alternatives=5)

    def _token_events(
        self, plan: DecodingPlan, alternatives, end_ids=None, live: bool = True
    ) -> Iterator[StreamEvent]:
        """Events of the plan's rows; a row ends on EOS, or on any of `end_ids` when given (a
        chat's end-of-turn tokens). With batching on, the engine's loop runs them, and hands
        them over step by step only when `live` (a caller that waits for the end passes False)."""
        if self.engine is not None:
            yield from self.engine.events(plan, alternatives, end_ids, live)
            return
        search = self.token_search(plan, alternatives, end_ids)
        texts = RowTexts(self.tokenizer, plan, len(search.done), self.end_ids(end_ids))
        for step in search:
            yield from texts.events(step, search)

    def end_ids(self, end_ids=None) -> set:
        """The tokens that end a row: EOS, or a chat's end-of-turn tokens when given."""
        return {self.eos_token_id} if end_ids is None else set(end_ids)

    def token_search(self, plan: DecodingPlan, alternatives, end_ids=None) -> TokenSearch:
        """The greedy / sampling search of the plan's rows (`num_return_sequences` per prompt)."""
        config = plan.config
        rows = np.repeat(np.arange(len(plan.encoded)), config.num_return_sequences)  # prompt of row
        return TokenSearch(
            self.model,
            plan.input_ids,
            plan.mask,
            config,
            history=plan.history[rows],
            history_mask=plan.history_mask[rows],
            eos_token_id=self.eos_token_id if end_ids is None else tuple(end_ids),
            pad_token_id=self.pad_token_id,
            max_steps=plan.max_steps,
            rng=plan.rng,
            alternatives=alternatives,
            tokenizer=self.tokenizer,
        )

    def _generate_beam(self, prompts, config, controls) -> list[GenerationOutput]:
        plan = self._plan(prompts, config, controls)
        results = beam_search(
            self.model,
            plan.input_ids,
            plan.mask,
            config,
            prompt_history=plan.history,
            prompt_mask=plan.history_mask,
            eos_token_id=self.eos_token_id,
            max_steps=plan.max_steps,
            rng=plan.rng,
        )
        outputs = []
        for prompt_index, hypotheses in enumerate(results):
            for hyp in hypotheses:
                tokens = [int(t) for t in hyp.tokens]
                text = self.tokenizer.decode(tokens, skip_special_tokens=True)
                reason = "eos" if hyp.finished_on_eos else plan.limit_reason
                cut = find_stop(text, config.stop) if config.stop else None
                if cut is not None:
                    text, reason = text[:cut], "stop"
                outputs.append(
                    GenerationOutput(
                        text=text,
                        token_ids=tokens,
                        logprobs=[float(lp) for lp in hyp.logprobs],
                        finish_reason=reason,
                        prompt_index=prompt_index,
                        prompt_tokens=len(plan.encoded[prompt_index]),
                        score=hyp.score,
                    )
                )
        return outputs
