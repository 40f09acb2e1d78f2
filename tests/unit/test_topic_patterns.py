"""Topic names and patterns: the checks, a table of names x patterns, and a property against a
reference matcher written here, word by word, with no trie."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import varmq
from varmq.contract.topic_names import PatternTrie, check_name, check_pattern, copy_id, matches


def reference_match(pattern: Sequence[str], name: Sequence[str]) -> bool:
    """``*`` is exactly one word, ``#`` zero or more; everything else matches itself."""
    if not pattern:
        return not name
    head, rest = pattern[0], pattern[1:]
    if head == "#":
        return any(reference_match(rest, name[i:]) for i in range(len(name) + 1))
    if not name:
        return False
    return (head == "*" or head == name[0]) and reference_match(rest, name[1:])


NAMES = [
    "orders",
    "orders.eu",
    "orders.eu.created",
    "orders.us.created",
    "orders.eu.created.late",
    "payments.eu.created",
    "created",
]
TABLE = {
    "orders.*.created": {"orders.eu.created", "orders.us.created"},
    "orders.#": {
        "orders",
        "orders.eu",
        "orders.eu.created",
        "orders.us.created",
        "orders.eu.created.late",
    },
    "#": set(NAMES),
    "*": {"orders", "created"},
    "*.*": {"orders.eu"},
    "#.created": {"orders.eu.created", "orders.us.created", "payments.eu.created", "created"},
    "orders.#.created": {"orders.eu.created", "orders.us.created"},
    "orders.eu.#": {"orders.eu", "orders.eu.created", "orders.eu.created.late"},
    "orders.eu": {"orders.eu"},
    "*.eu.*": {"orders.eu.created", "payments.eu.created"},
    "#.#": set(NAMES),
    "orders.*": {"orders.eu"},
    "#.eu.#": {"orders.eu", "orders.eu.created", "orders.eu.created.late", "payments.eu.created"},
    "Orders.#": set(),
}


@pytest.mark.parametrize("pattern", list(TABLE))
def test_pattern_matches_exactly_the_names_of_the_table(pattern: str) -> None:
    got = {name for name in NAMES if matches(check_pattern(pattern), check_name(name))}
    assert got == TABLE[pattern]


def test_a_trie_of_every_pattern_gives_each_name_the_patterns_of_the_table_in_add_order() -> None:
    trie: PatternTrie[str] = PatternTrie()
    for pattern in TABLE:
        trie.add(check_pattern(pattern), pattern)
    for name in NAMES:
        assert trie.match(check_name(name)) == [p for p in TABLE if name in TABLE[p]]


def test_a_removed_pattern_no_longer_matches_and_the_others_still_do() -> None:
    trie: PatternTrie[str] = PatternTrie()
    for pattern in ("orders.#", "orders.*.created", "#"):
        trie.add(check_pattern(pattern), pattern)
    assert trie.remove(check_pattern("orders.#"), "orders.#")
    assert not trie.remove(check_pattern("orders.#"), "orders.#")
    assert trie.match(check_name("orders.eu.created")) == ["orders.*.created", "#"]
    assert trie.remove(check_pattern("orders.*.created"), "orders.*.created")
    assert trie.remove(check_pattern("#"), "#")
    assert not trie


BAD_NAMES = [
    ("", "is empty"),
    ("orders..created", "empty word (word 2)"),
    (".orders", "empty word (word 1)"),
    ("orders.", "empty word (word 2)"),
    ("orders.*", "word 2 ('*') holds a wildcard"),
    ("orders.#", "word 2 ('#') holds a wildcard"),
    ("orders.eu#", "word 2 ('eu#') holds a wildcard"),
    ("a\udcffb", "not valid Unicode"),
]


@pytest.mark.parametrize(("name", "says"), BAD_NAMES)
def test_a_bad_name_raises_value_error_naming_the_offending_part(name: str, says: str) -> None:
    with pytest.raises(ValueError, match="topic name") as caught:
        check_name(name)
    assert says in str(caught.value)


BAD_PATTERNS = [
    ("", "is empty"),
    ("orders..#", "empty word (word 2)"),
    ("orders.#x", "word 2 ('#x') mixes a wildcard"),
    ("orders.e*", "word 2 ('e*') mixes a wildcard"),
    ("**", "word 1 ('**') mixes a wildcard"),
    ("##.a", "word 1 ('##') mixes a wildcard"),
]


@pytest.mark.parametrize(("pattern", "says"), BAD_PATTERNS)
def test_a_bad_pattern_raises_value_error_naming_the_offending_part(
    pattern: str, says: str
) -> None:
    with pytest.raises(ValueError, match="topic pattern") as caught:
        check_pattern(pattern)
    assert says in str(caught.value)


@pytest.mark.parametrize("value", [None, 3, b"orders", ["orders"]])
def test_a_name_or_pattern_that_is_not_a_str_raises_value_error(value: object) -> None:
    with pytest.raises(ValueError, match="must be a str"):
        check_name(value)
    with pytest.raises(ValueError, match="must be a str"):
        check_pattern(value)


def test_publish_and_subscribe_check_names_and_patterns() -> None:
    topics = varmq.new_topics()
    with pytest.raises(ValueError, match=r"topic pattern 'a\.\*b'"):
        topics.subscribe("a.*b")
    with pytest.raises(ValueError, match=r"topic name 'a\.\*'"):
        topics.publish("a.*", 1)
    with pytest.raises(ValueError, match="must be a str"):
        topics.publish(["a"], 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="topic name"):
        topics.publish("a..b", 1, message_id="m")


def test_the_copy_id_joins_the_message_id_and_the_queue_name() -> None:
    assert copy_id("order-1", "billing") == "order-1@billing"


words = st.sampled_from(["a", "b", "c"])
pattern_words = st.sampled_from(["a", "b", "*", "#"])


@settings(max_examples=400, deadline=None)
@given(
    patterns=st.lists(st.lists(pattern_words, min_size=1, max_size=5), min_size=1, max_size=6),
    name=st.lists(words, min_size=1, max_size=6),
)
def test_the_trie_matches_what_the_reference_matcher_matches(
    patterns: list[list[str]], name: list[str]
) -> None:
    trie: PatternTrie[int] = PatternTrie()
    values = list(range(len(patterns)))
    for value, pattern in zip(values, patterns, strict=True):
        trie.add(check_pattern(".".join(pattern)), value)
    expected = [v for v, p in zip(values, patterns, strict=True) if reference_match(p, name)]
    assert trie.match(check_name(".".join(name))) == expected


@settings(max_examples=200, deadline=None)
@given(
    pattern=st.lists(pattern_words, min_size=1, max_size=5),
    names=st.lists(st.lists(words, min_size=1, max_size=5), min_size=1, max_size=8),
)
def test_a_subscriber_receives_what_the_reference_matcher_matches(
    pattern: list[str], names: list[list[str]]
) -> None:
    topics = varmq.new_topics()
    subscription = topics.subscribe(".".join(pattern), max_pending=100)
    for name in names:
        topics.publish(".".join(name), None)
    got = []
    while (message := subscription.get(0)) is not None:
        got.append(message.name)
    assert got == [".".join(n) for n in names if reference_match(pattern, n)]


@settings(max_examples=400, deadline=None)
@given(
    pattern=st.lists(pattern_words, min_size=1, max_size=6),
    name=st.lists(words, min_size=1, max_size=6),
)
def test_matches_agrees_with_the_reference_matcher(pattern: list[str], name: list[str]) -> None:
    assert matches(pattern, name) == reference_match(pattern, name)
