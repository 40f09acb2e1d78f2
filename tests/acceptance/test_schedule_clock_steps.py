"""Acceptance: an ``every=1`` schedule across wall-clock steps, in real consumer processes.

Occurrences follow the wall clock by design; a step of it must neither stop them nor replay
one. Each consumer process (``clock_step_actors``) steps its own wall clock (``time.time``,
``time.time_ns``, so sqliteq's wall clock too) by an offset this test writes to a file, and
leaves the monotonic clocks alone, as a real step of the system clock does. Three scenarios run
at once on one timeline (so the file stays well under 45 s per storage), each on its own queue
(``keep_results=3600``), every run logged with the real time it ran:

1. back then corrected: 3 s right, the clock 10 s back for 4 s, then right again. Nothing new
   runs while it is back (those wall times already ran), no occurrence runs twice, and about
   8 new occurrences run in the 8 s after the correction (at least 6 asked);
2. forward then corrected: 3 s right, 10 s ahead for 4 s, then right again. Occurrences keep
   coming while it is ahead (the first after the jump is the latest one, those jumped over
   are skipped), none runs twice; after the correction (a step back of 10 s) the occurrences
   between the real time and the latest one fired already ran, so they are not added again:
   the schedule resumes once real time passes the last fired occurrence, about the step's
   10 s after the correction (asked: within the step + 2 s);
3. two consumers of one queue, only one stepped back then corrected (one host's clock wrong in
   a fleet): no occurrence runs twice, and occurrences keep running throughout (the right
   consumer fires them).

On redisq only the consumer's clock steps: the server's ``TIME`` (its own clock, which redisq's
scripts read) does not follow an offset inside the consumer process, so this is a step of one
host's clock in a fleet, not of the Redis host's. On sqliteq every wall-clock reader of the
consumer follows the step, as on a host whose clock stepped.
"""

from __future__ import annotations

import datetime
import math
import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.acceptance.process_tools import STORES, expect_line, spawn, store_url

pytestmark = pytest.mark.timeout(90)

BEFORE = 3.0
"""Seconds every clock is right before the step."""
STEP = 10.0
"""Size of the step, in seconds."""
STEPPED = 4.0
"""Seconds the stepped clocks stay wrong."""
AFTER = 8.0
"""Seconds after the correction in which scenarios 1 and 3 count new occurrences."""
RESUME_WITHIN = STEP + 2.0
"""Seconds after the correction by which scenario 2's schedule must have resumed."""
START_TIMEOUT = 20.0
"""Seconds every consumer gets to be ready and run its first occurrence."""

_CONSUMERS = {  # consumer: (scenario, its offset file)
    "back": ("back", "back"),
    "forward": ("forward", "forward"),
    "fleet-stepped": ("fleet", "back"),
    "fleet-right": ("fleet", "right"),
}


@dataclass(frozen=True)
class Run:
    job_id: str
    occurrence: float  # the occurrence's time, from its id (Unix seconds)
    real: float  # real time the job ran
    consumer: str


@dataclass
class Timeline:
    start: float  # real time every clock was right and every schedule had run once
    step: float  # real time the offsets were written
    fix: float  # real time the offsets were set back to 0
    end: float  # real time the consumers were stopped
    runs: dict[str, list[Run]]  # by scenario, in the order they ran


def _occurrence(job_id: str) -> float:
    stamp = job_id.split(":", 1)[1]
    when = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")
    return when.replace(tzinfo=datetime.timezone.utc).timestamp()


def _runs(log: Path, consumer: str) -> list[Run]:
    if not log.exists():
        return []
    runs = []
    for line in log.read_text().splitlines():
        parts = line.split()
        if parts and parts[0] == "run" and len(parts) == 5:
            runs.append(Run(parts[1], _occurrence(parts[1]), float(parts[2]), consumer))
    return runs


def _set_offset(path: Path, seconds: float) -> None:
    """Replace the offset file in one step: a reader sees the old offset or the new one."""
    fresh = path.with_suffix(".new")
    fresh.write_text(f"{seconds:g}\n")
    os.replace(fresh, path)


def _wait_for(condition: Callable[[], bool], deadline: float) -> bool:
    """Whether ``condition`` held by ``deadline`` (real time), looked at every 50 ms."""
    while not condition():
        if time.time() >= deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture(scope="module", params=STORES)
def timeline(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Timeline]:
    """Run the three scenarios on one store, on one timeline; their runs, by scenario."""
    tmp = tmp_path_factory.mktemp(f"clock-steps-{request.param}")
    store = store_url(request, tmp)
    stamp = time.time_ns()
    offsets = {name: tmp / f"{name}.offset" for name in ("back", "forward", "right")}
    for path in offsets.values():
        _set_offset(path, 0)
    logs = {consumer: tmp / f"{consumer}.log" for consumer in _CONSUMERS}
    consumers: dict[str, subprocess.Popen[str]] = {}
    try:
        for consumer, (scenario, offset) in _CONSUMERS.items():
            queue = f"clock-{scenario}-{stamp}"
            args = (store, queue, "tick", str(logs[consumer]), str(offsets[offset]))
            consumers[consumer] = spawn("tests.acceptance.clock_step_actors", "consume", *args)
        for process in consumers.values():
            expect_line(process, "ready")

        def every_scenario_ran() -> bool:
            ran = {_CONSUMERS[c][0] for c, log in logs.items() if _runs(log, c)}
            return ran == {"back", "forward", "fleet"}

        assert _wait_for(every_scenario_ran, time.time() + START_TIMEOUT), "no first run"
        start = time.time()
        time.sleep(BEFORE)  # wall time passing is what the scenarios are about
        step = time.time()
        _set_offset(offsets["back"], -STEP)
        _set_offset(offsets["forward"], +STEP)
        time.sleep(STEPPED)
        fix = time.time()
        _set_offset(offsets["back"], 0)
        _set_offset(offsets["forward"], 0)

        def forward_resumed() -> bool:
            return any(r.real > fix and r.occurrence <= r.real for r in _runs(logs["forward"], ""))

        # Scenario 2 ends once it resumed, or at its limit (its test then says so).
        _wait_for(forward_resumed, fix + RESUME_WITHIN + 0.5)
        time.sleep(max(0.0, fix + AFTER + 0.2 - time.time()))
        end = time.time()
        for process in consumers.values():
            process.send_signal(signal.SIGTERM)
        for consumer, process in consumers.items():
            assert process.wait(timeout=30) == 0, f"consumer {consumer} did not stop cleanly"
    finally:
        for process in consumers.values():
            if process.poll() is None:
                process.kill()
            process.wait()
            if process.stdout is not None:
                process.stdout.close()
    runs: dict[str, list[Run]] = {"back": [], "forward": [], "fleet": []}
    for consumer, (scenario, _) in _CONSUMERS.items():
        runs[scenario].extend(_runs(logs[consumer], consumer))
    for scenario_runs in runs.values():
        scenario_runs.sort(key=lambda r: r.real)
    yield Timeline(start, step, fix, end, runs)


