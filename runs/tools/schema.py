"""A strict validator for the small JSON Schema subset our tools' arguments use.

Supported keywords: type (object, array, string, integer, boolean), properties, required,
additionalProperties (false only), items (required for an array), minItems, maxItems,
uniqueItems, minLength, maxLength, pattern (anchored "^...$"), enum, minimum, maximum, and
the annotations $schema, title, description, examples. Objects and arrays nest. A schema
using anything else is refused when its tool class is defined, so no keyword is ever
silently ignored.

An array's order is part of the value, as in JSON: ["a", "b"] and ["b", "a"] are two
intents with two digests. A tool to which the order means nothing sorts in prepare_args.
uniqueItems compares items by their canonical JSON.
"""

from __future__ import annotations

import re
from typing import Any

from control.foundation.canonical import canonical_json
from runs.tools.errors import InvalidArguments

DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"
_ANNOTATIONS = {"$schema", "title", "description", "examples"}
_KEYWORDS = {
    "object": {"type", "properties", "required", "additionalProperties"},
    "array": {"type", "items", "minItems", "maxItems", "uniqueItems"},
    "string": {"type", "minLength", "maxLength", "pattern", "enum"},
    "integer": {"type", "minimum", "maximum", "enum"},
    "boolean": {"type"},
}


def check_schema(schema: dict[str, Any], *, path: str = "#") -> None:
    """Raise TypeError if schema uses something this validator would not enforce."""
    kind = schema.get("type")
    if kind not in _KEYWORDS:
        raise TypeError(f"{path}: type must be one of {sorted(_KEYWORDS)}, not {kind!r}")
    unsupported = set(schema) - _KEYWORDS[kind] - _ANNOTATIONS
    if unsupported:
        raise TypeError(f"{path}: unsupported keywords {sorted(unsupported)}")
    if kind == "object":
        if schema.get("additionalProperties", True) is not False:
            raise TypeError(f"{path}: objects must set additionalProperties to false")
        properties = schema.get("properties", {})
        missing = set(schema.get("required", [])) - set(properties)
        if missing:
            raise TypeError(f"{path}: required names unknown properties {sorted(missing)}")
        for name, child in properties.items():
            check_schema(child, path=f"{path}/properties/{name}")
    if kind == "array":
        _check_array(schema, path=path)
    pattern = schema.get("pattern")
    if pattern is not None and not (pattern.startswith("^") and pattern.endswith("$")):
        raise TypeError(f"{path}: patterns must be anchored with ^ and $")


def _check_array(schema: dict[str, Any], *, path: str) -> None:
    items = schema.get("items")
    if not isinstance(items, dict):
        raise TypeError(f"{path}: an array needs items, the schema of every item")
    for key in ("minItems", "maxItems"):
        count = schema.get(key, 0)
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise TypeError(f"{path}: {key} must be a whole number, 0 or more")
    if schema.get("minItems", 0) > schema.get("maxItems", schema.get("minItems", 0)):
        raise TypeError(f"{path}: minItems is above maxItems")
    if not isinstance(schema.get("uniqueItems", False), bool):
        raise TypeError(f"{path}: uniqueItems must be true or false")
    check_schema(items, path=f"{path}/items")


def validate(schema: dict[str, Any], value: Any, *, path: str) -> None:
    """Raise InvalidArguments naming the first field (by path) that breaks schema."""
    kind = schema["type"]
    if kind == "object":
        _validate_object(schema, value, path=path)
    elif kind == "array":
        _validate_array(schema, value, path=path)
    elif kind == "string":
        _validate_string(schema, value, path=path)
    elif kind == "integer":
        _validate_integer(schema, value, path=path)
    elif not isinstance(value, bool):
        raise InvalidArguments(f"{path} must be a boolean", field=path)


def _validate_object(schema: dict[str, Any], value: Any, *, path: str) -> None:
    if not isinstance(value, dict):
        raise InvalidArguments(f"{path} must be an object", field=path)
    properties = schema.get("properties", {})
    for name in value:
        if name not in properties:
            raise InvalidArguments(f"{path}.{name} is not a known field", field=f"{path}.{name}")
    for name in schema.get("required", []):
        if name not in value:
            raise InvalidArguments(f"{path}.{name} is required", field=f"{path}.{name}")
    for name, child in properties.items():
        if name in value:
            validate(child, value[name], path=f"{path}.{name}")


def _validate_array(schema: dict[str, Any], value: Any, *, path: str) -> None:
    if not isinstance(value, list):
        raise InvalidArguments(f"{path} must be an array", field=path)
    if len(value) < schema.get("minItems", 0):
        raise InvalidArguments(f"{path} must have at least {schema['minItems']} items", field=path)
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        raise InvalidArguments(f"{path} must have at most {schema['maxItems']} items", field=path)
    for index, item in enumerate(value):
        validate(schema["items"], item, path=f"{path}[{index}]")
    if schema.get("uniqueItems"):
        seen: dict[bytes, int] = {}
        for index, item in enumerate(value):
            earlier = seen.setdefault(canonical_json(item), index)
            if earlier != index:
                raise InvalidArguments(
                    f"{path}[{index}] repeats {path}[{earlier}]; items must be unique",
                    field=f"{path}[{index}]",
                )


def _validate_string(schema: dict[str, Any], value: Any, *, path: str) -> None:
    if not isinstance(value, str):
        raise InvalidArguments(f"{path} must be a string", field=path)
    if len(value) < schema.get("minLength", 0):
        raise InvalidArguments(
            f"{path} must be at least {schema['minLength']} characters", field=path
        )
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        raise InvalidArguments(
            f"{path} must be at most {schema['maxLength']} characters", field=path
        )
    pattern = schema.get("pattern")
    # Anchors stripped and fullmatch used: Python's "$" would also accept a trailing newline.
    if pattern is not None and not re.fullmatch(pattern[1:-1], value):
        raise InvalidArguments(f"{path} must match {pattern}", field=path)
    if "enum" in schema and value not in schema["enum"]:
        raise InvalidArguments(f"{path} must be one of {schema['enum']}", field=path)


def _validate_integer(schema: dict[str, Any], value: Any, *, path: str) -> None:
    # JSON has no integer type of its own: refuse bools (ints in Python) and floats alike.
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArguments(f"{path} must be an integer", field=path)
    if "minimum" in schema and value < schema["minimum"]:
        raise InvalidArguments(f"{path} must be at least {schema['minimum']}", field=path)
    if "maximum" in schema and value > schema["maximum"]:
        raise InvalidArguments(f"{path} must be at most {schema['maximum']}", field=path)
    if "enum" in schema and value not in schema["enum"]:
        raise InvalidArguments(f"{path} must be one of {schema['enum']}", field=path)
