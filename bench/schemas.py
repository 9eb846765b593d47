"""The structured-output schema set: 24 JSON Schemas, each with a chat prompt that asks for it.

Shared by the grammar-library benchmark (bench/grammar_libs.py), the tests of structured outputs
(tests/test_structured.py: every output parses and validates with `jsonschema`, greedy and
sampled) and the llama-server comparison (docs/BENCHMARKS.md). They cover nested objects,
arrays (of strings, objects and arrays), enums, number and integer ranges, required and
optional fields, nullable fields, `const`, `anyOf`, `$defs` / `$ref`, and strings with
patterns, formats and lengths. Every root is an object, as OpenAI's strict mode requires.

Every document a schema allows is bounded (strings have a `maxLength` or a pattern of bounded
length, arrays a `maxItems`, integers a range), so a constrained decoder finishes within
`MAX_TOKENS` whatever the model prefers: a random tiny model must give valid JSON too. Numbers
with a fraction are the exception (their digits are unbounded); the prompts ask for short ones.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

MAX_TOKENS = 192  # enough for the longest document of the set in the flagship's tokens


@dataclass(frozen=True)
class SchemaCase:
    name: str  # a short id, also the OpenAI `json_schema.name`
    schema: dict  # the JSON Schema
    prompt: str  # what a chat model is asked

    @property
    def text(self) -> str:
        """The schema as JSON text (what `GenerationConfig.json_schema` takes)."""
        return json.dumps(self.schema)


def _object(properties: dict, required: list[str] | None = None, **extra) -> dict:
    """An object schema with no properties beyond `properties` (all required by default)."""
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties) if required is None else required,
        "additionalProperties": False,
        **extra,
    }


def _text(longest: int, **extra) -> dict:
    return {"type": "string", "maxLength": longest, **extra}


def _pattern(regex: str) -> dict:
    return {"type": "string", "pattern": regex}


def _integer(low: int, high: int) -> dict:
    return {"type": "integer", "minimum": low, "maximum": high}


BOOKS = ["Genesis", "Exodus", "Psalms", "Proverbs", "Isaiah", "Matthew", "John", "Acts"]

SCHEMAS = [
    SchemaCase(
        "person",
        _object({"name": _text(24), "age": _integer(0, 150)}),
        "Describe Abraham as JSON with his name and his age at the birth of Isaac.",
    ),
    SchemaCase(
        "verse_reference",
        _object({"book": {"enum": BOOKS}, "chapter": _integer(1, 150), "verse": _integer(1, 176)}),
        "Give the reference of the most famous verse of the Gospel of John as JSON.",
    ),
    SchemaCase(
        "address",
        _object(
            {
                "name": _text(24),
                "address": _object(
                    {
                        "city": _text(20),
                        "country": {"enum": ["Israel", "Egypt", "Greece", "Italy"]},
                    }
                ),
            }
        ),
        "Where did Paul write to the Corinthians from? Answer as JSON: a name and an address.",
    ),
    SchemaCase(
        "tags",
        _object({"tags": {"type": "array", "items": _text(12), "minItems": 1, "maxItems": 4}}),
        "List up to four one-word tags for the story of Noah's ark, as JSON.",
    ),
    SchemaCase(
        "verses",
        _object(
            {
                "verses": {
                    "type": "array",
                    "items": _object({"reference": _text(16), "text": _text(60)}),
                    "maxItems": 3,
                }
            }
        ),
        "Quote up to three short verses about light, as JSON with references.",
    ),
    SchemaCase(
        "weather",
        _object(
            {
                "city": _text(20),
                "celsius": {"type": "number", "minimum": -50, "maximum": 60},
                "sunny": {"type": "boolean"},
            }
        ),
        "Report today's weather in Jerusalem as JSON (a whole number of degrees is fine).",
    ),
    SchemaCase(
        "answer",
        _object({"answer": {"enum": ["yes", "no", "maybe"]}, "confidence": _integer(0, 100)}),
        "Is the Book of Psalms in the Old Testament? Answer as JSON.",
    ),
    SchemaCase(
        "date",
        _object({"event": _text(30), "date": _pattern(r"^\d{4}-\d{2}-\d{2}$")}),
        "Give an event of the year 1611 and its date (YYYY-MM-DD) as JSON.",
    ),
    SchemaCase(
        "phone",
        _object({"name": _text(24), "phone": _pattern(r"^\+?[0-9]{7,12}$")}),
        "Invent a contact card for a church office as JSON with a phone number.",
    ),
    SchemaCase(
        "identifier",
        _object(
            {
                "variable": _pattern("^[a-z][a-z0-9_]{2,15}$"),
                "value": _integer(-1000, 1000),
            }
        ),
        "Name a Python variable that counts the books of the Bible, and its value, as JSON.",
    ),
    SchemaCase(
        "optional_fields",
        _object(
            {"title": _text(30), "subtitle": _text(30), "pages": _integer(1, 2000)},
            required=["title"],
        ),
        "Describe a printed Bible as JSON: a title, and a subtitle and page count if you like.",
    ),
    SchemaCase(
        "nullable",
        _object(
            {"author": {"type": ["string", "null"], "maxLength": 24}, "year": _integer(-1500, 2025)}
        ),
        "Who wrote the Book of Job, and when? Use null for an unknown author. Answer as JSON.",
    ),
    SchemaCase(
        "shape",
        _object(
            {
                "shape": {
                    "anyOf": [
                        _object({"kind": {"const": "circle"}, "radius": _integer(1, 100)}),
                        _object({"kind": {"const": "square"}, "side": _integer(1, 100)}),
                    ]
                }
            }
        ),
        "Describe a shape, a circle or a square, as JSON.",
    ),
    SchemaCase(
        "versioned",
        _object({"version": {"const": 1}, "language": {"enum": ["Hebrew", "Greek", "Aramaic"]}}),
        "In which language was the New Testament written? Answer as JSON (version 1).",
    ),
    SchemaCase(
        "matrix",
        _object(
            {
                "matrix": {
                    "type": "array",
                    "items": {
                        "type": "array",
                        "items": _integer(-9, 9),
                        "minItems": 2,
                        "maxItems": 2,
                    },
                    "minItems": 2,
                    "maxItems": 2,
                }
            }
        ),
        "Write the 2x2 identity matrix as JSON.",
    ),
    SchemaCase(
        "family",
        _object(
            {"child": {"$ref": "#/$defs/person"}, "father": {"$ref": "#/$defs/person"}},
            **{"$defs": {"person": _object({"name": _text(20), "tribe": _text(12)})}},
        ),
        "Name a child and father from Genesis, with their tribes, as JSON.",
    ),
    SchemaCase(
        "bounded_integers",
        _object(
            {
                "even": {"type": "integer", "minimum": 0, "maximum": 98, "multipleOf": 2},
                "negative": {"type": "integer", "exclusiveMaximum": 0, "minimum": -99},
            }
        ),
        "Give an even number under 100 and a negative number above -100, as JSON.",
    ),
    SchemaCase(
        "email",
        _object({"name": _text(24), "email": _text(40, format="email")}),
        "Invent a contact for a Bible society as JSON with an email address.",
    ),
    SchemaCase(
        "lengths",
        _object(
            {
                "code": {"type": "string", "minLength": 3, "maxLength": 3},
                "name": _text(20, minLength=2),
            }
        ),
        "Give a three-letter book code (like GEN) and the book's name as JSON.",
    ),
    SchemaCase(
        "mixed_enum",
        _object({"value": {"enum": [1, 2.5, "three", None, True]}}),
        'Pick any one value from 1, 2.5, "three", null and true, as JSON.',
    ),
    SchemaCase(
        "deep",
        _object(
            {
                "testament": _object(
                    {
                        "name": {"enum": ["Old", "New"]},
                        "book": _object(
                            {
                                "name": {"enum": BOOKS},
                                "chapter": _object({"number": _integer(1, 150)}),
                            }
                        ),
                    }
                )
            }
        ),
        "Pick a testament, one of its books and a chapter, nested as JSON.",
    ),
    SchemaCase(
        "recipe",
        _object(
            {
                "title": _text(16),
                "ingredients": {
                    "type": "array",
                    "items": _object({"item": _text(10), "grams": _integer(1, 999)}),
                    "minItems": 1,
                    "maxItems": 2,
                },
                "steps": {"type": "array", "items": _text(16), "maxItems": 2},
            }
        ),
        "Give a recipe for unleavened bread as JSON: a title, ingredients in grams and steps.",
    ),
    SchemaCase(
        "rating",
        _object(
            {
                "book": {"enum": BOOKS},
                "stars": _integer(1, 5),
                "review": _text(50),
                "recommended": {"type": "boolean"},
            }
        ),
        "Rate the Book of Proverbs from 1 to 5 stars as JSON, with a short review.",
    ),
    SchemaCase(
        "timeline",
        _object(
            {
                "events": {
                    "type": "array",
                    "items": _object({"year": _integer(-2000, 100), "event": _text(20)}),
                    "minItems": 2,
                    "maxItems": 3,
                }
            }
        ),
        "Give two or three events of Israel's history with their years (BC negative), as JSON.",
    ),
]
