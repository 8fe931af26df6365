from __future__ import annotations

import enum
import hashlib
import json
import random
import unicodedata
from collections import OrderedDict
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from control.foundation.canonical import (
    canonical_json,
    content_hash,
    idempotency_key,
    intent_digest,
    jcs,
)
from control.foundation.strictjson import parse_strict

SAFE_INTEGER = 2**53 - 1


def test_canonical_json_matches_the_known_vector():
    value = {"b": 1, "a": [1, 2, {"d": True, "c": None}]}

    assert canonical_json(value) == b'{"a":[1,2,{"c":null,"d":true}],"b":1}'


def test_keys_sort_by_utf16_code_units_not_code_points():
    # RFC 8785 section 3.2.3: U+1F600 is the surrogate pair D83D DE00 in UTF-16, so it sorts
    # before U+FB33 although its code point is larger.
    value = {
        "\u20ac": "Euro Sign",
        "\r": "Carriage Return",
        "\ufb33": "Hebrew Letter Dalet With Dagesh",
        "1": "One",
        "\U0001f600": "Emoji: Grinning Face",
        "\u0080": "Control",
        "\u00f6": "Latin Small Letter O With Diaeresis",
    }

    keys_in_output = list(parse_strict(canonical_json(value)))

    assert keys_in_output == ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]


@pytest.mark.parametrize(
    ("number", "expected"),
    [
        pytest.param(1.0, b"1", id="integral-float-drops-fraction"),
        pytest.param(-0.0, b"0", id="negative-zero-loses-sign"),
        pytest.param(1e21, b"1e+21", id="exponent-from-1e21"),
        pytest.param(1e20, b"100000000000000000000", id="digits-below-1e21"),
        pytest.param(1e-7, b"1e-7", id="exponent-below-1e-6"),
        pytest.param(0.000001, b"0.000001", id="digits-from-1e-6"),
        pytest.param(0.1 + 0.2, b"0.30000000000000004", id="shortest-round-trip"),
        pytest.param(SAFE_INTEGER, b"9007199254740991", id="largest-safe-integer"),
        pytest.param(-SAFE_INTEGER, b"-9007199254740991", id="smallest-safe-integer"),
    ],
)
def test_numbers_serialize_as_ecmascript_does(number, expected):
    assert canonical_json(number) == expected


def test_strings_are_utf8_with_only_the_required_escapes():
    value = 'é😀\u2028"\\\n\x1f\x7f'

    assert canonical_json(value) == '"é😀\u2028\\"\\\\\\n\\u001f\x7f"'.encode()


def test_tuples_serialize_as_arrays():
    assert canonical_json((1, "a")) == canonical_json([1, "a"]) == b'[1,"a"]'


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(float("nan"), id="nan"),
        pytest.param(float("inf"), id="infinity"),
        pytest.param({"a": [float("-inf")]}, id="nested-minus-infinity"),
        pytest.param(2**53 + 1, id="integer-no-double-carries"),
        pytest.param({"a": [-(2**53) - 1]}, id="nested-negative-integer-no-double-carries"),
        pytest.param(10**21, id="integer-whose-double-is-written-1e21"),
        pytest.param(10**400, id="integer-beyond-the-largest-double"),
        pytest.param(10**5000, id="integer-beyond-str-conversion-limit"),
        pytest.param({1: "a"}, id="non-string-key"),
        pytest.param({"\ud800": 1}, id="lone-surrogate-key"),
        pytest.param(["\udc00"], id="lone-surrogate-value"),
        pytest.param({1, 2}, id="set"),
        pytest.param(Decimal("1.5"), id="decimal"),
        pytest.param(b"bytes", id="bytes"),
        pytest.param(OrderedDict(a=1).keys(), id="dict-view"),
    ],
)
def test_values_without_a_canonical_form_are_refused_with_value_error(value):
    with pytest.raises(ValueError, match="no canonical JSON form"):
        canonical_json(value)


