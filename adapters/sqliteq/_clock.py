"""The two clocks of sqliteq: wall time for due times, a host-wide clock for leases.

Due times (``enqueue_delayed``, ``nack``), enqueue, finish and dead-letter times are wall-clock
milliseconds: they mean a time of day, and a file may outlive a boot. Lease deadlines are only
compared by processes of one host while they run, so they are kept on a clock every process of
the host reads alike and that no one can set: on Linux ``CLOCK_BOOTTIME`` (or
``CLOCK_MONOTONIC``), both system-wide, tagged with the boot id of
``/proc/sys/kernel/random/boot_id``: a lease written in another boot counts as expired. A
process whose wall clock is wrong (set back, skewed, stepped by NTP) then neither takes over
the running jobs of others nor loses its own. Where there is no boot id, leases stay on wall
time (the identity ``"wall"``), and processes sharing a file need synchronised clocks.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["WALL", "Clock", "host_lease_clock", "wall_clock_ms"]

Clock = Callable[[], int]

WALL = "wall"
"""The identity of lease deadlines kept on wall time."""

_BOOT_ID = "/proc/sys/kernel/random/boot_id"


def wall_clock_ms() -> int:
    """Unix time in integer milliseconds."""
    return time.time_ns() // 1_000_000


def host_lease_clock() -> tuple[str, Clock]:
    """``(identity, clock)`` of lease deadlines on this host; see the module docstring."""
    try:
        with open(_BOOT_ID, encoding="ascii") as fh:
            boot_id = fh.read().strip()
    except OSError:
        boot_id = ""
    clock_id = getattr(time, "CLOCK_BOOTTIME", None)
    if clock_id is None:
        clock_id = getattr(time, "CLOCK_MONOTONIC", None)
    if not boot_id or clock_id is None:
        return WALL, wall_clock_ms
    try:
        time.clock_gettime_ns(clock_id)
    except OSError:
        return WALL, wall_clock_ms
    name = "boottime" if clock_id == getattr(time, "CLOCK_BOOTTIME", None) else "monotonic"

    def host_clock_ms() -> int:
        return time.clock_gettime_ns(clock_id) // 1_000_000

    return f"{name}:{boot_id}", host_clock_ms
