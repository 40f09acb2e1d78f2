"""What renewing leases costs at the default ``visibility_timeout`` (30 s, renewed every 10 s).

A worker renews the lease of every job it holds, one ``extend_lease`` call per job per third of
the lease. This measures one renewal on sqliteq and on redisq (a redis-server started here on a
free loopback port) against the baseline every job pays anyway: its take and its
acknowledgement, one job at a time, in the same run. From that it gives the storage time a
worker spends renewing per second at the default lease for 100 long jobs running at once::

    .venv/bin/python benchmarks/leases.py
    .venv/bin/python benchmarks/leases.py -n 500 --repeat 1     # a quick look
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from _common import machine, setup_path, spread, uptime

setup_path()

import redisq  # noqa: E402
import sqliteq  # noqa: E402
from tests.support.redis_server import RedisServer  # noqa: E402
from varmq.contract.protocols import DEFAULT_VISIBILITY_TIMEOUT  # noqa: E402

RUNNING = 100  # long jobs held at once, for the per-second figure


def _renewals(q: Any, n: int) -> float:
    """Seconds per ``extend_lease`` of a held job, over ``n`` calls on ``RUNNING`` leases."""
    for i in range(RUNNING):
        q.enqueue(b'{"id": "j%d", "status": "Created", "data": null}' % i)
    acks = [q.dequeue_with_ack_id()[1] for _ in range(RUNNING)]
    start = time.perf_counter()
    for i in range(n):
        assert q.extend_lease(acks[i % RUNNING])
    took = (time.perf_counter() - start) / n
    for ack in acks:
        q.acknowledge(ack)
    return took


def _take_and_ack(q: Any, n: int) -> float:
    """Seconds per take plus acknowledgement of one job (the baseline: every job pays it)."""
    for i in range(n):
        q.enqueue(b'{"id": "k%d", "status": "Created", "data": null}' % i)
    start = time.perf_counter()
    for _ in range(n):
        _, ack = q.dequeue_with_ack_id()
        q.acknowledge(ack)
    return (time.perf_counter() - start) / n


def _measure(
    repeat: int, open_queue: Callable[[int], Any], n: int
) -> tuple[list[float], list[float]]:
    renew, base = [], []
    for r in range(repeat):
        q = open_queue(r)
        if r % 2:  # alternate which goes first
            base.append(_take_and_ack(q, n))
            renew.append(_renewals(q, n))
        else:
            renew.append(_renewals(q, n))
            base.append(_take_and_ack(q, n))
    return renew, base


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=5000, help="calls per run (5000)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (3)")
    args = parser.parse_args(argv)
    server = RedisServer()
    server.start()
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            sq = sqliteq.new(os.path.join(tmp, "jobs.db"))
            rows.append(
                ("sqliteq", *_measure(args.repeat, lambda r: sq.new_queue(f"q{r}"), args.n))
            )
            sq.close()
            rq = redisq.new(server.url)
            rows.append(("redisq", *_measure(args.repeat, lambda r: rq.new_queue(f"q{r}"), args.n)))
            rq.close()
    finally:
        server.stop()
    period = DEFAULT_VISIBILITY_TIMEOUT / 3
    print(
        f"lease renewal at the default visibility_timeout ({DEFAULT_VISIBILITY_TIMEOUT:g} s, "
        f"renewed every {period:g} s); {args.n:,} calls per run, {args.repeat} runs "
        f"(median, min-max); {machine()}; {uptime()}"
    )
    print()
    print(
        "| Adapter | one renewal, µs | take + ack of a job, µs | renewal / (take + ack) "
        f"| storage time renewing {RUNNING} running jobs, ms per s |"
    )
    print("|---|---:|---:|---:|---:|")
    for name, renew, base in rows:
        ratios = [r / b for r, b in zip(renew, base, strict=True)]
        per_second = [r * RUNNING / period * 1000 for r in renew]
        print(
            f"| {name} | {spread([r * 1e6 for r in renew], '.0f')} "
            f"| {spread([b * 1e6 for b in base], '.0f')} | {spread(ratios, '.2f')} "
            f"| {spread(per_second, '.2f')} |"
        )
    print()
    print(
        f"median renewal cost per running job: "
        f"{statistics.median(r for _, rs, _ in rows for r in rs) * 1e6 / period:.1f} µs of "
        "storage time per second"
    )


if __name__ == "__main__":
    main()
