"""The conformance tests of the settings stored with a queue: ``SettingsConformance``.

A part of :class:`~varmq.testing.conformance.QueueConformance`; see that module for how to run the
suite. The semantics checked are those of :mod:`varmq.contract.stored_settings`:

- the defining options of a queue's first opener are stored with the queue; a later opener that
  leaves one out gets the stored value (seen in what it does, not only in an attribute), through
  ``new_*`` and ``open_queue`` alike;
- a later opener that gives another value gets
  :class:`~varmq.contract.stored_settings.QueueSettingsError` (a ``ValueError``) naming the
  option and both values, and the stored value stays;
- ``visibility_timeout`` belongs to each opener: two openers may differ; its default is 30 s.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from varmq.contract.protocols import (
    DEFAULT_VISIBILITY_TIMEOUT,
    IDeadLetterable,
    IJobRecords,
    ILeaseExtendable,
)
from varmq.contract.stored_settings import QueueSettingsError
from varmq.testing._suite import LEASE, SuiteBase, fresh_name, put, take_one
from varmq.testing.harness import QueueKind, StorageHarness

__all__ = ["SettingsConformance"]

# (option, the first opener's value, another value, the protocol a storage needs to take it).
_DEFINING_CASES = [
    ("max_payload", 1000, 2000, None),
    ("keep_results", 60.0, 120.0, IJobRecords),
    ("keep_results_limit", 50, 60, IJobRecords),
    ("dead_letter_limit", 5, 6, IDeadLetterable),
    ("dead_letter_max_age", 3600.0, 7200.0, IDeadLetterable),
]


class SettingsConformance(SuiteBase):
    """Tests of the settings every opener of a queue shares."""

    def test_an_opener_that_leaves_max_payload_out_inherits_the_stored_limit(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        name = fresh_name()
        self.open(harness, kind, name, max_payload=1000)
        later = self.open(harness, kind, name)
        with pytest.raises(ValueError, match=r"1,001 bytes; max_payload is 1,000 bytes"):
            put(later, kind, b"x" * 1001)
        assert put(later, kind, b"x" * 1000)

    @pytest.mark.parametrize(("option", "stored", "other", "needs"), _DEFINING_CASES)
    def test_another_value_of_a_defining_option_is_refused_naming_both(
        self,
        harness: StorageHarness,
        kind: QueueKind,
        option: str,
        stored: float,
        other: float,
        needs: type | None,
    ) -> None:
        if needs is not None:
            self.require(needs)
        name = fresh_name()
        first_options: dict[str, Any] = {option: stored}
        other_options: dict[str, Any] = {option: other}
        first = self.open(harness, kind, name, **first_options)
        with pytest.raises(QueueSettingsError) as refused:
            self.open(harness, kind, name, **other_options)
        message = str(refused.value)
        assert re.search(rf"{option}={other!r} given", message), message
        assert f"created with {option}={stored!r}" in message
        assert isinstance(refused.value, ValueError)
        assert (refused.value.option, refused.value.given) == (option, other)
        # Refused, not stored: the first value stays for every later opener.
        self.open(harness, kind, name, **first_options)
        assert put(first, kind, b"still open")

    def test_open_queue_inherits_the_stored_settings_and_refuses_others(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        store = self.store(harness)
        name = fresh_name()
        self.open(harness, kind, name, max_payload=1000)
        opened = store.open_queue(name)
        with pytest.raises(ValueError, match=r"max_payload is 1,000 bytes"):
            put(opened, kind, b"x" * 1001)
        with pytest.raises(QueueSettingsError, match=r"max_payload=2000 given"):
            store.open_queue(name, max_payload=2000)

    def test_visibility_timeout_belongs_to_each_opener(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        name = fresh_name()
        long_lease = self.open(harness, kind, name)  # LONG_LEASE
        short_lease = self.open(harness, kind, name, LEASE)
        assert put(long_lease, kind, b"job")
        take_one(short_lease)
        harness.advance(LEASE * 1.5)  # the short lease ran out; the other opener's length is moot
        assert take_one(long_lease)[0] == b"job"

    def test_the_default_lease_is_30_seconds_so_a_crashed_consumers_jobs_return_soon(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        self.require(ILeaseExtendable)
        q = harness.new_queue(fresh_name(), priority=kind.priority, distributed=kind.distributed)
        assert q.lease_seconds == DEFAULT_VISIBILITY_TIMEOUT == 30.0
