"""Boundaries of the JSON validator (dltune.schema) and of the escaping policy's inverse
(dltune.text.unescape): every bound at its edge, every problem in the words a user reads."""

from __future__ import annotations

import pytest

from dltune.fleet.node_files import ENVELOPE_SCHEMA
from dltune.schema import Field, of, optional, validate
from dltune.text import unescape, visible

# ----------------------------------------------------------------------------------------- text


@pytest.mark.parametrize(
    ("host", "shown", "raw"),
    [
        pytest.param("a\x7fb", "a\\x7fb", b"a\x7fb", id="DEL-the-last-ascii-escape"),
        pytest.param("a\udc80b", "a\\x80b", b"a\x80b", id="the-first-undecodable-byte"),
        pytest.param("a\udcffb", "a\\xffb", b"a\xffb", id="the-last-undecodable-byte"),
        pytest.param("a\x80b", "a\\u0080b", b"a\xc2\x80b", id="the-first-C1-control"),
        pytest.param("a\x9fb", "a\\u009fb", b"a\xc2\x9fb", id="the-last-C1-control"),
        pytest.param("a\ud800b", "a\\ud800b", b"a\xed\xa0\x80b", id="a-lone-surrogate"),
        pytest.param("x\udbffy\x85", "x\\udbffy\\u0085", b"x\xed\xaf\xbfy\xc2\x85", id="two-u-escapes"),
        pytest.param("caf\\xff", "caf\\\\xff", b"caf\\xff", id="a-backslash-that-looks-like-an-escape"),
    ],
)
def test_unescape_gives_back_the_bytes_visible_was_given(host: str, shown: str, raw: bytes) -> None:
    """``\\xNN`` is a byte (0x80 and up: undecodable, below: an ASCII control); ``\\uNNNN`` a code point
    (C1 control, lone surrogate) in UTF-8, surrogates passed through as the file system holds them."""
    assert visible(host) == shown
    assert unescape(shown) == raw


# ---------------------------------------------------------------------------------------- schema


@pytest.mark.parametrize(
    ("value", "spec", "problems"),
    [
        pytest.param(
            "x", of(int, float), ["$: an integer or a number expected, found a string"], id="two-kinds"
        ),
        pytest.param((1, 2), of(str), ["$: a string expected, found tuple"], id="a-type-json-has-not"),
        pytest.param("x", of(bytes), ["$: bytes expected, found a string"], id="a-kind-json-has-not"),
        pytest.param(
            "maybe",
            of(str, choices=("pass", "fail")),
            ["$: 'maybe' is not one of 'pass', 'fail'"],
            id="not-a-choice",
        ),
    ],
)
def test_a_value_of_the_wrong_kind_or_choice_names_what_was_expected(
    value: object, spec: Field, problems: list[str]
) -> None:
    assert validate(value, spec) == problems


BOUNDED = of(int, float, minimum=1, maximum=3)


@pytest.mark.parametrize(
    ("value", "problems"),
    [
        (0, ["$: 0 is below 1"]),
        (0.5, ["$: 0.5 is below 1"]),
        (1, []),
        (3, []),
        (3.0, []),
        (3.5, ["$: 3.5 is above 3"]),
        (4, ["$: 4 is above 3"]),
    ],
)
def test_numbers_at_their_bounds_pass_and_past_them_are_named(value: float, problems: list[str]) -> None:
    assert validate(value, BOUNDED) == problems


@pytest.mark.parametrize(
    ("value", "spec"),
    [
        pytest.param("abc", of(int, str, minimum=5), id="a-string-beside-a-bounded-number"),
        pytest.param(False, of(bool, int, minimum=1), id="a-boolean-is-no-number"),
        pytest.param(True, of(bool, int, maximum=0), id="true-is-no-number-either"),
    ],
)
def test_only_numbers_are_held_to_a_minimum_or_maximum(value: object, spec: Field) -> None:
    assert validate(value, spec) == []


@pytest.mark.parametrize(
    ("value", "problems"),
    [("abc", []), ("abcd", ["$: longer than 3"]), ([1, 2, 3], []), ([1, 2, 3, 4], ["$: longer than 3"])],
)
def test_a_length_at_the_limit_passes_and_one_more_is_too_long(value: object, problems: list[str]) -> None:
    assert validate(value, of(str, list, max_length=3)) == problems


def test_every_bad_item_of_a_list_is_named_by_its_index() -> None:
    spec = of(list, items=of(int), max_length=2)
    assert validate(["a", 1, "b"], spec) == [
        "$: longer than 2",
        "$[0]: an integer expected, found a string",
        "$[2]: an integer expected, found a string",
    ]


def test_every_bad_value_of_an_object_without_named_keys_is_named_by_its_key() -> None:
    """A real schema: an audit envelope whose result carries metrics that are not numbers."""
    envelope = {
        "schema_version": 0,
        "results": [
            {
                "id": "gpu.ecc",
                "area": "gpu",
                "status": "fail",
                "summary": "s",
                "metrics": {"a": "1", "b": 2, "c": None},
            }
        ],
    }
    assert validate(envelope, ENVELOPE_SCHEMA) == [
        "$.schema_version: 0 is below 1",
        "$.results[0].metrics.a: an integer or a number expected, found a string",
        "$.results[0].metrics.c: an integer or a number expected, found null",
    ]


@pytest.mark.parametrize(
    ("value", "problems"),
    [
        ({}, []),
        ({"size": 2}, []),
        ({"size": -1}, ["$.size: -1 is below 0"]),
        ({"size": "big"}, ["$.size: an integer expected, found a string"]),
    ],
)
def test_an_optional_key_may_be_absent_but_is_judged_when_present(
    value: dict[str, object], problems: list[str]
) -> None:
    assert validate(value, of(dict, keys={"size": optional(int, minimum=0)})) == problems


def test_optional_is_the_field_with_required_false() -> None:
    assert optional(int, str, minimum=0) == Field((int, str), required=False, minimum=0)
    assert of(int) == Field((int,), required=True)