def _no_occurrence_twice(runs: list[Run]) -> None:
    twice = sorted(job_id for job_id, n in Counter(r.job_id for r in runs).items() if n > 1)
    assert not twice, f"occurrences that ran twice: {twice}"


def _between(runs: list[Run], after: float, until: float) -> list[Run]:
    return [r for r in runs if after < r.real <= until]


def test_a_clock_stepped_back_then_corrected_neither_stops_nor_replays(
    timeline: Timeline,
) -> None:
    runs = timeline.runs["back"]
    _no_occurrence_twice(runs)
    before = _between(runs, timeline.start, timeline.step)
    back = _between(runs, timeline.step, timeline.fix)
    # Anything that ran while the clock was back was added before the step: the stepped-back
    # clock added nothing (those wall times already ran).
    assert all(r.occurrence <= timeline.step for r in back), back
    after = _between(runs, timeline.fix, timeline.fix + AFTER)
    assert len(after) >= 6, (
        f"{len(after)} occurrence(s) ran in the {AFTER:g} s after the correction (about "
        f"{AFTER:g} expected): {[r.job_id for r in after]}"
    )
    print(
        f"\nstepped back {STEP:g} s then corrected: {len(before)} in {BEFORE:g} s before, "
        f"{len(back)} while back, {len(after)} in the {AFTER:g} s after; none twice"
    )


def test_a_clock_stepped_forward_then_corrected_resumes_after_the_last_fired_occurrence(
    timeline: Timeline,
) -> None:
    runs = timeline.runs["forward"]
    _no_occurrence_twice(runs)
    before = [r for r in runs if r.real <= timeline.step]
    # A run ahead of its own occurrence's time was added by the clock that was ahead.
    ahead = [r for r in runs if r.occurrence > r.real]
    assert len(ahead) >= 2, f"only {len(ahead)} occurrence(s) while ahead (about 4 expected)"
    assert all(timeline.step < r.real for r in ahead), ahead
    first_ahead = min(r.occurrence for r in ahead)
    last_fired = max(r.occurrence for r in ahead)
    # The first occurrence after the jump is the latest at the stepped clock; the ones it
    # jumped over are skipped, never run (not even once real time reaches them).
    assert first_ahead >= math.floor(timeline.step + STEP), (first_ahead, timeline.step)
    last_before = max(r.occurrence for r in before)
    jumped = [r for r in runs if last_before < r.occurrence < first_ahead]
    assert not jumped, f"skipped occurrences ran: {jumped}"
    resumed = [r for r in runs if r.real > timeline.fix and r.occurrence <= r.real]
    assert resumed, f"no occurrence ran in the {timeline.end - timeline.fix:.1f} s after it"
    first = resumed[0]
    waited = first.real - timeline.fix
    # The occurrences up to the last fired one ran already: the schedule resumes after it,
    # once real time passed it.
    assert first.occurrence > last_fired and first.real >= last_fired, (first, last_fired)
    assert waited <= RESUME_WITHIN, (
        f"resumed {waited:.2f} s after the correction (at most {RESUME_WITHIN:g} s)"
    )
    print(
        f"\nstepped forward {STEP:g} s then corrected: {len(before)} before, {len(ahead)} "
        f"while ahead; real time passed the last fired occurrence "
        f"{last_fired - timeline.fix:.2f} s after the correction, the schedule resumed "
        f"{waited:.2f} s after it; none twice"
    )


def test_one_consumer_stepped_back_of_two_the_occurrences_keep_running(
    timeline: Timeline,
) -> None:
    runs = timeline.runs["fleet"]
    _no_occurrence_twice(runs)
    before = _between(runs, timeline.start, timeline.step)
    back = _between(runs, timeline.step, timeline.fix)
    after = _between(runs, timeline.fix, timeline.fix + AFTER)
    assert len(back) >= 3, f"{len(back)} occurrence(s) in the {STEPPED:g} s of the wrong clock"
    assert len(after) >= 6, f"{len(after)} occurrence(s) in the {AFTER:g} s after"
    ran_by = Counter(r.consumer for r in runs)
    print(
        f"\ntwo consumers, one stepped back {STEP:g} s then corrected: {len(before)} before, "
        f"{len(back)} while it was back, {len(after)} in the {AFTER:g} s after; none twice; "
        f"run by {dict(ran_by)}"
    )
