"""Structured outputs in the runtime: `GenerationConfig.json_schema` (runtime/structured.py).

The kernels choose among allowed tokens exactly as if every other logit were -inf (injected
logits, no model). On the shipped bible-lm (a small real model whose tokenizer splits strings
finely), every schema of bench/schemas.py gives output that parses and validates with
`jsonschema`, greedy and sampled; a request cut by `max_new_tokens` ends with "length"; bad
schemas are refused by name; and a constrained request's tokens are the same alone and batched
beside other requests. One test on the flagship (skipped when it is not converted): chat replies
in JSON mode and to a schema end on the end of turn.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import numpy as np
import pytest

import runtime
from bench.schemas import SCHEMAS
from runtime.parameters import (
    JSON_OBJECT,
    from_request,
    request_fields,
    response_format_of,
    schema_of_response_format,
)
from runtime.sampling import Sampler, filter_logits, greedy
from runtime.search import NonFiniteScores
from tests.test_engine import _concurrently

BIBLE_LM = Path(__file__).resolve().parents[1] / "models" / "bible-lm" / "fp32"
PERSON = json.dumps(
    {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"}},
        "required": ["name", "age"],
    }
)


# ---- the kernels, on injected logits -----------------------------------------------------------


def test_greedy_picks_the_best_allowed_token_and_the_first_on_ties():
    logits = np.array([[5.0, 1.0, 3.0, 3.0, 4.0], [0.0, 2.0, 2.0, 9.0, 1.0]], dtype=np.float32)
    allowed = [np.array([1, 2, 3]), np.array([1, 2, 4])]
    assert greedy(logits, allowed).tolist() == [2, 1]
    assert greedy(logits, [None, np.array([0, 4])]).tolist() == [0, 4]
    assert greedy(logits, [np.array([0, 2]), np.array([3])]).tolist() == [0, 3]
    assert greedy(logits).tolist() == [0, 3]


@pytest.mark.parametrize(
    "settings",
    [{}, {"top_k": 2}, {"top_p": 0.7}, {"min_p": 0.2, "temperature": 0.7}, {"typical_p": 0.8}],
)
def test_the_sampler_draws_from_the_allowed_tokens_as_from_a_masked_row(settings):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(1, 40)).astype(np.float32)
    allowed = np.array([1, 4, 5, 9, 17, 22, 30, 31, 39])
    masked = np.full_like(logits, -np.inf)
    masked[0, allowed] = logits[0, allowed]
    filtered = filter_logits(masked, **settings)[0]
    expected = np.exp(filtered - filtered.max())
    expected /= expected.sum()
    sampler, draws = Sampler(**settings), 20_000
    tokens = np.concatenate(
        [sampler(np.repeat(logits, 1000, axis=0), rng, [allowed] * 1000) for _ in range(20)]
    )
    frequency = np.bincount(tokens, minlength=40) / draws
    assert set(np.flatnonzero(frequency)) == set(np.flatnonzero(expected))
    assert np.abs(frequency - expected).max() < 0.015  # ~4.5 standard errors at p = 0.5


def test_bad_allowed_ids_are_refused():
    logits = np.zeros((1, 4), dtype=np.float32)
    for ids in (np.array([], dtype=np.int64), np.array([1, 4])):
        with pytest.raises(ValueError, match="`allowed` must be non-empty sorted token ids"):
            greedy(logits, [ids])


# ---- the request's side: the setting and its API form ------------------------------------------


@pytest.mark.parametrize(
    "schema, problem",
    [
        ("{", "must be valid JSON"),
        ("[1, 2]", "must be a JSON object (or true / false)"),
        ('{"type": "strin"}', "(Invalid type: strin)"),
        ('{"not": {"type": "string"}}', 'Unimplemented keys: ["not"]'),
        ('{"$ref": "#/$defs/missing"}', "does not exist"),
    ],
)
def test_bad_schemas_are_refused_naming_the_problem(schema, problem):
    with pytest.raises(ValueError) as error:
        runtime.GenerationConfig(json_schema=schema).validate()
    assert str(error.value).startswith("`json_schema` must be ") and problem in str(error.value)


def test_a_schema_is_refused_with_beam_search():
    with pytest.raises(ValueError, match="`json_schema` must be None with beam search"):
        runtime.GenerationConfig(json_schema=PERSON, num_beams=2).validate()


def test_response_formats_map_onto_schemas_and_back():
    assert schema_of_response_format({"type": "text"}) is None
    assert schema_of_response_format({"type": "json_object"}) == JSON_OBJECT
    spec = {"type": "json_schema", "json_schema": {"name": "p", "schema": json.loads(PERSON)}}
    assert json.loads(schema_of_response_format(spec)) == json.loads(PERSON)
    config = runtime.GenerationConfig(json_schema=PERSON, do_sample=True, seed=1)
    fields = request_fields(config, chat=True)
    assert fields["response_format"]["json_schema"]["schema"] == json.loads(PERSON)
    assert runtime.GenerationConfig(**from_request(fields)) == config
    assert response_format_of(JSON_OBJECT) == {"type": "json_object"}
    with pytest.raises(ValueError, match="`response_format` must be"):
        schema_of_response_format({"type": "json_schema"})


# ---- generation on a small real model ----------------------------------------------------------


@pytest.fixture(scope="module")
def bible_lm():
    return runtime.load(BIBLE_LM, threads=1, batching=False)


def _document(output) -> object:
    return json.loads(output.text)


@pytest.mark.parametrize("case", SCHEMAS, ids=lambda case: case.name)
def test_every_output_parses_and_validates_greedy_and_sampled(bible_lm, case):
    room = bible_lm.context_length - 2  # bible-lm's context is short: all of it
    for config in (
        runtime.GenerationConfig(max_new_tokens=room, json_schema=case.text),
        runtime.GenerationConfig(
            max_new_tokens=room, json_schema=case.text, do_sample=True, top_p=0.95, seed=7
        ),
    ):
        output = bible_lm.generate("In", config)[0]
        assert output.finish_reason == "eos", output.text
        jsonschema.validate(_document(output), case.schema)


def test_max_new_tokens_cuts_a_document_with_finish_reason_length(bible_lm):
    config = runtime.GenerationConfig(max_new_tokens=6, json_schema=PERSON)
    output = bible_lm.generate("In the beginning", config)[0]
    assert output.finish_reason == "length" and output.text.startswith('{"name":')
    with pytest.raises(json.JSONDecodeError):
        json.loads(output.text)


def test_processors_that_remove_every_allowed_token_fail_the_request(bible_lm):
    schema = json.dumps({"type": "object", "properties": {}, "additionalProperties": False})
    config = runtime.GenerationConfig(max_new_tokens=20, min_new_tokens=10, json_schema=schema)
    with pytest.raises(NonFiniteScores, match="no token left that its JSON Schema allows"):
        bible_lm.generate("In", config)


@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "sampled"])
def test_a_constrained_request_is_the_same_alone_and_batched(bible_lm, sampled):
    """Alone (no engine), alone in the engine, and in the engine beside free and constrained
    batch-mates of other lengths and settings: the same tokens and log-probabilities."""
    case = next(case for case in SCHEMAS if case.name == "family")
    config = runtime.GenerationConfig(
        max_new_tokens=110, json_schema=case.text, do_sample=sampled, top_k=50, seed=5
    )
    prompt = "And God said,"
    alone = bible_lm.generate(prompt, config)[0]
    engine = runtime.load(BIBLE_LM, threads=1, batching=True)
    mates = [
        ("In the beginning", runtime.GenerationConfig(max_new_tokens=30)),
        ("Then", runtime.GenerationConfig(max_new_tokens=60, do_sample=True, seed=2)),
        ("Jesus wept.", runtime.GenerationConfig(max_new_tokens=110, json_schema=PERSON)),
        (
            "Blessed are",
            runtime.GenerationConfig(
                max_new_tokens=110,
                json_schema=SCHEMAS[1].text,
                do_sample=True,
                seed=3,
                num_return_sequences=2,
            ),
        ),
    ]
    results = _concurrently(engine, [(prompt, config), *mates])
    assert engine.engine.steps < sum(len(r[0].token_ids) for r in results)  # they did batch
    for output in (engine.generate(prompt, config)[0], results[0][0]):
        assert output.token_ids == alone.token_ids
        assert output.logprobs == alone.logprobs
    jsonschema.validate(_document(alone), case.schema)
    for output in results[4]:
        jsonschema.validate(_document(output), SCHEMAS[1].schema)


# ---- the flagship, in chat ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def flagship():
    from convert.flagship import flagship_bundle

    try:
        bundle = flagship_bundle()
    except Exception as error:  # no GGUF here and no network: nothing to test against
        pytest.skip(f"the flagship is not converted ({error})")
    return runtime.load(bundle, threads=1)


def test_flagship_chat_replies_in_json_mode_and_to_a_schema(flagship):
    messages = [{"role": "user", "content": "Describe Abraham as JSON with his name and age."}]
    for schema, check in ((JSON_OBJECT, dict), (PERSON, json.loads(PERSON))):
        config = flagship.config(max_new_tokens=80, json_schema=schema)
        output = flagship.chat(messages, config)[0]
        assert output.finish_reason == "eos"  # the end of turn, the only token allowed at the end
        assert output.token_ids[-1] in flagship.end_of_turn_token_ids
        document = _document(output)
        if check is dict:
            assert isinstance(document, dict)
        else:
            jsonschema.validate(document, check)


def test_the_chat_tab_s_schema_box_sets_the_reply_s_schema():
    from ui.chat_tab import chat_config, with_schema

    greedy = chat_config("greedy", 8, 1.0, 0, 1.0, 0.0, 1.0, 0, 0)
    assert with_schema(greedy, "").json_schema is None and with_schema(greedy, None) == greedy
    assert with_schema(greedy, f"  {PERSON}\n").json_schema == PERSON
    with pytest.raises(ValueError, match="`json_schema` must be valid JSON"):
        with_schema(greedy, '{"type": ')
