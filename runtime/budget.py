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
    request's words for prompts, samples and beams. The message names the factors above 1: a
    request with one prompt and no beams hears of its `n` alone.

    >>> check_sequences(9, GenerationConfig(do_sample=True, num_return_sequences=8))
    Traceback (most recent call last):
    ValueError: `prompt` × `n` × `num_beams` must be at most 64 sequences, got 9 × 8 × 1 = 72
    >>> check_sequences(1, GenerationConfig(do_sample=True, num_return_sequences=65))
    Traceback (most recent call last):
    ValueError: `n` must be at most 64, got 65
    """
    counts = (prompts, config.num_return_sequences, config.num_beams)
    total = sequences(prompts, config)
    if total <= cap:
        return
    grown = [(name, count) for name, count in zip(names, counts) if count > 1]
    if len(grown) == 1:
        ((name, count),) = grown
        raise ValueError(f"`{name}` must be at most {cap}, got {count}")
    product = " × ".join(str(count) for count in counts)
    raise ValueError(
        f"`{names[0]}` × `{names[1]}` × `{names[2]}` must be at most {cap} sequences, "
        f"got {product} = {total}"
    )
