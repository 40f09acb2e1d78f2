"""A consumer process for the lease-clock tests: ``python skewed_actor.py ROLE PATH LOG [SKEW]``.

``SKEW`` seconds are added to this process's wall clock (``time.time`` and ``time.time_ns``)
before sqliteq is imported, as on a host whose clock was stepped. Every job this process
starts is appended to ``LOG`` as ``<job>\t<pid>`` (one ``write`` on an ``O_APPEND`` file).

Roles:
- ``hold N SECONDS``: take N jobs, print ``taken`` once they are leased, run each for SECONDS,
  then acknowledge them and exit;
- ``drain``: take and run jobs one by one until no job waits and none is in flight.
"""

from __future__ import annotations

import os
import sys
import time

if len(sys.argv) > 4 and sys.argv[4] != "0":
    _skew = float(sys.argv[4])
    _time, _time_ns = time.time, time.time_ns
    time.time = lambda: _time() + _skew  # type: ignore[assignment]
    time.time_ns = lambda: _time_ns() + int(_skew * 1e9)  # type: ignore[assignment]

import sqliteq

LEASE = 5.0
"""The visibility timeout: shorter than the skew, so wall-clock leases would look expired."""


def _log(log: str, job: bytes) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, job + b"\t" + str(os.getpid()).encode() + b"\n")
    finally:
        os.close(fd)


def main(argv: list[str]) -> int:
    role, path, log = argv[1], argv[2], argv[3]
    with sqliteq.new(path, create=False) as store:
        q = store.new_queue("work", visibility_timeout=LEASE)
        if role == "hold":
            count, seconds = int(argv[5]), float(argv[6])
            taken = q.dequeue_batch_with_ack_ids(count)
            for job, _ in taken:
                _log(log, job)
            print("taken", flush=True)
            time.sleep(seconds)  # the jobs' own work
            assert all(q.acknowledge_many([ack for _, ack in taken])), "lost a lease"
            return 0
        while True:
            taken = q.dequeue_with_ack_id()
            if taken is None:
                stats = q.stats()
                if stats["waiting"] == 0 and stats["in_flight"] == 0:
                    return 0
                time.sleep(0.05)  # an idle consumer's poll interval
                continue
            _log(log, taken[0])
            assert q.acknowledge(taken[1])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
