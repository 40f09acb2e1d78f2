"""The options of sqliteq's queues: varmq's shared ones, and the three of its own.

Every storage checks its options and arguments by :mod:`varmq.contract.rules`; sqliteq adds the
rows of the options only it has (``remove_on_complete``, ``completed_limit``,
``completed_max_age``) and their defaults, and which of them define a queue (stored with it by
its first opener, :mod:`varmq.contract.stored_settings`). No state, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from varmq.contract import rules, stored_settings
from varmq.contract.protocols import MAX_COUNT, MAX_DELAY

__all__ = ["DEFINING", "QueueOptions", "QueueSettings", "queue_settings", "settle"]

DEFINING = (*stored_settings.DEFINING, "remove_on_complete", "completed_limit", "completed_max_age")
"""The options stored with a queue: every storage's, and sqliteq's retention of done jobs."""


class QueueOptions(rules.QueueOptions, total=False):
    """The keyword options of every ``Queues.new_*`` call and ``open_queue``; all optional.

    Those of every storage (:class:`varmq.contract.rules.QueueOptions`: ``visibility_timeout``,
    ``dead_letter_limit``, ``dead_letter_max_age``, ``keep_results``, ``keep_results_limit``;
    see ``docs/sqliteq.md``, "Job records"), and ``remove_on_complete``: ``False`` keeps
    finished jobs as done, at most ``completed_limit`` per queue (default 1,000) for at most
    ``completed_max_age`` seconds (default 7 days).
    """

    remove_on_complete: bool
    completed_limit: int
    completed_max_age: float


@dataclass(frozen=True)
class QueueSettings(rules.QueueSettings):
    """The options of one queue object, checked; sqliteq's own defaults are written here only."""

    remove_on_complete: bool = True
    completed_limit: int = 1000
    completed_max_age: float = 604_800.0


# remove_on_complete takes any truth value: it has no rule.
_RULES: Mapping[str, rules.Rule] = {
    **rules.RULES,
    "completed_limit": rules.Rule(True, 0, False, MAX_COUNT, "an int >= 0"),
    "completed_max_age": rules.Rule(False, 0, True, MAX_DELAY, "seconds > 0, <= 100 years"),
}


def queue_settings(subject: str, options: Mapping[str, Any]) -> QueueSettings:
    """Check the keyword options of an opener and fill in the defaults."""
    return rules.queue_settings(subject, options, QueueSettings, _RULES)


def settle(
    subject: str, options: Mapping[str, Any], offered: QueueSettings, stored: str | None
) -> QueueSettings:
    """``offered`` with the settings stored with the queue (see
    :func:`varmq.contract.stored_settings.settle`)."""
    return stored_settings.settle(subject, options, offered, stored, DEFINING, _RULES)
