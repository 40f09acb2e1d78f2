"""What the benchmark scripts share: the import path, the machine's load, spreads and ratios.

Imported by the scripts in this directory (``import _common`` works because a script's own
directory is ``sys.path[0]``); :func:`setup_path` then replaces that entry by the repository root
and ``adapters/``, so that ``benchmarks/redisq.py`` and ``benchmarks/sqliteq.py`` do not shadow
the adapters' packages of the same names.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def setup_path() -> None:
    """Put the repository root and ``adapters/`` first on ``sys.path``, without ``benchmarks/``."""
    here = ROOT / "benchmarks"
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    sys.path[:0] = [str(ROOT), str(ROOT / "adapters")]


def load1() -> float:
    """The 1-minute load average now."""
    return os.getloadavg()[0]


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        load = os.getloadavg()
        return f"load average: {load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f}"


def machine() -> str:
    return f"Python {platform.python_version()}; {os.cpu_count()} CPUs; {platform.system()}"


def spread(values: Sequence[float], fmt: str = ",.0f") -> str:
    """``median (min-max)`` of the runs."""
    if not values:
        return "-"
    mid = statistics.median(values)
    if len(values) == 1:
        return format(mid, fmt)
    return f"{format(mid, fmt)} ({format(min(values), fmt)}-{format(max(values), fmt)})"


@dataclass
class Figure:
    """The runs of one measure and of its baseline, paired run by run, with the load at each."""

    name: str
    unit: str = "jobs/s"
    baseline_name: str = ""
    target: str = ""
    values: list[float] = field(default_factory=list)
    baselines: list[float] = field(default_factory=list)
    loads: list[float] = field(default_factory=list)
    note: str = ""

    def ratios(self) -> list[float]:
        return [v / b for v, b in zip(self.values, self.baselines, strict=False) if b]

    def ratio(self) -> float | None:
        ratios = self.ratios()
        return statistics.median(ratios) if ratios else None
