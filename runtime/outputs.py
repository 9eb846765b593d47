"""What generation returns: `GenerationOutput` (one finished sequence), `StreamEvent` (one
increment of a streamed sequence), shared by every generating class (runtime/generator.py,
runtime/hierarchical.py), and `Score` (log-probabilities of given text, runtime/scoring.py).
Plain dataclasses; this module imports nothing of ours.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class GenerationOutput:
    text: str  # generated text (special tokens removed, cut before a stop string)
    token_ids: list[int]  # generated tokens (EOS included when the model ended on it)
    logprobs: list[float]  # the model's log-probability of each generated token
    finish_reason: str  # "eos", "length", "stop" (a stop string) or "context" (context full)
    prompt_index: int = 0  # which prompt of the batch this output belongs to
    prompt_tokens: int = 0  # prompt length in tokens (controls and BOS included)
    score: float | None = None  # beam search: length-penalised sequence score

    def add(self, event: StreamEvent) -> None:
        """Take in one event of this sequence's stream: its text; a token event's id and
        log-probability; the finish reason of the last event. Every caller that turns a stream
        into outputs (`generate`, `chat`, serve's routes) does it through this.

        >>> out = GenerationOutput("", [], [], "")
        >>> out.add(StreamEvent("In", 7, -0.5)); out.add(StreamEvent(" the", 9, -1.0, [], 0, "eos"))
        >>> out.text, out.token_ids, out.logprobs, out.finish_reason
        ('In the', [7, 9], [-0.5, -1.0], 'eos')
        """
        self.text += event.text
        if event.token_id is not None:
            self.token_ids.append(event.token_id)
            self.logprobs.append(event.logprob)
        if event.finish_reason:
            self.finish_reason = event.finish_reason


@dataclass
class StreamEvent:
    text: str  # new text since the previous event of this sequence ("" mid-character)
    token_id: int | None  # the token that produced it (None for a final flush)
    logprob: float | None  # its log-probability under the model
    alternatives: list[tuple[str, float]] = field(default_factory=list)  # top-5 (token, prob)
    index: int = 0  # which sequence (prompt-major: prompt * num_return_sequences + sample)
    finish_reason: str | None = None  # set on the last event of a sequence


@dataclass(frozen=True)
class Score:
    """Log-probabilities of given tokens under the model (`gen.score`, `gen.score_ids`)."""

    token_ids: tuple[int, ...]  # the scored tokens
    tokens: tuple[str, ...]  # each scored token decoded alone (special tokens kept)
    logprobs: tuple[float, ...]  # log P(token | everything before it), raw logits, natural log
    total: float  # sum of `logprobs`: the log-likelihood of the scored text
    context_ids: tuple[int, ...] = ()  # what the scored tokens were conditioned on
    # With `top` > 0: per scored token, the model's `top` most likely tokens as (text, logprob).
    alternatives: tuple[tuple[tuple[str, float], ...], ...] = ()
