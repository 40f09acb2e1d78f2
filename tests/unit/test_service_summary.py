"""The summary line ``varmq.run`` logs on the way out, and the exit status it goes with."""

from __future__ import annotations

import logging
import time

import pytest

import varmq
from varmq.ops import service


def _summary(worker: varmq.Worker[int, None], caplog: pytest.LogCaptureFixture) -> tuple[int, str]:
    with caplog.at_level(logging.INFO, logger="varmq.service"):
        status = service._summary([worker], time.monotonic(), service._Shutdown())
    [line] = [r.getMessage() for r in caplog.records if "stopped" in r.getMessage()]
    return status, line


def test_one_job_reads_in_the_singular_and_a_clean_stop_is_status_0(
    caplog: pytest.LogCaptureFixture,
) -> None:
    worker = varmq.new_worker(lambda job: None, 1)
    worker.bind_queue().add(1)
    assert worker.wait(10)
    assert worker.stop_and_wait(10)
    status, line = _summary(worker, caplog)
    assert status == 0
    assert "stopped 1 worker in" in line and ": 1 job completed, 0 taken jobs handed back" in line
    assert line.endswith("0 still running, 0 not acknowledged")
