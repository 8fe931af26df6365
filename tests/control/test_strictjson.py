from __future__ import annotations

import json
import math
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from control.foundation.strictjson import StrictJSONError, parse_strict


def deep_arrays(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


# (input, keyword arguments, expected rule, expected path)
REFUSALS = [
    # duplicate keys, at any depth; the path names the object holding them
    pytest.param(b'{"a":1,"a":2}', {}, "duplicate_key", "$", id="duplicate-top"),
    pytest.param(b'{"a":null,"a":null}', {}, "duplicate_key", "$", id="duplicate-same-value"),
    pytest.param(b'{"x":{"a":1,"b":2,"a":3}}', {}, "duplicate_key", "$.x", id="duplicate-nested"),
    pytest.param(b'[{},{"k":1,"k":1}]', {}, "duplicate_key", "$[1]", id="duplicate-in-array"),
    pytest.param(
        b'{"a":[{"b":{"c":{"d":1,"d":1}}}]}', {}, "duplicate_key", "$.a[0].b.c", id="duplicate-deep"
    ),
    pytest.param(b'{"a":1,"\\u0061":2}', {}, "duplicate_key", "$", id="duplicate-spelled-escaped"),
    pytest.param(
        b'{"a b":{"c.d":{"k":1,"k":2}}}', {}, "duplicate_key", '$["a b"]["c.d"]', id="quoted-path"
    ),
    # NaN and infinities, in every position
    pytest.param(b"NaN", {}, "non_finite_number", "$", id="nan-top"),
    pytest.param(b"[1,Infinity]", {}, "non_finite_number", "$[1]", id="infinity-in-array"),
    pytest.param(b'{"x":-Infinity}', {}, "non_finite_number", "$.x", id="minus-infinity"),
    pytest.param(b'{"a":{"b":[0,0,NaN]}}', {}, "non_finite_number", "$.a.b[2]", id="nan-deep"),
    # float literals that overflow to infinity
    pytest.param(b"1e400", {}, "number_overflow", "$", id="overflow-top"),
    pytest.param(b"-1e400", {}, "number_overflow", "$", id="negative-overflow"),
    pytest.param(b'{"a":[0,1.8e308]}', {}, "number_overflow", "$.a[1]", id="just-over-max-double"),
    pytest.param(b"[1" + b"0" * 400 + b".0]", {}, "number_overflow", "$[0]", id="long-float"),
    # integers longer than Python converts (sys.get_int_max_str_digits)
    pytest.param(b'{"n":' + b"9" * 5000 + b"}", {}, "number_overflow", "$.n", id="huge-integer"),
    # lone surrogates, escaped or (in str input) raw, in values and keys
    pytest.param(b'"\\ud800"', {}, "lone_surrogate", "$", id="lone-high-top"),
    pytest.param(b'["\\udfff"]', {}, "lone_surrogate", "$[0]", id="lone-low"),
    pytest.param(b'{"a":"x\\ud83dy"}', {}, "lone_surrogate", "$.a", id="high-without-low"),
    pytest.param(b'{"a":"\\ude00\\ud83d"}', {}, "lone_surrogate", "$.a", id="pair-reversed"),
    pytest.param(b'{"a":"\\uD800"}', {}, "lone_surrogate", "$.a", id="uppercase-escape"),
    pytest.param(b'{"\\ud800":1}', {}, "lone_surrogate", "$", id="in-key"),
    pytest.param(b'{"o":{"k\\udc00":1}}', {}, "lone_surrogate", "$.o", id="in-nested-key"),
    pytest.param('{"a":["ok","\ud800"]}', {}, "lone_surrogate", "$.a[1]", id="raw-in-str-input"),
    # anything but whitespace after the value
    pytest.param(b"{} {}", {}, "trailing_data", "$", id="second-object"),
    pytest.param(b"1 2", {}, "trailing_data", "$", id="second-number"),
    pytest.param(b"[1]]", {}, "trailing_data", "$", id="extra-bracket"),
    pytest.param(b"nullnull", {}, "trailing_data", "$", id="glued-literals"),
    pytest.param(b'"a"\x00', {}, "trailing_data", "$", id="nul-byte"),
    pytest.param(b"1\x0b", {}, "trailing_data", "$", id="vertical-tab-is-not-json-whitespace"),
    pytest.param("1\u00a0", {}, "trailing_data", "$", id="nbsp-is-not-json-whitespace"),
    # the stdlib reads "01" as 0 followed by "1"
    pytest.param(b"01", {}, "trailing_data", "$", id="leading-zero"),
    # nesting deeper than max_depth; the path names the first container too deep
    pytest.param(deep_arrays(65), {}, "too_deep", "$" + "[0]" * 64, id="arrays-65"),
    pytest.param(
        b'{"a":' * 65 + b"1" + b"}" * 65, {}, "too_deep", "$" + ".a" * 64, id="objects-65"
    ),
    pytest.param(
        b'{"a":[0,{"b":1}]}', {"max_depth": 2}, "too_deep", "$.a[1]", id="mixed-over-custom"
    ),
    pytest.param(
        b'[{"x":1},{"y":[],"z":[[]]}]', {"max_depth": 3}, "too_deep", "$[1].z[0]", id="sibling"
    ),
    pytest.param(b"[[]]", {"max_depth": 0}, "too_deep", "$", id="no-containers-allowed"),
    pytest.param(b"[" * 1_000_000, {}, "too_deep", "$" + "[0]" * 64, id="megabyte-unclosed"),
    # past the interpreter's recursion limit when the caller allows that depth
    pytest.param(
        deep_arrays(100_000), {"max_depth": 1_000_000}, "too_deep", "$", id="recursion-error"
    ),
    # size is checked before anything else, in UTF-8 bytes
    pytest.param(b" " * 11, {"max_bytes": 10}, "too_large", "$", id="bytes-over-limit"),
    pytest.param(b"\xff" * 11, {"max_bytes": 10}, "too_large", "$", id="before-utf8-check"),
    pytest.param(deep_arrays(20), {"max_bytes": 10}, "too_large", "$", id="before-depth-check"),
    pytest.param('"' + "é" * 5 + '"', {"max_bytes": 10}, "too_large", "$", id="str-counts-bytes"),
    pytest.param(b"1" * 1_000_001, {}, "too_large", "$", id="default-megabyte"),
    # bytes must be UTF-8
    pytest.param(b'"\xff"', {}, "invalid_utf8", "$", id="invalid-byte"),
    pytest.param(b'"\xc3"', {}, "invalid_utf8", "$", id="truncated-sequence"),
    pytest.param(b'"\xc0\xaf"', {}, "invalid_utf8", "$", id="overlong-encoding"),
    pytest.param(b'"\xed\xa0\x80"', {}, "invalid_utf8", "$", id="encoded-surrogate"),
    pytest.param('{"a":1}'.encode("utf-16"), {}, "invalid_utf8", "$", id="utf-16"),
    pytest.param(b"\xef\xbb\xbf{}", {}, "byte_order_mark", "$", id="bom-bytes"),
    pytest.param("\ufeff{}", {}, "byte_order_mark", "$", id="bom-str"),
    # everything else the grammar refuses
    pytest.param(b"", {}, "syntax", "$", id="empty"),
    pytest.param(b" \n\t", {}, "syntax", "$", id="only-whitespace"),
    pytest.param(b"{", {}, "syntax", "$", id="unclosed-object"),
    pytest.param(b'{"a" 1}', {}, "syntax", "$", id="missing-colon"),
    pytest.param(b"{'a':1}", {}, "syntax", "$", id="single-quotes"),
    pytest.param(b"[1,]", {}, "syntax", "$", id="trailing-comma-array"),
    pytest.param(b'{"a":1,}', {}, "syntax", "$", id="trailing-comma-object"),
    pytest.param(b'"\x01"', {}, "syntax", "$", id="raw-control-character"),
    pytest.param(b'"\\x41"', {}, "syntax", "$", id="invalid-escape"),
    pytest.param(b"nan", {}, "syntax", "$", id="lowercase-nan"),
    pytest.param(b"-NaN", {}, "syntax", "$", id="negative-nan"),
    pytest.param(b"+1", {}, "syntax", "$", id="plus-sign"),
    pytest.param(b".5", {}, "syntax", "$", id="bare-fraction"),
]


@pytest.mark.parametrize(("data", "options", "rule", "path"), REFUSALS)
def test_refused_input_names_its_rule_and_path(data, options, rule, path):
    with pytest.raises(StrictJSONError) as caught:
        parse_strict(data, **options)

    assert (caught.value.rule, caught.value.path) == (rule, path)
    assert str(caught.value).endswith(f" at {path}")


ACCEPTED = [
    pytest.param(b'{"a":{"b":{"c":[1,2,{"d":null}]}}}', {"a": {"b": {"c": [1, 2, {"d": None}]}}}),
    pytest.param(b"{}", {}, id="empty-object"),
    pytest.param(b"[]", [], id="empty-array"),
    pytest.param(b' \t\n\r{"a" : [ 1 , 2 ] }\r\n\t ', {"a": [1, 2]}, id="json-whitespace"),
    pytest.param(b"true", True, id="true"),
    pytest.param(b"false", False, id="false"),
    pytest.param(b"null", None, id="null"),
    pytest.param(b"1.5", 1.5, id="float"),
    pytest.param(b"1e-400", 0.0, id="underflow-to-zero"),
    pytest.param(b"1.7976931348623157e308", 1.7976931348623157e308, id="max-double"),
    pytest.param(
        b"123456789012345678901234567890", 123456789012345678901234567890, id="big-integer"
    ),
    pytest.param(b"-98765432109876543210", -98765432109876543210, id="big-negative-integer"),
    pytest.param('{"ключ":"значение","emoji":"😀"}'.encode(), {"ключ": "значение", "emoji": "😀"}),
    pytest.param(b'"\\ud83d\\ude00"', "😀", id="escaped-surrogate-pair"),
    pytest.param(b'"\\uD83D\\uDE00"', "😀", id="escaped-surrogate-pair-uppercase"),
    pytest.param(b'{"\\ud83d\\ude00":1}', {"😀": 1}, id="escaped-pair-in-key"),
    # an escaped backslash followed by "ud800" is text, not a surrogate
    pytest.param(b'"\\\\ud800"', "\\ud800", id="escaped-backslash-then-u"),
    pytest.param(b'"\\u0000"', "\x00", id="escaped-nul"),
    pytest.param(b'{"a":1,"A":2}', {"a": 1, "A": 2}, id="keys-differ-by-case"),
    pytest.param(b'["[[[[", "{{{{", "]]"]', ["[[[[", "{{{{", "]]"], id="brackets-in-strings"),
    pytest.param(b'"\\"[[[["', '"[[[[', id="brackets-after-escaped-quote"),
    pytest.param('{"a":[1,"x"]}', {"a": [1, "x"]}, id="str-input"),
    pytest.param(bytearray(b"[1]"), [1], id="bytearray-input"),
]


@pytest.mark.parametrize(("data", "expected"), ACCEPTED)
def test_valid_input_parses_to_the_expected_value(data, expected):
    assert parse_strict(data) == expected


def test_integers_stay_exact_python_ints():
    value = parse_strict(b"[9007199254740993, 1]")

    assert value == [9007199254740993, 1]
    assert all(type(item) is int for item in value)


def test_negative_zero_keeps_its_sign():
    value = parse_strict(b"-0.0")

    assert value == 0.0
    assert math.copysign(1.0, value) == -1.0


def test_object_keys_keep_document_order():
    assert list(parse_strict(b'{"b":1,"a":2,"c":3}')) == ["b", "a", "c"]


def test_nesting_exactly_at_max_depth_is_accepted():
    assert parse_strict(deep_arrays(64)) == parse_strict(deep_arrays(64), max_depth=64)
    assert parse_strict(b'{"a":{"b":[1]}}', max_depth=3) == {"a": {"b": [1]}}
    assert parse_strict(b"1", max_depth=0) == 1


def test_brackets_inside_strings_do_not_count_towards_depth():
    text = json.dumps(["[" * 100, "{" * 100, '\\"[[[[' * 10])

    assert parse_strict(text, max_depth=1) == ["[" * 100, "{" * 100, '\\"[[[[' * 10]


def test_input_exactly_at_max_bytes_is_accepted():
    assert parse_strict(b'"' + b"a" * 8 + b'"', max_bytes=10) == "a" * 8
    assert parse_strict('"éé"', max_bytes=6) == "éé"


def test_duplicate_key_error_reads_as_a_sentence():
    with pytest.raises(StrictJSONError) as caught:
        parse_strict(b'{"x":{"a":1,"a":2}}')

    assert str(caught.value) == 'duplicate key "a" at $.x'


def test_error_messages_quote_the_offending_literal():
    with pytest.raises(StrictJSONError) as overflow:
        parse_strict(b'{"a":1e400}')
    with pytest.raises(StrictJSONError) as non_finite:
        parse_strict(b"[-Infinity]")
    with pytest.raises(StrictJSONError) as surrogate:
        parse_strict(b'{"k\\udc00":1}')

    assert str(overflow.value) == "number 1e400 overflows a float at $.a"
    assert str(non_finite.value) == "non-finite number -Infinity at $[0]"
    # escaped again, so the message itself is valid UTF-8 and safe to log
    assert str(surrogate.value) == 'lone surrogate in key "k\\udc00" at $'
    str(surrogate.value).encode("utf-8")


def test_syntax_errors_say_where_in_the_text():
    with pytest.raises(StrictJSONError) as caught:
        parse_strict(b'{\n  "a" 1}')

    assert str(caught.value) == "syntax error: Expecting ':' delimiter (line 2, column 7) at $"


def test_trailing_data_error_gives_its_offset():
    with pytest.raises(StrictJSONError) as caught:
        parse_strict(b"[1]  x")

    assert str(caught.value) == "trailing data after the value (offset 5) at $"


def test_error_messages_stay_short_for_huge_keys():
    key = "k" * 100_000
    with pytest.raises(StrictJSONError) as caught:
        parse_strict(json.dumps({key: {key: 1, "x": 2}}).replace('"x"', f'"{key}"'))

    assert caught.value.rule == "duplicate_key"
    assert len(str(caught.value)) < 200


def test_the_first_refusal_in_document_order_is_reported():
    with pytest.raises(StrictJSONError) as caught:
        parse_strict(b'{"a":[1,{"b":NaN}],"c":1e400,"d":"\\ud800"}')

    assert (caught.value.rule, caught.value.path) == ("non_finite_number", "$.a[1].b")


def test_strict_json_error_is_a_value_error_that_survives_pickling():
    error = StrictJSONError("duplicate_key", 'duplicate key "a"', "$.x")

    copy = pickle.loads(pickle.dumps(error))

    assert isinstance(copy, ValueError)
    assert (copy.rule, copy.detail, copy.path, str(copy)) == (
        "duplicate_key",
        'duplicate key "a"',
        "$.x",
        'duplicate key "a" at $.x',
    )


@pytest.mark.parametrize("data", [None, 1, {"a": 1}, memoryview(b"1")])
def test_input_other_than_bytes_or_str_is_a_type_error(data):
    with pytest.raises(TypeError):
        parse_strict(data)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(), children, max_size=5)
    ),
    max_leaves=30,
)


@given(value=json_values, ensure_ascii=st.booleans())
def test_any_json_the_stdlib_writes_parses_back_to_the_same_value(value, ensure_ascii):
    # ensure_ascii writes astral characters as escaped surrogate pairs, which must be joined
    text = json.dumps(value, ensure_ascii=ensure_ascii)

    assert parse_strict(text) == value
    assert parse_strict(text.encode()) == value