@pytest.mark.parametrize(
    ("integer", "expected"),
    [
        pytest.param(2**53, b"9007199254740992", id="2-53"),
        pytest.param(10**16, b"10000000000000000", id="1e16"),
        pytest.param(-(10**17), b"-100000000000000000", id="minus-1e17"),
        # the shortest spelling of a double, not its exact binary value (...912)
        pytest.param(23424810432727910, b"23424810432727910", id="shortest-digits"),
        pytest.param(10**20, b"100000000000000000000", id="1e20"),
    ],
)
def test_integers_beyond_2_53_that_spell_their_double_are_accepted(integer, expected):
    # rfc8785 alone refuses every integer beyond +/-(2**53 - 1), yet writes such doubles as
    # plain digits: without this, canonical output read back by json could not be re-canonicalized.
    assert canonical_json(integer) == canonical_json(float(integer)) == expected


def test_canonical_output_with_a_wide_double_reads_back_and_canonicalizes_again():
    canonical = canonical_json({"amount": 1e16, "ids": [2.342481043272791e16]})

    read_back = parse_strict(canonical)

    assert read_back == {"amount": 10**16, "ids": [23424810432727910]}
    assert canonical_json(read_back) == canonical


def test_nesting_beyond_the_stack_is_refused_with_value_error():
    value: list[Any] = []
    for _ in range(100_000):
        value = [value]

    with pytest.raises(ValueError, match="nested too deeply"):
        canonical_json(value)


def test_intent_digest_hashes_the_canonical_tool_args_and_target():
    canonical = b'{"args":{"id":1,"reason":"done"},"target":"ticket-1","tool":"ticket.close"}'

    digest = intent_digest(tool="ticket.close", target="ticket-1", args={"reason": "done", "id": 1})

    assert digest == "sha256:" + hashlib.sha256(canonical).hexdigest()


def test_intent_digest_is_stable_under_key_order_and_whitespace_of_the_input():
    compact = parse_strict(b'{"reason":"done","meta":{"x":1,"y":[1,2]},"notify":true}')
    spaced = parse_strict(
        b'{\n  "notify" : true,\n  "meta" : { "y" : [ 1 , 2 ] , "x" : 1 },\n  "reason":"done"\n}'
    )
    assert list(compact) != list(spaced)

    assert intent_digest(tool="t", target="x", args=compact) == intent_digest(
        tool="t", target="x", args=spaced
    )


BASE_ARGS = {"reason": "done", "meta": {"x": 1, "tags": ["a", "b"]}, "notify": True}


@pytest.mark.parametrize(
    "changed",
    [
        pytest.param({"tool": "ticket.reopen"}, id="tool"),
        pytest.param({"target": "ticket-2"}, id="target"),
        pytest.param({"target": "ticket-1 "}, id="target-trailing-space"),
        pytest.param({"args": {**BASE_ARGS, "reason": "Done"}}, id="argument-value"),
        pytest.param({"args": {**BASE_ARGS, "extra": None}}, id="argument-added"),
        pytest.param({"args": {"reason": "done", "meta": BASE_ARGS["meta"]}}, id="arg-removed"),
        pytest.param({"args": {**BASE_ARGS, "meta": {"x": 2, "tags": ["a", "b"]}}}, id="nested"),
        pytest.param({"args": {**BASE_ARGS, "meta": {"x": 1, "tags": ["b", "a"]}}}, id="order"),
        pytest.param({"args": {**BASE_ARGS, "meta": {"x": "1", "tags": ["a", "b"]}}}, id="1-str"),
        pytest.param({"args": {**BASE_ARGS, "meta": {"x": True, "tags": ["a", "b"]}}}, id="true"),
        pytest.param({"args": {**BASE_ARGS, "notify": 1}}, id="true-vs-1"),
        pytest.param({"args": {**BASE_ARGS, "notify": None}}, id="true-vs-null"),
        pytest.param({"args": {**BASE_ARGS, "meta": {"X": 1, "tags": ["a", "b"]}}}, id="key-case"),
        pytest.param({"args": {**BASE_ARGS, "meta": {"x": 1, "tags": "a,b"}}}, id="list-vs-str"),
    ],
)
def test_intent_digest_changes_with_any_change_of_tool_target_or_args(changed):
    base = {"tool": "ticket.close", "target": "ticket-1", "args": BASE_ARGS}

    assert intent_digest(**{**base, **changed}) != intent_digest(**base)


