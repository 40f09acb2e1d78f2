"""The WARNING lines for settles the storage refused: one per job, rate-limited in an outage."""

from __future__ import annotations

import logging

import pytest

import varmq
from varmq.api.unsettled import UnsettledLog


def _error(n: int) -> varmq.AcknowledgeJobError:
    return varmq.AcknowledgeJobError(f"job-{n}", f"ack-{n}", OSError("disk I/O error"), queue="q")


def test_an_outage_writes_a_burst_then_one_line_per_window_counting_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = [100.0]
    log = UnsettledLog(
        logging.getLogger("varmq.worker"), "w", burst=3, window=60.0, clock=lambda: clock[0]
    )
    with caplog.at_level(logging.WARNING, logger="varmq.worker"):
        for n in range(50):
            log.warn(_error(n))
        assert len(caplog.records) == 3
        assert [r.levelno for r in caplog.records] == [logging.WARNING] * 3
        assert "job 'job-0'" in caplog.records[0].getMessage()
        assert "OSError: disk I/O error" in caplog.records[0].getMessage()
        clock[0] += 61.0
        log.warn(_error(50))
    summary, first = caplog.records[3].getMessage(), caplog.records[4].getMessage()
    assert "47 more settles failed in the last 60 s" in summary
    assert "job 'job-50'" in first and len(caplog.records) == 5
