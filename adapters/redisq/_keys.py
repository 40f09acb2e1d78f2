"""Every Redis key and channel name redisq uses, built in one place.

All keys of one queue share the hash tag ``{<escaped name>}`` so that a script touching them
runs on one Redis Cluster slot. Queue names may contain any character: ``%``, ``{`` and ``}``
are percent-escaped so the tag is always well formed (it never contains ``}``) and two
different names never map to the same keys. No I/O here.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "REGISTRY",
    "TOPIC_CHANNEL_PREFIX",
    "TOPIC_KEYS",
    "WORKER_KEYS",
    "QueueKeys",
    "escape_name",
    "queue_keys",
    "topic_channel",
    "topic_channel_glob",
]

PREFIX = "redisq"

# Order matters: it is the KEYS[] order documented at the top of queue.lua.
_KEY_SUFFIXES = (
    "meta",
    "ready",
    "payloads",
    "priorities",
    "attempts",
    "deadlines",
    "leased",
    "dedup",
    "job_ids",
    "seq",
    "delayed",
    "dead",
    "dead_items",
    "dead_info",
    "records",
    "outcomes",
    "record_expiry",
    "rate",
)
# Where redisq keeps the name and kind of every queue ever opened: one HASH, outside any queue's
# hash tag (it is one key, so it lives on one node of a cluster and needs no script).
REGISTRY = f"{PREFIX}:queues"


def escape_name(name: str) -> str:
    """Escape ``name`` for a hash tag: ``%`` -> ``%25``, ``{`` -> ``%7B``, ``}`` -> ``%7D``."""
    return name.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")


@dataclass(frozen=True)
class QueueKeys:
    """The keys of one queue, in the order the Lua script expects them, and its channels."""

    name: str
    keys: tuple[str, ...]
    channel: str
    records_channel: str
    # Several records ended by one script call: one message, a JSON list of their job ids.
    records_batch_channel: str

    @property
    def meta(self) -> str:
        """HASH with the queue's kind (``fifo`` or ``priority``)."""
        return self.keys[0]

    @property
    def seq(self) -> str:
        """STRING counter of enqueue sequences."""
        return self.keys[9]

    @property
    def records(self) -> str:
        """HASH caller's job id -> its job record (``keep_results``; format in queue.lua)."""
        return self.keys[14]


def queue_keys(name: str) -> QueueKeys:
    """Build the keys of queue ``name``; ``ValueError`` for an empty name.

    An empty name would give the tag ``{}``, which Redis Cluster ignores, so the keys of the
    queue would scatter over slots.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"redisq: queue name must be a non-empty string, got {name!r}")
    base = f"{PREFIX}:{{{escape_name(name)}}}"
    return QueueKeys(
        name=name,
        keys=tuple(f"{base}:{suffix}" for suffix in _KEY_SUFFIXES),
        channel=f"{base}:events",
        records_channel=f"{base}:ended",
        records_batch_channel=f"{base}:ends",
    )


# --- topics (redisq/_topics.py and topics.lua) ------------------------------------------------

# The keys of every topic binding of this Redis, sharing the hash tag {topics}: one Redis
# Cluster slot, so the topic commands of topics.lua touch one slot. KEYS[] order of topics.lua.
TOPIC_KEYS = (
    f"{PREFIX}:{{topics}}:bindings",
    f"{PREFIX}:{{topics}}:version",
    f"{PREFIX}:{{topics}}:published",
    f"{PREFIX}:{{topics}}:message_ids",
)
# --- worker records (redisq/_workers.py and workers.lua) -------------------------------------

# The records of the workers of every process using this Redis, sharing the hash tag {workers}:
# one Redis Cluster slot. KEYS[] order of workers.lua.
WORKER_KEYS = (
    f"{PREFIX}:{{workers}}:records",
    f"{PREFIX}:{{workers}}:expiry",
)

# Live subscribers' channels: one per topic name, "redisq:topic:<name>" (pub/sub channels
# belong to no slot; a pattern subscription filters them by the pattern's leading words).
TOPIC_CHANNEL_PREFIX = f"{PREFIX}:topic:"


def topic_channel(name: str) -> str:
    """The pub/sub channel live subscribers of topic ``name`` hear a publish on."""
    return TOPIC_CHANNEL_PREFIX + name


def topic_channel_glob(words: tuple[str, ...]) -> str:
    """A PSUBSCRIBE glob matching at least every channel of a name the pattern ``words``
    matches: its leading literal words, glob characters escaped."""
    literal: list[str] = []
    for word in words:
        if word in ("*", "#"):
            break
        literal.append(word)
    prefix = ".".join(literal)
    escaped = "".join("\\" + c if c in "*?[]\\^" else c for c in prefix)
    if len(literal) == len(words):
        return TOPIC_CHANNEL_PREFIX + escaped
    return TOPIC_CHANNEL_PREFIX + escaped + "*"
