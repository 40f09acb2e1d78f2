"""Topic names and patterns: the checks, a table of names x patterns, properties against
reference matchers written here (word by word, and a regex), with no trie, and the bounds that
keep a publish cheap whatever the patterns: linear matching and at most ``MAX_WORDS`` words."""

from __future__ import annotations

import inspect
import re
import sys
import time
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import varmq
from varmq.contract.topic_names import (
    MAX_WORDS,
    PatternTrie,
    check_name,
    check_pattern,
    copy_id,
    matches,
)


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


# -- bounds: linear matching, at most MAX_WORDS words -------------------------------------------

# Patterns whose "#" words a backtracking matcher retries in every combination: the first took
# 14 s against 50 words "a" before the trie remembered where each "#" had been tried from, and
# grows roughly with the sixth power of the words; these tests use 200.
PATHOLOGICAL = [
    "#.a.#.a.#.a.#.a.#.a.#.a.#.b",
    ".".join(["#.a"] * 20) + ".b",
    ".".join(["#.a"] * 20) + ".#.b.#",
    ".".join(["#.*"] * 20) + ".b",
]
# The same shapes that do match ``a.a. ... .a``.
PATHOLOGICAL_MATCHING = [
    "#.a.#.a.#.a.#.a.#.a.#.a",
    ".".join(["#.a"] * 20),
    ".".join(["#.a"] * 20) + ".#",
    ".".join(["#.*"] * 20),
]
# Generous for a busy 2-core machine: each match below takes milliseconds.
SECONDS = 1.0


def _timed_trie_match(patterns: Sequence[str], name: str) -> tuple[list[str], float]:
    trie: PatternTrie[str] = PatternTrie()
    for pattern in patterns:
        trie.add(check_pattern(pattern), pattern)
    words = check_name(name)
    start = time.perf_counter()
    got = trie.match(words)
    return got, time.perf_counter() - start


@pytest.mark.parametrize("pattern", PATHOLOGICAL + PATHOLOGICAL_MATCHING)
def test_a_pattern_of_many_hashes_matches_a_long_name_in_linear_time(pattern: str) -> None:
    name = ".".join(["a"] * 200)
    expected = [pattern] if pattern in PATHOLOGICAL_MATCHING else []
    got, seconds = _timed_trie_match([pattern], name)
    assert got == expected
    assert seconds < SECONDS, f"trie.match took {seconds:.2f}s"
    start = time.perf_counter()
    assert matches(check_pattern(pattern), check_name(name)) == bool(expected)
    assert time.perf_counter() - start < SECONDS


def test_every_pathological_pattern_at_once_matches_a_name_ending_in_b_in_linear_time() -> None:
    patterns = PATHOLOGICAL + PATHOLOGICAL_MATCHING
    name = ".".join(["a"] * 199 + ["b"])
    got, seconds = _timed_trie_match(patterns, name)
    # Each has at most 41 words before a last "b", "*" or "#": only those ending in "a" fail.
    assert got == [p for p in patterns if not p.endswith(".a")]
    assert seconds < SECONDS, f"trie.match took {seconds:.2f}s"


def test_the_longest_pattern_against_the_longest_name_is_matched_in_linear_time() -> None:
    pattern = ".".join(["#", "a"] * (MAX_WORDS // 2 - 1) + ["#", "b"])
    name = ".".join(["a"] * MAX_WORDS)
    got, seconds = _timed_trie_match([pattern], name)
    assert got == []
    assert seconds < SECONDS, f"trie.match took {seconds:.2f}s"


def test_a_publish_to_a_pathological_subscription_returns_promptly() -> None:
    topics = varmq.new_topics()
    subscriptions = [topics.subscribe(p, max_pending=10) for p in PATHOLOGICAL]
    start = time.perf_counter()
    assert topics.publish(".".join(["a"] * 200), 1) == 0
    assert time.perf_counter() - start < SECONDS
    assert all(s.get(0) is None for s in subscriptions)


def test_the_trie_needs_no_stack_depth_for_a_long_name() -> None:
    # The trie used to recurse once per "*" matched: a name of MAX_WORDS words then needed as
    # many frames. Here only a few frames are left above the caller.
    pattern = ".".join(["*"] * (MAX_WORDS - 1) + ["#"])
    trie: PatternTrie[str] = PatternTrie()
    trie.add(check_pattern(pattern), pattern)
    trie.add(check_pattern("#.a.#"), "#.a.#")
    name = check_name(".".join(["a"] * MAX_WORDS))
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack(0)) + 50)
    try:
        got = trie.match(name)
    finally:
        sys.setrecursionlimit(limit)
    assert got == [pattern, "#.a.#"]


