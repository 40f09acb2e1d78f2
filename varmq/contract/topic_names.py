"""Topic names and patterns: the checks every topic applies, and matching one name against many
patterns at once.

A *name* is one or more dot-separated words (``orders.eu.created``). A *pattern* is the same,
where a word may also be ``*`` (exactly one word) or ``#`` (zero or more words): ``orders.*``,
``orders.#``, ``#.created``, ``#``. A word is never empty and never holds ``*`` or ``#`` next
to other characters. Matching is by whole words and case-sensitive. A name or a pattern has
at most :data:`MAX_WORDS` words.

:class:`PatternTrie` holds many patterns in one tree of words, so a publish walks the name's
words once instead of trying every pattern in turn (the benchmark in ``benchmarks/topics.py``
compares the two). Matching takes time linear in the name's words times the trie's (or the
pattern's) words, whatever the wildcards: a ``#`` is never retried from a position it already
covered, so a pattern such as ``#.a.#.a.#.a.#.b`` cannot make a publish backtrack
exponentially. No recursion either, so the name's length never meets Python's recursion limit.
No I/O and no locks here: the owner of a trie guards it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Generic, Literal, TypeVar, get_args

__all__ = [
    "MAX_WORDS",
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

MAX_WORDS = 256
"""The most words a topic name or pattern may have: a bound on the work of one publish (its
matching is linear in the name's words) and on what a subscriber can make every publish do."""


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
    count = text.count(".") + 1  # counted before splitting, so a huge text is not split
    if count > MAX_WORDS:
        shown = text if len(text) <= 40 else text[:40] + "..."
        raise ValueError(
            f"varmq: topic {kind} {shown!r} has {count} words; at most {MAX_WORDS} "
            "(varmq.contract.topic_names.MAX_WORDS)"
        )
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
    :class:`PatternTrie` matches many at once). Time: pattern words x name words."""
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
    and a ``#`` node of the trie then never has a ``#`` child (:meth:`PatternTrie.match`
    relies on it)."""
    words: list[str] = []
    for word in pattern:
        if not (word == "#" and words and words[-1] == "#"):
            words.append(word)
    return tuple(words)


class _Node(Generic[V]):
    """One word position of the trie: literal children, the ``*`` and ``#`` children, and the
    values of the patterns that end here (in the order they were added)."""

    __slots__ = ("after_hash", "hash", "star", "values", "words")

    def __init__(self, after_hash: bool) -> None:
        self.words: dict[str, _Node[V]] = {}
        self.star: _Node[V] | None = None
        self.hash: _Node[V] | None = None  # its children follow the "#": no "#" child itself
        self.values: list[V] = []
        # A "#" on the path from the root to here, this node's own included: only then can a
        # match reach this node after more than one number of words.
        self.after_hash = after_hash

    def child(self, word: str) -> _Node[V]:
        if word == "*":
            if self.star is None:
                self.star = _Node(self.after_hash)
            return self.star
        if word == "#":
            if self.hash is None:
                self.hash = _Node(True)
            return self.hash
        node = self.words.get(word)
        if node is None:
            node = self.words[word] = _Node(self.after_hash)
        return node

    def empty(self) -> bool:
        return not (self.words or self.star or self.hash or self.values)


class PatternTrie(Generic[V]):
    """Patterns in a tree of words, each pattern with its values: :meth:`match` gives the values
    of every pattern that matches a name, each value once, in the order they were added."""

    __slots__ = ("_next_rank", "_order", "_root")

    def __init__(self) -> None:
        self._root: _Node[V] = _Node(False)
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
        size = len(name)
        # A depth-first walk with a stack of its own, never recursion: the pair (node, at)
        # says the words of the patterns down to ``node`` matched ``name[:at]``. The stack is
        # made at the first fork only, so the common walk down literal words allocates nothing.
        pending: list[tuple[_Node[V], int]] | None = None
        # A "#" node reached after ``at`` words takes 0, 1, ... of the words left: its children
        # are tried on each word from ``at`` on. A "#" below another can be reached after
        # several counts of words; ``hash_from`` keeps, per such node, the lowest count already
        # tried from, and a later visit tries only the words before it. So every (node, at)
        # pair is walked at most once (the path from a node up to its nearest "#" is fixed),
        # and a match costs at most nodes x (words + 1) steps, never exponential backtracking.
        hash_from: dict[_Node[V], int] | None = None  # made for the first such "#"
        node, at = self._root, 0
        while True:
            hashed = node.hash
            if hashed is not None:
                stop = size
                if node.after_hash:
                    if hash_from is None:
                        hash_from = {}
                    tried = hash_from.get(hashed)
                    if tried is None:
                        hash_from[hashed] = at
                        found.extend(hashed.values)
                    elif at < tried:
                        hash_from[hashed] = at
                        stop = tried
                    else:
                        stop = at  # tried from here or earlier already
                else:  # reached once: no need to keep where it was tried from
                    found.extend(hashed.values)  # a pattern ending in "#": any words left
                words, star = hashed.words, hashed.star
                if at < stop and (words or star is not None):
                    if pending is None:
                        pending = []
                    push = pending.append
                    for taken in range(at, stop):
                        if star is not None:
                            push((star, taken + 1))
                        literal = words.get(name[taken])
                        if literal is not None:
                            push((literal, taken + 1))
            if at == size:
                found.extend(node.values)
            else:
                star, literal = node.star, node.words.get(name[at])
                if literal is not None:
                    if star is not None:  # a fork: the "*" waits its turn
                        if pending is None:
                            pending = []
                        pending.append((star, at + 1))
                    node, at = literal, at + 1
                    continue
                if star is not None:
                    node, at = star, at + 1
                    continue
            if not pending:
                break
            node, at = pending.pop()
        if len(found) < 2:
            return found
        unique = {id(value): value for value in found}  # two patterns may share a value
        order = self._order
        return sorted(unique.values(), key=lambda value: order[id(value)])

    def __bool__(self) -> bool:
        return not self._root.empty()
