"""The settings that define a queue, stored with the queue by its first opener.

Job records, dead letters and the size limit are properties of a queue, not of the process that
opens it: a producer that leaves ``keep_results`` out must not turn off the records (and the
dedup they give) that every consumer relies on. So every storage keeps the values of the
options in :data:`DEFINING` with the queue:

1. an opener checks its options (:func:`varmq.contract.rules.queue_settings`) and *offers* them,
   encoded by :func:`encode`;
2. the storage stores the offer only if the queue has no stored settings yet, and answers the
   stored text (one step: ``INSERT OR IGNORE`` then ``SELECT``, ``HSETNX`` then ``HGET``);
3. :func:`settle` gives the opener the stored values for every defining option it left out,
   and raises :class:`QueueSettingsError`, naming both values, for one it gave differently.

Options that belong to one opener (``visibility_timeout``: the length of the leases its own
takes write) are not stored. ``open_queue``, the opener of operator tools, inherits stored
settings but offers none, so a look at an older queue never fixes its settings by accident.
No state, no I/O.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from . import rules
from .rules import QueueSettings, Rule

__all__ = ["DEFINING", "QueueSettingsError", "encode", "settle"]

DEFINING: tuple[str, ...] = (
    "keep_results",
    "keep_results_limit",
    "dead_letter_limit",
    "dead_letter_max_age",
    "max_payload",
    "rate_limit",
)
"""The options every storage stores with a queue; an adapter adds its own to a copy."""

S = TypeVar("S", bound=QueueSettings)


class QueueSettingsError(ValueError):
    """An opener gave a defining option a value other than the one stored with the queue.

    ``option``, ``given`` and ``stored`` say which and what; the queue is not opened.
    """

    def __init__(self, subject: str, option: str, given: Any, stored: Any) -> None:
        self.option = option
        self.given = given
        self.stored = stored
        super().__init__(
            f"{subject}: {option}={given!r} given, but the queue was created with "
            f"{option}={stored!r}, and every opener shares it; leave {option} out to use the "
            f"stored value, or give the queue another name"
        )


def encode(settings: QueueSettings, defining: Sequence[str] = DEFINING) -> str:
    """The offer of one opener: its values of the ``defining`` options, as JSON text."""
    return json.dumps({key: getattr(settings, key) for key in defining}, sort_keys=True)


def settle(
    subject: str,
    options: Mapping[str, Any],
    offered: S,
    stored_text: str | bytes | None,
    defining: Sequence[str] = DEFINING,
    checks: Mapping[str, Rule] = rules.RULES,
) -> S:
    """``offered`` with the stored value of every defining option the opener left out.

    ``options`` are the opener's own keyword options (only those it gave), ``offered`` their
    checked settings, ``stored_text`` what the storage holds for the queue (``None``: nothing,
    the queue keeps no settings yet). A stored option this version does not know is ignored; a
    stored value that breaks its rule raises ``ValueError`` naming the queue.
    """
    if stored_text is None:
        return offered
    stored = _decode(subject, stored_text)
    inherited: dict[str, Any] = {}
    for key in defining:
        if key not in stored:
            continue  # stored by an opener that did not know this option: this one's stands
        value = stored[key]
        normal = rules.NORMAL_FORMS.get(key)
        try:
            if key in checks:
                rules.check(subject, key, value, checks)
            elif normal is not None:
                value = normal(subject, value)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{subject}: the settings stored with the queue: {exc}") from None
        if key in options:
            given = options[key] if normal is None else normal(subject, options[key])
            if not _same(given, value):
                raise QueueSettingsError(subject, key, options[key], value)
        else:
            inherited[key] = value
    return dataclasses.replace(offered, **inherited) if inherited else offered


def _decode(subject: str, text: str | bytes) -> dict[str, Any]:
    try:
        stored = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError):
        stored = None
    if not isinstance(stored, dict):
        raise ValueError(
            f"{subject}: the settings stored with the queue are not a JSON object: {text!r:.200}"
        )
    return stored


def _same(given: Any, stored: Any) -> bool:
    """Whether an opener's value is the stored one: numbers by value (``60 == 60.0``),
    truth values by truth (``remove_on_complete=1`` is ``True``)."""
    if isinstance(stored, bool):
        return bool(given) is stored
    if isinstance(given, (int, float)) and isinstance(stored, (int, float)):
        return math.isclose(given, stored, rel_tol=0.0, abs_tol=1e-9) or given == stored
    if isinstance(given, tuple) and isinstance(stored, tuple) and len(given) == len(stored):
        return all(_same(g, s) for g, s in zip(given, stored, strict=True))
    return bool(given == stored)
