"""The argument schema subset's arrays: a schema is refused where it would not be enforced,
and a value breaking it is refused naming the item by its path."""

from __future__ import annotations

import re

import pytest

from runs.tools.errors import InvalidArguments
from runs.tools.schema import check_schema, validate

LINE = {
    "type": "object",
    "properties": {
        "sku": {"type": "string", "pattern": "^[A-Z0-9-]+$"},
        "quantity": {"type": "integer", "minimum": 1},
    },
    "required": ["sku", "quantity"],
    "additionalProperties": False,
}
ORDER = {
    "type": "object",
    "properties": {
        "lines": {"type": "array", "items": LINE, "minItems": 1, "maxItems": 3},
        "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
    },
    "required": ["lines"],
    "additionalProperties": False,
}


def test_an_array_of_objects_and_one_of_strings_are_a_schema_that_holds():
    check_schema(ORDER)
    validate(
        ORDER, {"lines": [{"sku": "A-1", "quantity": 2}], "tags": ["rush", "gift"]}, path="args"
    )


@pytest.mark.parametrize(
    ("value", "field", "words"),
    [
        ({"lines": "A-1"}, "args.lines", "args.lines must be an array"),
        ({"lines": []}, "args.lines", "must have at least 1 items"),
        ({"lines": [{"sku": "A", "quantity": 1}] * 4}, "args.lines", "must have at most 3 items"),
        (
            {"lines": [{"sku": "A", "quantity": 1}, {"sku": "b", "quantity": 1}]},
            "args.lines[1].sku",
            "args.lines[1].sku must match",
        ),
        ({"lines": [{"sku": "A"}]}, "args.lines[0].quantity", "is required"),
        (
            {"lines": [{"sku": "A", "quantity": 1, "price": 3}]},
            "args.lines[0].price",
            "is not a known field",
        ),
        (
            {"lines": [{"sku": "A", "quantity": 1}], "tags": ["rush", "gift", "rush"]},
            "args.tags[2]",
            "args.tags[2] repeats args.tags[0]; items must be unique",
        ),
    ],
)
def test_a_value_breaking_an_array_schema_names_the_item(value, field, words):
    with pytest.raises(InvalidArguments, match=re.escape(words)) as e:
        validate(ORDER, value, path="args")
    assert e.value.field == field


def test_unique_items_compare_objects_by_content_not_key_order():
    schema = {"type": "array", "items": LINE, "uniqueItems": True}
    same = [{"sku": "A", "quantity": 1}, {"quantity": 1, "sku": "A"}]
    with pytest.raises(InvalidArguments, match="repeats"):
        validate(schema, same, path="args.lines")
    validate(schema, [{"sku": "A", "quantity": 1}, {"sku": "A", "quantity": 2}], path="x")


def test_a_tuple_is_not_an_array_value():
    # Arguments come from JSON: a tuple reaching validation is a caller's bug, said as such.
    with pytest.raises(InvalidArguments, match="must be an array"):
        validate({"type": "array", "items": {"type": "string"}}, ("a",), path="args.files")


@pytest.mark.parametrize(
    ("schema", "words"),
    [
        ({"type": "array"}, "#: an array needs items"),
        ({"type": "array", "items": [{"type": "string"}]}, "#: an array needs items"),
        ({"type": "array", "items": {"type": "string"}, "minItems": -1}, "minItems must be"),
        ({"type": "array", "items": {"type": "string"}, "maxItems": True}, "maxItems must be"),
        (
            {"type": "array", "items": {"type": "string"}, "minItems": 3, "maxItems": 2},
            "minItems is above maxItems",
        ),
        ({"type": "array", "items": {"type": "string"}, "uniqueItems": 1}, "uniqueItems must"),
        ({"type": "array", "items": {"type": "string"}, "contains": {}}, "unsupported keywords"),
        ({"type": "array", "items": {"type": "number"}}, "#/items: type must be one of"),
        (
            {"type": "array", "items": {"type": "object", "properties": {}}},
            "#/items: objects must set additionalProperties to false",
        ),
    ],
)
def test_an_array_schema_that_would_not_be_enforced_is_refused(schema, words):
    with pytest.raises(TypeError, match=words):
        check_schema(schema)
