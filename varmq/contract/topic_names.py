"""Topic names and patterns: the checks every topic applies, and matching one name against many
patterns at once.

A *name* is one or more dot-separated words (``orders.eu.created``). A *pattern* is the same,
where a word may also be ``*`` (exactly one word) or ``#`` (zero or more words): ``orders.*``,
``orders.#``, ``#.created``, ``#``. A word is never empty and never holds ``*`` or ``#`` next
to other characters. Matching is by whole words and case-sensitive.

:class:`PatternTrie` holds many patterns in one tree of words, so a publish walks the name's
words once instead of trying every pattern in turn (the benchmark in ``benchmarks/topics.py``
compares the two). No I/O and no locks here: the owner of a trie guards it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Generic, Literal, TypeVar, get_args

__all__ = [
    "ON_FULL",
    "OnFull",
    "PatternTrie",
    "check_name",
    "check_pattern",
    "copy_id",
    "matches",
]

OnFull = Literal["block", "drop_oldest", "drop_newest"]
"""What a subscriber whose buffer is full does with the next copy."""
ON_FULL: tuple[str, ...] = get_args(OnFull)

V = TypeVar("V")


def _words(kind: str, text: object) -> list[str]:
    if not isinstance(text, str):
        raise ValueError(
            f"varmq: a topic {kind} must be a str of dot-separated words, got {text!r} "
            f"({type(text).__name__})"
        )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"varmq: topic {kind} {text!r} is not valid Unicode text") from None
    words = text.split(".")
    for index, word in enumerate(words):
        if not word:
            where = "is empty" if len(words) == 1 else f"has an empty word (word {index + 1})"
            raise ValueError(
                f"varmq: topic {kind} {text!r} {where}; words are separated by single dots"
            )
    return words


def check_name(name: object) -> tuple[str, ...]:
    """The words of the topic name ``name``; ``ValueError`` naming the offending part.

    A name has no wildcards: ``*`` and ``#`` belong to patterns.
    """
    words = _words("name", name)
    for index, word in enumerate(words):
        if "*" in word or "#" in word:
            raise ValueError(
                f"varmq: topic name {name!r}: word {index + 1} ({word!r}) holds a wildcard; "
                "names are published to, patterns (with * and #) are subscribed to"
            )
    return tuple(words)


def check_pattern(pattern: object) -> tuple[str, ...]:
    """The words of the topic pattern ``pattern``; ``ValueError`` naming the offending part."""
    words = _words("pattern", pattern)
    for index, word in enumerate(words):
        if word not in ("*", "#") and ("*" in word or "#" in word):
            raise ValueError(
                f"varmq: topic pattern {pattern!r}: word {index + 1} ({word!r}) mixes a "
                "wildcard with other characters; * and # stand alone between dots"
            )
    return tuple(words)


def matches(pattern: Sequence[str], name: Sequence[str]) -> bool:
    """Whether the checked ``pattern`` words match the checked ``name`` words (one pattern;
    :class:`PatternTrie` matches many at once)."""
    # reach[j]: the first j words of the name are matched by the pattern words seen so far.
    reach = [True] + [False] * len(name)
    for word in pattern:
        if word == "#":
            for j in range(1, len(reach)):
                reach[j] = reach[j] or reach[j - 1]
        else:
            for j in range(len(reach) - 1, 0, -1):
                reach[j] = reach[j - 1] and (word == "*" or word == name[j - 1])
            reach[0] = False
    return reach[-1]


def copy_id(message_id: str, queue: str) -> str:
    """The job id of the copy of message ``message_id`` routed into the queue ``queue``.

    Every publisher (in any process, and every storage topic) derives it the same way, so that
    a queue's dedup stores a retried publish once: ``"<message_id>@<queue>"``.
    """
    return f"{message_id}@{queue}"


def _collapsed(pattern: Sequence[str]) -> tuple[str, ...]:
    """``pattern`` with each run of ``#`` words as one: ``a.#.#`` matches what ``a.#`` does,
    and the trie walks one ``#`` in polynomial time, never a run of them."""
    words: list[str] = []
    for word in pattern:
        if not (word == "#" and words and words[-1] == "#"):
            words.append(word)
    return tuple(words)


