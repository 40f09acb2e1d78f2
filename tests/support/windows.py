"""Counting events in sliding windows: what the rate-limit tests check of start times."""

from __future__ import annotations

__all__ = ["most_in_any_window"]


def most_in_any_window(times: list[float], seconds: float) -> int:
    """The most of ``times`` that fall in any window ``[t, t + seconds)``."""
    ordered = sorted(times)
    most, first = 0, 0
    for last, at in enumerate(ordered):
        while at - ordered[first] >= seconds:
            first += 1
        most = max(most, last - first + 1)
    return most
