"""The decoding parameters' declaration (runtime/parameters.py) against what is derived from it:
GenerationConfig's fields and checks, and the request fields a config travels as."""

from __future__ import annotations

import dataclasses

import pytest

import runtime
from runtime.parameters import MODES, PARAMETERS, from_request, request_fields

FIXED_BY_MANIFEST = {"stop", "forced_bos_token_id", "forced_eos_token_id", "suppress_tokens"}
# Config fields that never change a generation's tokens, so they are no decoding parameter.
NOT_DECODING = {"cache_salt", "tool_calls"}


def test_every_declared_parameter_is_a_config_field_with_its_default():
    fields = {f.name: f.default for f in dataclasses.fields(runtime.GenerationConfig)}
    declared = {p.name: p.default for p in PARAMETERS}
    kept = {k: v for k, v in fields.items() if k not in FIXED_BY_MANIFEST | NOT_DECODING}
    assert kept == declared


@pytest.mark.parametrize("parameter", PARAMETERS, ids=lambda p: p.name)
def test_each_parameter_s_default_is_valid_and_its_app_range_within_the_runtime_s(parameter):
    parameter.check(parameter.default)
    assert set(parameter.modes) <= set(MODES) and parameter.help
    if parameter.allowed:
        for end in (parameter.allowed.low, parameter.allowed.high):
            if not (parameter.allowed.low_open and end == parameter.allowed.low):
                parameter.check(end)
    if parameter.app:
        first = parameter.default if parameter.app.value is None else parameter.app.value
        assert first in parameter.limits


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"top_p": 0.0}, "`top_p` must be in (0, 1], got 0.0"),
        ({"temperature": 1e300}, "`temperature` must be in [0.001, 100], got 1e+300"),
        ({"top_k": 2.5}, "`top_k` must be an int >= 0, got 2.5"),
        ({"do_sample": 1}, "`do_sample` must be a bool, got 1"),
        ({"seed": -1}, "`seed` must be a non-negative int or None, got -1"),
        ({"early_stopping": "soon"}, "`early_stopping` must be True, False or 'never'"),
    ],
)
def test_the_config_refuses_values_outside_the_declared_ranges(settings, message):
    with pytest.raises(ValueError) as error:
        runtime.GenerationConfig(**settings).validate()
    assert message in str(error.value)


@pytest.mark.parametrize(
    "config",
    [
        runtime.GenerationConfig(max_new_tokens=9, repetition_penalty=1.2, min_new_tokens=2),
        runtime.GenerationConfig(do_sample=True, temperature=0.7, top_k=40, top_p=0.9, seed=3),
        runtime.GenerationConfig(num_beams=4, num_return_sequences=2, length_penalty=0.5),
        runtime.GenerationConfig(do_sample=True, num_beams=2, early_stopping="never"),
    ],
)
def test_a_config_travels_as_request_fields_and_back(config):
    back = runtime.GenerationConfig(**from_request(request_fields(config))).validate()
    if config.do_sample:
        assert back == config
    else:  # greedy and beam search travel with temperature 0: the temperature is not kept
        assert back == config.replace(temperature=back.temperature)


def test_a_chat_request_carries_no_beam_search_field_and_refuses_beams():
    fields = request_fields(runtime.GenerationConfig(do_sample=True, top_p=0.9), chat=True)
    assert fields["top_p"] == 0.9 and "num_beams" not in fields and "length_penalty" not in fields
    with pytest.raises(ValueError, match="`num_beams` must be 1 for chat, got 2"):
        request_fields(runtime.GenerationConfig(num_beams=2), chat=True)
