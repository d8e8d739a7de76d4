"""Java tag hashing and tag expressions (docs/protocol.md §0.2, §6.3, §9, §11.1)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiorocket._protocol.tags import (
    MATCH_ALL,
    TagFilter,
    java_hash,
    parse_tag_expression,
    tags_code,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # §9 common values.
        ("TagA", 2598919),
        ("TagB", 2598920),
        ("*", 42),
        ("TopicTest", -1902610879),
        ("", 0),
        # §11.1: Java hashes UTF-16 units (Go's UTF-8 hash would give -1853217173).
        ("标签", 857175),
        # The ali-ons heartbeat capture sends codeSet [3661, 3662] for "tA || tB".
        ("tA", 3661),
        ("tB", 3662),
        # A non-BMP character counts as its two surrogates: 0xD83D * 31 + 0xDE00.
        ("\U0001f600", 0xD83D * 31 + 0xDE00),
        # A lone surrogate is one code unit, as in a Java String.
        ("\ud800", 0xD800),
    ],
)
def test_java_hash_vectors(text: str, expected: int) -> None:
    assert java_hash(text) == expected


def test_java_hash_wraps_to_signed_32_bits() -> None:
    long_text = "x" * 1000
    value = java_hash(long_text)
    assert -(2**31) <= value < 2**31


def _reference_hash(text: str) -> int:
    """Java's definition written as a polynomial: sum(c[i] * 31 ** (n - 1 - i)) mod 2**32."""
    raw = text.encode("utf-16-be", "surrogatepass")
    units = [int.from_bytes(raw[i : i + 2], "big") for i in range(0, len(raw), 2)]
    n = len(units)
    total = sum(u * pow(31, n - 1 - i, 2**32) for i, u in enumerate(units)) % 2**32
    return total - 2**32 if total >= 2**31 else total


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=40))
def test_java_hash_matches_polynomial_definition(text: str) -> None:
    assert java_hash(text) == _reference_hash(text)


def test_tags_code() -> None:
    assert tags_code(None) == 0
    assert tags_code("") == 0
    assert tags_code("TagA") == 2598919
    # ali-ons sends untagged messages as TAGS=null (§11.1 item 16): the code is a real hash.
    assert tags_code("null") == java_hash("null") != 0


@pytest.mark.parametrize("expr", [None, "", "*", " * ", "   "])
def test_match_all_expressions(expr: str | None) -> None:
    f = parse_tag_expression(expr)
    assert f == TagFilter(MATCH_ALL, frozenset(), frozenset())
    assert f.match_all
    assert f.matches_tag(None)
    assert f.matches_tag("anything")
    assert f.matches_code(0)
    assert f.matches_code(12345)


def test_single_tag() -> None:
    f = parse_tag_expression("TagA")
    assert f.expression == "TagA"
    assert f.tags == frozenset({"TagA"})
    assert f.codes == frozenset({2598919})
    assert not f.match_all
    assert f.matches_tag("TagA")
    assert not f.matches_tag("TagB")
    assert not f.matches_tag(None)  # an untagged message does not match a tag subscription
    assert not f.matches_tag("")
    assert f.matches_code(2598919)
    assert not f.matches_code(0)


def test_or_expression_is_split_and_stripped() -> None:
    # The expression and sets of the ali-ons heartbeat capture.
    f = parse_tag_expression("tA || tB")
    assert f.expression == "tA || tB"
    assert f.tags == frozenset({"tA", "tB"})
    assert f.codes == frozenset({3661, 3662})
    assert f.matches_tag("tA")
    assert f.matches_tag("tB")
    assert not f.matches_tag("tA ")


def test_empty_parts_are_dropped() -> None:
    f = parse_tag_expression(" TagA ||  || TagB ||")
    assert f.tags == frozenset({"TagA", "TagB"})
    assert f.codes == frozenset({2598919, 2598920})


def test_separators_only_match_nothing() -> None:
    # FilterAPI keeps "||" as the subString, so the broker is not in match-all mode and the
    # empty code set lets nothing through.
    f = parse_tag_expression("||")
    assert f.expression == "||"
    assert not f.match_all
    assert f.tags == frozenset()
    assert not f.matches_tag("TagA")
    assert not f.matches_tag(None)
    assert not f.matches_code(0)


def test_star_inside_an_or_expression_is_a_literal_tag() -> None:
    f = parse_tag_expression("TagA || *")
    assert not f.match_all
    assert f.tags == frozenset({"TagA", "*"})
    assert f.matches_code(42)
    assert not f.matches_tag("TagB")


def test_single_pipe_is_part_of_a_tag() -> None:
    assert parse_tag_expression("a|b").tags == frozenset({"a|b"})


def test_filter_is_frozen_and_hashable() -> None:
    f = parse_tag_expression("TagA")
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.expression = "x"  # type: ignore[misc]
    assert hash(f) == hash(parse_tag_expression("TagA"))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(exclude_characters="|"), max_size=8), max_size=5))
def test_parse_agrees_with_filterapi_rules(parts: list[str]) -> None:
    expr = "||".join(parts)
    f = parse_tag_expression(expr)
    stripped = expr.strip()
    if stripped in ("", "*"):
        assert f.match_all
        return
    expected = {p.strip() for p in parts if p.strip()}
    assert f.tags == expected
    assert f.codes == {java_hash(t) for t in expected}
    for tag in expected:
        assert f.matches_tag(tag)
        assert f.matches_code(tags_code(tag))