def test_a_name_or_pattern_of_max_words_is_accepted() -> None:
    assert len(check_name(".".join(["a"] * MAX_WORDS))) == MAX_WORDS
    assert len(check_pattern(".".join(["#"] * MAX_WORDS))) == MAX_WORDS


@pytest.mark.parametrize("count", [MAX_WORDS + 1, 1200])
def test_a_name_or_pattern_of_too_many_words_raises_value_error_naming_the_limit(
    count: int,
) -> None:
    says = f"has {count} words; at most {MAX_WORDS}"
    with pytest.raises(ValueError, match="topic name") as caught:
        check_name(".".join(["a"] * count))
    assert says in str(caught.value)
    with pytest.raises(ValueError, match="topic pattern") as caught:
        check_pattern(".".join(["#.a"] * (count // 2) + ["b"] * (count % 2)))
    assert says in str(caught.value)


def test_a_1200_word_publish_or_subscribe_raises_value_error_not_recursion_error() -> None:
    topics = varmq.new_topics()
    topics.subscribe("#.a.#", max_pending=10)
    name = ".".join(["a"] * 1200)
    says = f"has 1200 words; at most {MAX_WORDS}"
    with pytest.raises(ValueError, match="topic name") as caught:
        topics.publish(name, 1)
    assert says in str(caught.value)
    with pytest.raises(ValueError, match="topic name") as caught:
        topics.publish(name, 1, message_id="m")
    assert says in str(caught.value)
    with pytest.raises(ValueError, match="topic pattern") as caught:
        topics.subscribe(name)
    assert says in str(caught.value)


def reference_regex(pattern: Sequence[str]) -> re.Pattern[str]:
    """The pattern as a regex over ``"." + name``, written apart from the trie: ``*`` is one
    word ``\\.[^.]+``, ``#`` any number of them (``re`` keeps the compiled ones)."""
    parts = []
    for word in pattern:
        if word == "#":
            parts.append(r"(?:\.[^.]+)*")
        elif word == "*":
            parts.append(r"\.[^.]+")
        else:
            parts.append(r"\." + re.escape(word))
    return re.compile("".join(parts))


def _regex_match(pattern: Sequence[str], name: Sequence[str]) -> bool:
    return reference_regex(pattern).fullmatch("." + ".".join(name)) is not None


tiny_words = st.sampled_from(["a", "b"])
tiny_pattern_words = st.sampled_from(["a", "b", "*", "#"])


@settings(max_examples=500, deadline=None)
@given(
    patterns=st.lists(st.lists(tiny_pattern_words, min_size=1, max_size=9), min_size=1, max_size=8),
    name=st.lists(tiny_words, min_size=1, max_size=12),
)
def test_the_trie_and_matches_give_the_regex_answer_for_many_hashes_over_a_tiny_alphabet(
    patterns: list[list[str]], name: list[str]
) -> None:
    trie: PatternTrie[int] = PatternTrie()
    for value, pattern in enumerate(patterns):
        trie.add(check_pattern(".".join(pattern)), value)
    expected = [v for v, p in enumerate(patterns) if _regex_match(p, name)]
    assert trie.match(check_name(".".join(name))) == expected
    assert [v for v, p in enumerate(patterns) if matches(p, name)] == expected
    assert [v for v, p in enumerate(patterns) if reference_match(p, name)] == expected
