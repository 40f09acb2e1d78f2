"""One Prometheus endpoint for a fleet of ``varmq worker --processes N`` children.

Each child serves its own metrics on a loopback port it picks (``--metrics-port 0``) and writes
that port to the file the supervisor named in its environment (:data:`PORT_FILE_ENV`). On
each scrape the supervisor's :class:`FleetCollector` reads every child's metrics and merges
them: counters and histograms are summed over the children (what the fleet did), gauges are
kept per child under a ``child`` label (a sum of "running" gauges is meaningful, a sum of
"status" gauges is not: the query decides). A child that does not answer (restarting, gone) is
left out of that scrape and counted in ``varmq_fleet_children_unreachable``.

The only module of the supervisor that imports ``prometheus_client`` (extra ``prometheus``).
"""

from __future__ import annotations

import logging
import os
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

__all__ = ["PORT_FILE_ENV", "FleetCollector", "write_port"]

log = logging.getLogger("varmq.supervisor")

PORT_FILE_ENV = "VARMQ_METRICS_PORT_FILE"
"""Set in a child's environment: the file it writes its metrics port to."""

_SUMMED = frozenset({"counter", "histogram", "summary"})
_SCRAPE_TIMEOUT = 2.0


def write_port(port: int) -> None:
    """In a child: tell the supervisor where its metrics are (no-op outside a fleet)."""
    path = os.environ.get(PORT_FILE_ENV)
    if not path:
        return
    temporary = f"{path}.tmp"
    with open(temporary, "w", encoding="ascii") as file:
        file.write(str(port))
    os.replace(temporary, path)  # a scrape never reads half a number


def _read_port(path: Path) -> int | None:
    try:
        return int(path.read_text(encoding="ascii"))
    except (OSError, ValueError):
        return None


class FleetCollector(Collector):
    """The merged metrics of the children whose port files ``port_files()`` names (child
    number to path)."""

    def __init__(self, port_files: Callable[[], Mapping[int, Path]]) -> None:
        self._port_files = port_files

    def describe(self) -> Iterable[Metric]:
        return []  # collected lazily: nothing to scrape at registration

    def collect(self) -> Iterator[Metric]:
        merged: dict[str, Metric] = {}
        summed: dict[tuple[str, str, tuple[tuple[str, str], ...]], float] = {}
        unreachable = 0
        answered = 0
        for child, path in sorted(self._port_files().items()):
            port = _read_port(path)
            text = None if port is None else self._scrape(port)
            if text is None:
                unreachable += 1
                continue
            try:  # parsed whole first: a port taken by something else spoils no other child
                families = list(text_string_to_metric_families(text))
            except ValueError as exc:
                log.warning("varmq: child %d's metrics did not parse: %s", child, exc)
                unreachable += 1
                continue
            answered += 1
            for family in families:
                metric = merged.get(family.name)
                if metric is None:
                    metric = merged[family.name] = Metric(
                        family.name, family.documentation, family.type
                    )
                for sample in family.samples:
                    if sample.name.endswith("_created"):
                        continue  # a creation time has no sum
                    if family.type in _SUMMED:
                        key = (family.name, sample.name, tuple(sorted(sample.labels.items())))
                        summed[key] = summed.get(key, 0.0) + sample.value
                    else:
                        labels = {**sample.labels, "child": str(child)}
                        metric.add_sample(sample.name, labels, sample.value)
        for (family_name, sample_name, pairs), value in summed.items():
            merged[family_name].add_sample(sample_name, dict(pairs), value)
        yield from merged.values()
        children = GaugeMetricFamily(
            "varmq_fleet_children", "Children of the supervisor whose metrics answered"
        )
        children.add_metric([], answered)
        yield children
        missing = GaugeMetricFamily(
            "varmq_fleet_children_unreachable",
            "Children of the supervisor whose metrics did not answer this scrape",
        )
        missing.add_metric([], unreachable)
        yield missing

    @staticmethod
    def _scrape(port: int) -> str | None:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{port}/metrics", timeout=_SCRAPE_TIMEOUT
            ) as reply:
                return bytes(reply.read()).decode("utf-8")
        except OSError as exc:
            log.debug("varmq: a child's metrics on port %d did not answer: %s", port, exc)
            return None