class _Node(Generic[V]):
    """One word position of the trie: literal children, the ``*`` and ``#`` children, and the
    values of the patterns that end here (in the order they were added)."""

    __slots__ = ("hash", "star", "values", "words")

    def __init__(self) -> None:
        self.words: dict[str, _Node[V]] = {}
        self.star: _Node[V] | None = None
        self.hash: _Node[V] | None = None  # its children follow the "#": no "#" child itself
        self.values: list[V] = []

    def child(self, word: str) -> _Node[V]:
        if word == "*":
            if self.star is None:
                self.star = _Node()
            return self.star
        if word == "#":
            if self.hash is None:
                self.hash = _Node()
            return self.hash
        node = self.words.get(word)
        if node is None:
            node = self.words[word] = _Node()
        return node

    def empty(self) -> bool:
        return not (self.words or self.star or self.hash or self.values)


def _walk(node: _Node[V], name: Sequence[str], at: int, size: int, found: list[V]) -> None:
    """Add to ``found`` the values of the patterns below ``node`` that match ``name[at:]``."""
    while True:
        hashed = node.hash
        if hashed is not None:  # "#" takes 0, 1, ... of the words left
            for taken in range(at, size + 1):
                _walk(hashed, name, taken, size, found)
        if at == size:
            found.extend(node.values)
            return
        if node.star is not None:
            _walk(node.star, name, at + 1, size, found)
        literal = node.words.get(name[at])
        if literal is None:
            return
        node, at = literal, at + 1


class PatternTrie(Generic[V]):
    """Patterns in a tree of words, each pattern with its values: :meth:`match` gives the values
    of every pattern that matches a name, each value once, in the order they were added."""

    __slots__ = ("_next_rank", "_order", "_root")

    def __init__(self) -> None:
        self._root: _Node[V] = _Node()
        self._order: dict[int, int] = {}  # id(value) -> rank of its first add
        self._next_rank = 0

    def add(self, pattern: Sequence[str], value: V) -> None:
        """Add ``value`` under the checked ``pattern`` words."""
        node = self._root
        for word in _collapsed(pattern):
            node = node.child(word)
        node.values.append(value)
        if id(value) not in self._order:
            self._order[id(value)] = self._next_rank
            self._next_rank += 1

    def remove(self, pattern: Sequence[str], value: V) -> bool:
        """Remove ``value`` from under ``pattern``; whether it was there."""
        pattern = _collapsed(pattern)
        path = [self._root]
        for word in pattern:
            node = path[-1]
            nxt = node.star if word == "*" else node.hash if word == "#" else node.words.get(word)
            if nxt is None:
                return False
            path.append(nxt)
        end = path[-1]
        for index, held in enumerate(end.values):
            if held is value:
                del end.values[index]
                break
        else:
            return False
        if not any(value is v for v in self._values()):
            self._order.pop(id(value), None)
        for depth in range(len(pattern), 0, -1):  # prune the branches left empty
            node, parent, word = path[depth], path[depth - 1], pattern[depth - 1]
            if not node.empty():
                break
            if word == "*":
                parent.star = None
            elif word == "#":
                parent.hash = None
            else:
                del parent.words[word]
        return True

    def _values(self) -> Iterable[V]:
        stack = [self._root]
        while stack:
            node = stack.pop()
            yield from node.values
            stack.extend(node.words.values())
            stack.extend(n for n in (node.star, node.hash) if n is not None)

    def match(self, name: Sequence[str]) -> list[V]:
        """The values of every pattern matching the checked ``name`` words, each once, in the
        order they were first added."""
        found: list[V] = []
        _walk(self._root, name, 0, len(name), found)
        if len(found) < 2:
            return found
        unique = {id(value): value for value in found}  # "#" may reach a value twice
        order = self._order
        return sorted(unique.values(), key=lambda value: order[id(value)])

    def __bool__(self) -> bool:
        return not self._root.empty()
