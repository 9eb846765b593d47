"""How much one request may ask of a generator: one cap on total sequences, for every server.

A request's decoding work grows with prompts × samples (`num_return_sequences`) × beams: each
is a row of the batch and of its KV cache. The app (ui/) and `scriptorium serve` (serve/) both
refuse a request above `MAX_SEQUENCES` before any model runs, with a message that names the
request's own fields. The runtime itself imposes no cap (a library caller decides its batch).
"""

from __future__ import annotations

from .config import GenerationConfig

MAX_SEQUENCES = 64  # prompts × samples × beams in one request (docs/SCALING.md, docs/APP.md)


def sequences(prompts: int, config: GenerationConfig) -> int:
    """prompts × num_return_sequences × num_beams.

    >>> sequences(2, GenerationConfig(num_beams=4, num_return_sequences=2))
    16
    """
    return prompts * config.num_return_sequences * config.num_beams


def check_sequences(
    prompts: int,
    config: GenerationConfig,
    cap: int = MAX_SEQUENCES,
    names: tuple[str, str, str] = ("prompt", "n", "num_beams"),
) -> None:
    """Raise ValueError when `sequences(prompts, config)` exceeds `cap`; `names` are the
    request's words for prompts, samples and beams.

    >>> check_sequences(9, GenerationConfig(do_sample=True, num_return_sequences=8))
    Traceback (most recent call last):
    ValueError: `prompt` × `n` × `num_beams` must be at most 64 sequences, got 9 × 8 × 1 = 72
    """
    total = sequences(prompts, config)
    if total > cap:
        counts = f"{prompts} × {config.num_return_sequences} × {config.num_beams}"
        raise ValueError(
            f"`{names[0]}` × `{names[1]}` × `{names[2]}` must be at most {cap} sequences, "
            f"got {counts} = {total}"
        )