def test_intent_digest_does_not_distinguish_numbers_json_considers_equal():
    # RFC 8785 writes every number as its shortest double: 1, 1.0 and 1e0 are all "1", and
    # -0.0 is "0". An agent re-sending 1.0 for 1 proposes the same intent.
    ones = [parse_strict(text) for text in (b'{"n":1}', b'{"n":1.0}', b'{"n":1e0}')]
    zeros = [{"n": 0}, {"n": -0.0}, {"n": 0.0}]

    assert len({intent_digest(tool="t", target="x", args=args) for args in ones}) == 1
    assert len({intent_digest(tool="t", target="x", args=args) for args in zeros}) == 1


def test_intent_digest_distinguishes_unicode_normalization_forms():
    composed = unicodedata.normalize("NFC", "café")
    decomposed = unicodedata.normalize("NFD", "café")

    assert intent_digest(tool="t", target="x", args={"text": composed}) != intent_digest(
        tool="t", target="x", args={"text": decomposed}
    )


def test_intent_digest_refuses_integers_beyond_double_precision():
    with pytest.raises(ValueError, match="no canonical JSON form"):
        intent_digest(tool="t", target="x", args={"id": 2**53 + 1})


def test_intent_digest_survives_a_json_round_trip_that_turns_wide_floats_into_ints():
    # PostgreSQL's jsonb stores 1e16 as the numeric 10000000000000000, which reads back as an
    # int: recomputing the digest from stored arguments must still give the same answer.
    args = parse_strict(b'{"amount":1e16,"ratio":0.5}')
    stored = json.loads('{"amount":10000000000000000,"ratio":0.5}')

    assert intent_digest(tool="t", target="x", args=stored) == intent_digest(
        tool="t", target="x", args=args
    )


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param({"tool": "t", "target": "x", "args": [1]}, id="args-list"),
        pytest.param({"tool": "t", "target": "x", "args": None}, id="args-none"),
        pytest.param({"tool": "t", "target": 1, "args": {}}, id="target-int"),
        pytest.param({"tool": None, "target": "x", "args": {}}, id="tool-none"),
    ],
)
def test_intent_digest_refuses_wrongly_typed_parts(arguments):
    with pytest.raises(TypeError):
        intent_digest(**arguments)


def test_idempotency_key_joins_its_parts_with_colons():
    key = idempotency_key(
        run_id="run-7", action_id="close-ticket~2", target="ticket-1", contract_version="1"
    )

    assert key == "run-7:close-ticket~2:ticket-1:1"


def test_idempotency_key_allows_colons_in_the_target():
    key = idempotency_key(
        run_id="r", action_id="a", target="https://desk.example:8443/t/1", contract_version="2"
    )

    assert key == "r:a:https://desk.example:8443/t/1:2"


def test_idempotency_key_allows_unicode_in_the_target():
    key = idempotency_key(run_id="r", action_id="a", target="ticket-é😀", contract_version="1")

    assert key == "r:a:ticket-é😀:1"


VALID_KEY_PARTS = {"run_id": "r", "action_id": "a", "target": "t", "contract_version": "1"}


@pytest.mark.parametrize("part", list(VALID_KEY_PARTS))
def test_idempotency_key_refuses_an_empty_part(part):
    with pytest.raises(ValueError, match=f"{part} must not be empty"):
        idempotency_key(**{**VALID_KEY_PARTS, part: ""})


@pytest.mark.parametrize("part", list(VALID_KEY_PARTS))
@pytest.mark.parametrize(
    "character",
    [
        pytest.param(" ", id="space"),
        pytest.param("\t", id="tab"),
        pytest.param("\n", id="newline"),
        pytest.param("\x00", id="nul"),
        pytest.param("\x7f", id="delete"),
        pytest.param("\x85", id="next-line"),
        pytest.param("\u00a0", id="no-break-space"),
        pytest.param("\u200b", id="zero-width-space"),
        pytest.param("\u2028", id="line-separator"),
        pytest.param("\ufeff", id="byte-order-mark"),
        pytest.param("\ud800", id="lone-surrogate"),
    ],
)
def test_idempotency_key_refuses_whitespace_and_control_characters(part, character):
    with pytest.raises(ValueError, match="whitespace or control characters"):
        idempotency_key(**{**VALID_KEY_PARTS, part: f"x{character}y"})


