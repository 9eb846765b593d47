"""The generator of "hierarchical-lm" bundles (seed 003's character-level model): the next
sentence, and unsupervised paraphrase (numpy + onnxruntime, no torch).

Decoding, word by word: the sentence decoder graph turns the previous word's vector (the
begin-sentence word first) and the sentence vectors into a conditioning vector; the word decoder
graph then spells a word one character per step until end-of-word; a word starting with the
end-of-sentence symbol ends the sentence (after 31 words: finish reason "length"). Rules of
every step: special input symbols are never emitted, end-of-sentence only as a word's first
character, end-of-word never first and always at a word's 20th character. A character's cost is
its nits under the model's own (untempered, unfiltered) distribution; it was "sampled" when it
is not the argmax of the allowed characters. These are train.hierarchical.recipes.decode's rules
(export's parity check compares the two).

- `generate(text, config)` / `stream(...)`: the next sentence; GenerationConfig's do_sample,
  temperature, top-k, top-p, min-p, typical-p and seed apply to characters through
  runtime.sampling; `max_new_tokens` counts characters; beam search, repetition penalties,
  min_new_tokens and stop strings raise ValueError (they are token-model settings). Same result
  types as runtime.generator (runtime/outputs.py): token_ids are character ids, logprobs their
  log-probabilities.
- `paraphrase(text, num_candidates, seed)` (bundles with an `autoencoder_decoder` graph, seed 003
  §4.4-4.5): the autoencoder decodes every candidate in one batch, each at its own temperature
  T ~ U(temperature range) and with Gaussian noise of σ = w × RMS(sentence vector) added to each
  layer's sentence vector, w ~ U(noise range); every candidate is re-encoded and the list is
  sorted by the Euclidean distance of its sentence vectors (all layers, concatenated) to the
  source's.
- `reconstruction(text)`: the autoencoder's greedy reconstruction and the teacher-forced cost of
  the text itself in nits per character (seed 003's table 4.2).

Does not cover: text ↔ characters (runtime/hierarchical_text.py), token models (generator.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .bundle import read_manifest
from .config import GenerationConfig
from .hierarchical_text import (
    BEGIN_SENTENCE,
    BEGIN_WORD,
    END_OF_SENTENCE,
    END_OF_WORD,
    PAD,
    SPECIALS,
    UNKNOWN,
    CharVocab,
    split_words,
)
from .manifest import Manifest
from .outputs import GenerationOutput, StreamEvent
from .parameters import BEAMS, PARAMETERS
from .sampling import Sampler
from .sessions import available_providers, create_session

TASK = "hierarchical-lm"
# The decoding parameters a character-level model honours: the sampler's, and how many
# characters and sequences. Every other one that changes greedy or sampled output (penalties,
# beams, a minimum length) and stop strings must keep its default: it is refused, not ignored.
HONOURED = ("max_new_tokens", "do_sample", "temperature", "top_k", "top_p", "min_p", "typical_p")
HONOURED += ("num_return_sequences", "seed")
UNSUPPORTED_SETTINGS = (
    {"num_beams": 1}
    | {  # beam search, which it cannot run, and
        parameter.name: parameter.default  # the settings of the modes it runs that it cannot apply
        for parameter in PARAMETERS
        if parameter.name not in HONOURED and not set(parameter.modes) <= set(BEAMS)
    }
    | {"stop": ()}
)
FORBIDDEN_OUTPUTS = (PAD, BEGIN_WORD, BEGIN_SENTENCE, UNKNOWN)


@dataclass
class CharacterStep:
    char: str  # the character
    nits: float  # -log p(char) under the model's untempered distribution
    sampled: bool  # True when it was not the most likely allowed character


@dataclass
class Decoded:
    text: str
    steps: list[CharacterStep] = field(default_factory=list)
    logits: list[np.ndarray] = field(default_factory=list)  # raw logits per emitted symbol
    finish_reason: str = "eos"  # "eos" or "length" (out of words or characters)
    ids: list[int] = field(default_factory=list)  # character ids of `steps`

    @property
    def nits_per_char(self) -> float:
        return sum(s.nits for s in self.steps) / max(1, len(self.steps))


@dataclass
class _Step:
    """One character step of a batch: which rows emitted (`active`), what, and how it ended."""

    active: np.ndarray  # (B,) bool: rows that emitted a symbol at this step
    chars: np.ndarray | None  # (B,) ids; None: the sentence ran out of words
    logits: np.ndarray | None  # (B, V) raw logits
    best: np.ndarray | None  # (B,) argmax of the allowed characters
    ends: np.ndarray | None  # (B,) the row chose end-of-sentence
    full: np.ndarray  # (B,) the row reached its character or word budget


def sample_rows(masked: np.ndarray, temperatures: np.ndarray, rng) -> np.ndarray:
    """One id per row of `masked` (B, V) (-inf = not allowed), each row at its own temperature:
    argmax where it is 0, else a draw from softmax(masked / T) by inverse CDF."""
    best = masked.argmax(-1)
    hot = temperatures > 0
    if not hot.any():
        return best
    scaled = masked[hot] / temperatures[hot, None]
    weights = np.exp(scaled - scaled.max(-1, keepdims=True))
    cumulative = np.cumsum(weights, -1)
    u = rng.random(len(cumulative)) * cumulative[:, -1]
    drawn = (cumulative <= u[:, None]).sum(-1)
    out = best.copy()
    out[hot] = np.minimum(drawn, masked.shape[1] - 1)
    return out


@dataclass
class Candidate:
    text: str  # the candidate sentence
    distance: float  # Euclidean distance of its sentence vectors to the source's
    temperature: float  # its character sampling temperature (0 = greedy)
    noise: float  # w: its noise σ as a fraction of each sentence vector's RMS
    steps: list[CharacterStep]  # per character: cost in nits and argmax / sampled


@dataclass
class Reconstruction:
    text: str  # the autoencoder's greedy reconstruction
    nits_per_char: float  # teacher-forced cost of the source text itself


def _check_range(name: str, value) -> tuple[float, float]:
    try:
        low, high = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"`{name}` must be a (low, high) pair, got {value!r}") from None
    if not (math.isfinite(low) and math.isfinite(high) and 0 <= low <= high):
        raise ValueError(f"`{name}` must satisfy 0 <= low <= high, got {value!r}")
    return low, high


class CharTokenizer:
    """The character vocabulary behind the `tokenizers`-style calls the app makes."""

    @dataclass
    class Encoding:
        ids: list[int]

    def __init__(self, vocab: CharVocab):
        self.vocab = vocab

    def encode(self, text: str, add_special_tokens: bool = False) -> CharTokenizer.Encoding:
        """Character ids of `text` (unknown characters become <unk>)."""
        return self.Encoding([self.vocab.ids.get(c, UNKNOWN) for c in text])

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        """The text of `ids`; special symbols are dropped or shown as <name>."""
        if skip_special_tokens:
            return "".join(self.vocab.char(int(i)) for i in ids)
        return "".join(self.vocab.char(int(i)) or SPECIALS[int(i)] for i in ids)


class HierarchicalGenerator:
    """A loaded "hierarchical-lm" bundle; `runtime.load` returns one for such a manifest. Its
    sessions run on one intra-op thread unless `threads` says otherwise."""

    def __init__(
        self, directory: Path, manifest: Manifest, threads: int | None = None, providers=None
    ):
        self.directory, self.manifest = Path(directory), manifest
        self.providers = available_providers(providers)
        self.sessions = {
            role: create_session(self.directory / graph.file, self.providers, threads or 1)
            for role, graph in manifest.graphs.items()
        }
        self.inputs = {role: {i.name for i in s.get_inputs()} for role, s in self.sessions.items()}
        self.vocab = CharVocab(manifest.charset)
        self.tokenizer = CharTokenizer(self.vocab)
        self.word_chars = manifest.word_chars
        self.max_words = manifest.max_words
        self.initial_states = {
            role: np.load(self.directory / file) for role, file in manifest.initial_states.items()
        }
        self.defaults = GenerationConfig.from_dict(manifest.generation_defaults.given())
        self.eos_token_id = END_OF_SENTENCE
        self._allowed = [self._allowed_mask(i) for i in range(self.word_chars)]

    @classmethod
    def open(cls, directory, threads: int | None = None) -> HierarchicalGenerator:
        return cls(Path(directory), read_manifest(directory), threads=threads)

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def task(self) -> str:
        return TASK

    @property
    def controls(self) -> dict:
        return {}

    @property
    def can_paraphrase(self) -> bool:
        return "autoencoder_decoder" in self.sessions

    def config(self, **overrides) -> GenerationConfig:
        return self.defaults.replace(**overrides)

    # ---- graphs ------------------------------------------------------------------------------

    def _run(self, role: str, **feeds) -> list[np.ndarray]:
        names = self.inputs[role]
        return self.sessions[role].run(None, {k: v for k, v in feeds.items() if k in names})

    def _allowed_mask(self, position: int) -> np.ndarray:
        allowed = np.ones(len(self.vocab), dtype=bool)
        allowed[list(FORBIDDEN_OUTPUTS)] = False
        allowed[END_OF_WORD if position == 0 else END_OF_SENTENCE] = False
        if position == self.word_chars - 1:
            allowed[:] = False
            allowed[END_OF_WORD] = True
        return allowed

    def _spell(self, sentences: list[list[str]]) -> tuple[np.ndarray, np.ndarray]:
        width = max(len(s) for s in sentences)
        ids = np.zeros((len(sentences), width, self.word_chars), dtype=np.int64)  # (B, T, C)
        for row, words in enumerate(sentences):
            for column, word in enumerate(words):
                spelled = self.vocab.spell(word)
                ids[row, column, : len(spelled)] = spelled
        return ids, ids[..., 0] != PAD

    def encode(self, texts: list[str]) -> np.ndarray:
        """Sentence vectors (B, layers, V) of `texts`; ValueError for text the model can't take."""
        sentences = [self.vocab.check_sentence(t, self.max_words) for t in texts]
        return self._encode_words(sentences)

    def _encode_words(self, sentences: list[list[str]]) -> np.ndarray:
        ids, mask = self._spell(sentences)
        batch, width = mask.shape
        vectors = self._run("word_encoder", chars=ids.reshape(batch * width, -1))[0]
        vectors = vectors.reshape(batch, width, -1)
        return self._run("sentence_encoder", word_vectors=vectors, mask=mask)[0]

    def _initial(self, role: str, batch: int) -> np.ndarray:
        initial = self.initial_states[role]
        reps = [1] * initial.ndim
        reps[1] = batch
        return np.tile(initial, reps)

    def _begin_words(self, batch: int) -> np.ndarray:
        previous = np.zeros((batch, self.word_chars), dtype=np.int64)
        previous[:, 0], previous[:, 1] = BEGIN_SENTENCE, END_OF_WORD
        return previous

    # ---- decoding ----------------------------------------------------------------------------

    def _steps(self, vectors, role, choose, max_chars=None) -> Iterator[_Step]:
        """Yield one _Step per character step of the batch, then one with `chars` None for the
        rows still unfinished after the last word.

        `choose(masked_logits (B, V)) -> ids (B,)` picks the characters."""
        batch = vectors.shape[0]
        state = self._initial(role, batch)
        previous = self._begin_words(batch)
        done = np.zeros(batch, dtype=bool)
        emitted = np.zeros(batch, dtype=np.int64)
        for position in range(self.max_words + 1):
            word_vectors = self._run("word_encoder", chars=previous)[0]
            conditioning, state = self._run(
                role,
                word_vector=word_vectors,
                sentence_vectors=vectors,
                state=state,
                position=np.full(batch, position, dtype=np.int64),
            )
            hidden = np.zeros((batch, self.manifest.partial_size), dtype=np.float32)
            chars = np.full(batch, BEGIN_WORD, dtype=np.int64)
            word_done = done.copy()
            previous = np.zeros((batch, self.word_chars), dtype=np.int64)
            for index in range(self.word_chars):
                logits, hidden = self._run(
                    "word_decoder", previous_char=chars, hidden=hidden, conditioning=conditioning
                )
                masked = np.where(self._allowed[index], logits, -np.inf).astype(np.float32)
                chars = choose(masked)
                active = ~word_done
                previous[:, index] = np.where(word_done, PAD, chars)
                ends = active & (chars == END_OF_SENTENCE)
                full = np.zeros(batch, dtype=bool)
                if max_chars is not None:
                    emitted += active & (chars != END_OF_WORD) & ~ends
                    full = active & (emitted >= max_chars)
                word_done |= active & ((chars == END_OF_WORD) | ends | full)
                done |= ends | full
                yield _Step(active, chars, logits, masked.argmax(-1), ends, full)
                if word_done.all():
                    break
            if done.all():
                return
        yield _Step(~done, None, None, None, None, ~done)

    def _collect(self, vectors, role, choose, keep_logits=False, max_chars=None) -> list[Decoded]:
        results = [Decoded("") for _ in range(vectors.shape[0])]
        for step in self._steps(vectors, role, choose, max_chars):
            if step.chars is None:
                for row in np.flatnonzero(step.active):
                    results[row].finish_reason = "length"
                continue
            top = step.logits.max(-1, keepdims=True)
            normalizer = top[:, 0] + np.log(np.exp(step.logits - top).sum(-1))
            nits = normalizer - step.logits[np.arange(len(step.chars)), step.chars]
            for row in np.flatnonzero(step.active):
                result, char = results[row], int(step.chars[row])
                if keep_logits:
                    result.logits.append(step.logits[row])
                if step.ends[row]:
                    result.finish_reason = "eos"
                elif step.full[row]:
                    result.finish_reason = "length"
                if char in (END_OF_WORD, END_OF_SENTENCE):
                    continue
                sampled = char != int(step.best[row])
                result.steps.append(CharacterStep(self.vocab.char(char), float(nits[row]), sampled))
                result.ids.append(char)
        for result in results:
            result.text = "".join(s.char for s in result.steps)
        return results

    def decode_batch(
        self, texts: list[str], role: str = "sentence_decoder", keep_logits: bool = False
    ) -> list[Decoded]:
        """Greedy decoding of each text's sentence vectors with the decoder graph `role`."""
        vectors = self.encode(texts)
        return self._collect(vectors, role, lambda masked: masked.argmax(-1), keep_logits)

    # ---- next sentence -----------------------------------------------------------------------

    def _chooser(self, config: GenerationConfig, rng):
        if not config.do_sample:
            return lambda masked: masked.argmax(-1)
        sampler = Sampler(
            config.temperature, config.top_k, config.top_p, config.min_p, config.typical_p
        )
        return lambda masked: sampler(masked, rng)

    def _settings(self, config: GenerationConfig | None) -> GenerationConfig:
        """Validate `config`; settings a character model cannot honour raise ValueError."""
        config = (config or self.defaults).validate()
        for name, only in UNSUPPORTED_SETTINGS.items():
            value = getattr(config, name)
            if value != only:
                raise ValueError(
                    f"`{name}` must be {only!r} for a character-level hierarchical model, "
                    f"got {value!r}"
                )
        return config

    def generate(self, prompts, config: GenerationConfig | None = None, controls=None):
        """The next sentence after each prompt (a str or a list); GenerationOutput per sequence."""
        config = self._settings(config)
        prompts = [prompts] if isinstance(prompts, str) else list(prompts)
        if not prompts:
            raise ValueError("`prompts` must contain at least one prompt")
        copies = config.num_return_sequences
        vectors = np.repeat(self.encode(prompts), copies, axis=0)
        rng = np.random.default_rng(config.seed)
        decoded = self._collect(
            vectors, "sentence_decoder", self._chooser(config, rng), max_chars=config.max_new_tokens
        )
        return [
            GenerationOutput(
                text=d.text,
                token_ids=d.ids,
                logprobs=[-s.nits for s in d.steps],
                finish_reason=d.finish_reason,
                prompt_index=i // copies,
                prompt_tokens=sum(map(len, split_words(prompts[i // copies]))),
            )
            for i, d in enumerate(decoded)
        ]

    def stream(self, prompt: str, config: GenerationConfig | None = None, controls=None):
        """Yield one StreamEvent per character (top-5 alternatives) and one when a sequence
        ends (the end-of-sentence symbol, text ""); `index` is the sequence."""
        config = self._settings(config)
        vectors = np.repeat(self.encode([prompt]), config.num_return_sequences, axis=0)
        choose = self._chooser(config, np.random.default_rng(config.seed))
        steps = self._steps(vectors, "sentence_decoder", choose, max_chars=config.max_new_tokens)
        for step in steps:
            for row in np.flatnonzero(step.active):
                finish = "eos" if step.ends is not None and step.ends[row] else None
                finish = finish or ("length" if step.full[row] else None)
                if step.chars is None:  # out of words
                    yield StreamEvent("", None, None, [], int(row), finish)
                    continue
                char = int(step.chars[row])
                if char == END_OF_WORD and not finish:
                    continue
                logprobs = step.logits[row] - _logsumexp(step.logits[row])
                top = np.argsort(-logprobs)[:5]
                yield StreamEvent(
                    "" if char in (END_OF_WORD, END_OF_SENTENCE) else self.vocab.char(char),
                    char,
                    float(logprobs[char]),
                    [
                        (self.tokenizer.decode([int(i)], False), float(np.exp(logprobs[i])))
                        for i in top
                    ],
                    int(row),
                    finish,
                )

    # ---- paraphrase --------------------------------------------------------------------------

    def paraphrase(
        self,
        text: str,
        num_candidates: int = 40,
        seed: int | None = 0,
        temperature_range=(0.0, 1.0),
        noise_range=(0.0, 1.0),
    ) -> list[Candidate]:
        """Candidates sorted by distance to `text` (closest first); see the module docstring."""
        if not self.can_paraphrase:
            raise ValueError(f"model {self.name!r} has no autoencoder: it cannot paraphrase")
        if (
            isinstance(num_candidates, bool)
            or not isinstance(num_candidates, int)
            or not (1 <= num_candidates <= 256)
        ):
            raise ValueError(f"`num_candidates` must be an int in [1, 256], got {num_candidates!r}")
        low_t, high_t = _check_range("temperature_range", temperature_range)
        low_w, high_w = _check_range("noise_range", noise_range)
        source = self.encode([text])  # (1, L, V)
        rng = np.random.default_rng(seed)
        temperatures = rng.uniform(low_t, high_t, num_candidates)
        weights = rng.uniform(low_w, high_w, num_candidates)
        rms = np.sqrt((source[0] ** 2).mean(-1, keepdims=True))  # (L, 1)
        noise = rng.standard_normal((num_candidates, *source.shape[1:])) * rms
        vectors = (source + weights[:, None, None] * noise).astype(np.float32)

        def choose(masked):
            return sample_rows(masked, temperatures, rng)

        decoded = self._collect(vectors, "autoencoder_decoder", choose)
        texts = [d.text for d in decoded]
        fits = [self._fits(t) for t in texts]
        distances = np.full(num_candidates, np.inf)
        if any(fits):
            index = [i for i, f in enumerate(fits) if f]
            encoded = self._encode_words([split_words(texts[i]) for i in index])
            distances[index] = np.linalg.norm((encoded - source).reshape(len(index), -1), axis=1)
        candidates = [
            Candidate(d.text, float(dist), float(t), float(w), d.steps)
            for d, dist, t, w in zip(decoded, distances, temperatures, weights)
        ]
        return sorted(candidates, key=lambda c: c.distance)

    def _fits(self, text: str) -> bool:
        try:
            self.vocab.check_sentence(text, self.max_words)
        except ValueError:
            return False
        return True

    def reconstruction(self, text: str) -> Reconstruction:
        """The autoencoder's greedy reconstruction of `text` and the text's own cost."""
        if not self.can_paraphrase:
            raise ValueError(f"model {self.name!r} has no autoencoder: it cannot reconstruct")
        words = self.vocab.check_sentence(text, self.max_words)
        vectors = self._encode_words([words])
        greedy = self._collect(vectors, "autoencoder_decoder", lambda masked: masked.argmax(-1))[0]
        return Reconstruction(greedy.text, self.teacher_forced_cost(words, vectors))

    def teacher_forced_cost(self, words: list[str], vectors, role="autoencoder_decoder") -> float:
        """Nits per character of `words` (+ end-of-word symbols and the end-of-sentence word)
        given sentence vectors (1, L, V): train.hierarchical.recipes's metric for one sentence."""
        total, count = self.teacher_forced_nits(words, vectors, role)
        return total / count

    def teacher_forced_nits(self, words: list[str], vectors, role: str) -> tuple[float, int]:
        """(summed nits, predicted characters) of `words` given sentence vectors (1, L, V)."""
        state = self._initial(role, 1)
        previous = self._begin_words(1)
        total, count = 0.0, 0
        targets = [self.vocab.spell(w) for w in words] + [[END_OF_SENTENCE, END_OF_WORD]]
        for position, target in enumerate(targets):
            word_vector = self._run("word_encoder", chars=previous)[0]
            conditioning, state = self._run(
                role,
                word_vector=word_vector,
                sentence_vectors=vectors,
                state=state,
                position=np.array([position], dtype=np.int64),
            )
            hidden = np.zeros((1, self.manifest.partial_size), dtype=np.float32)
            char = np.array([BEGIN_WORD], dtype=np.int64)
            for target_char in target:
                logits, hidden = self._run(
                    "word_decoder", previous_char=char, hidden=hidden, conditioning=conditioning
                )
                total += float(_logsumexp(logits[0]) - logits[0, target_char])
                count += 1
                char = np.array([target_char], dtype=np.int64)
            previous = np.zeros((1, self.word_chars), dtype=np.int64)
            previous[0, : len(target)] = target
        return total, count


def _logsumexp(row: np.ndarray) -> float:
    top = float(row.max())
    return top + math.log(float(np.exp(row - top).sum()))