@pytest.mark.parametrize("part", ["run_id", "action_id", "contract_version"])
def test_idempotency_key_refuses_colons_outside_the_target(part):
    with pytest.raises(ValueError, match=f"{part} must not contain ':'"):
        idempotency_key(**{**VALID_KEY_PARTS, part: "a:b"})


def test_two_different_actions_can_never_share_an_idempotency_key():
    # Were colons allowed in action_id, both of these would be "r:a:b:t:1".
    colliding = {"run_id": "r", "action_id": "a:b", "target": "t", "contract_version": "1"}
    other = {"run_id": "r", "action_id": "a", "target": "b:t", "contract_version": "1"}

    with pytest.raises(ValueError, match="action_id must not contain"):
        idempotency_key(**colliding)
    assert idempotency_key(**other) == "r:a:b:t:1"


def test_idempotency_key_refuses_non_string_parts():
    with pytest.raises(TypeError, match="run_id must be a string"):
        idempotency_key(**{**VALID_KEY_PARTS, "run_id": 7})


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
        (b"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
    ],
)
def test_content_hash_is_prefixed_hex_sha256(data, expected):
    assert content_hash(data) == f"sha256:{expected}"


def test_content_hash_refuses_text():
    with pytest.raises(TypeError):
        content_hash("abc")


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-SAFE_INTEGER, max_value=SAFE_INTEGER)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(), children, max_size=6)
    ),
    max_leaves=40,
)


def reorder_keys(value: Any, shuffle: random.Random) -> Any:
    """The same JSON value with every object's keys in a random insertion order."""
    if isinstance(value, dict):
        items = list(value.items())
        shuffle.shuffle(items)
        return {key: reorder_keys(child, shuffle) for key, child in items}
    if isinstance(value, list):
        return [reorder_keys(child, shuffle) for child in value]
    return value


@given(value=json_values, shuffle=st.randoms(use_true_random=False))
def test_canonical_json_is_invariant_under_key_permutation(value, shuffle):
    reordered = reorder_keys(value, shuffle)

    assert canonical_json(reordered) == canonical_json(value)


@given(value=json_values)
def test_canonical_json_read_back_canonicalizes_to_the_same_bytes(value):
    canonical = canonical_json(value)

    assert canonical_json(parse_strict(canonical)) == canonical


narrow_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-SAFE_INTEGER, max_value=SAFE_INTEGER)
    | st.floats(min_value=-SAFE_INTEGER, max_value=SAFE_INTEGER)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(), children, max_size=6)
    ),
    max_leaves=40,
)


@given(value=narrow_json_values)
def test_canonical_json_reads_back_as_an_equal_value_within_double_precision(value):
    # Beyond 2**53 a double may read back as an int that differs from it in the last digits.
    assert parse_strict(canonical_json(value)) == value


class _Status(enum.StrEnum):
    SENT = "sent"


_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**60), max_value=2**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
    | st.sampled_from([_Status.SENT, "a\u2028b", '\x7f\x00\x1f"\\', "\ud7ff\ue000"])
)
_VALUES = st.recursive(
    _SCALARS,
    lambda children: (
        st.lists(children, max_size=4)
        | st.tuples(children, children)
        | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=20,
)


@given(_VALUES)
def test_the_fast_path_writes_what_the_reference_implementation_writes(value):
    """canonical_json takes the C encoder for values without floats, wide integers or
    non-ASCII keys: for every value, its bytes (or its refusal) are the reference's."""
    try:
        expected = jcs(value)
    except ValueError:
        with pytest.raises(ValueError, match="no canonical JSON form"):
            canonical_json(value)
        return
    assert canonical_json(value) == expected


def test_the_fast_path_refuses_a_lone_surrogate_as_the_reference_does():
    with pytest.raises(ValueError, match="no canonical JSON form"):
        canonical_json({"note": "\ud800"})
