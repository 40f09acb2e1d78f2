"""``varmq worker MODULE:ATTR --processes N``: a supervisor for a fleet of consumer processes.

Each child is a fresh interpreter running ``python -m varmq worker MODULE:ATTR`` with the
options it was given, minus ``--processes``: started with :mod:`subprocess`, not forked, so no
lock, thread or connection of the supervisor crosses into a child (a fork after a store was
opened would share its socket or file locks; a fork before would still copy whatever the
importing modules started). What a spawned child costs is its start-up, measured in
docs/benchmarks.md; every child starts at once, so a fleet is ready about when one process is.

The supervisor:

- restarts a child that exits while the fleet runs, after a back-off that doubles from 0.5 s
  to 10 s while children die within 10 s of their start, with a log line naming the exit
  status or the signal; gives up (status 1) after :data:`GIVE_UP_AFTER` such quick deaths in a
  row, instead of looping for ever; a child that exits 2 (bad input: the module does not
  import, the attribute is not a worker) ends the fleet at once with status 2; one that exits
  4 (a job ran past its hard timeout, ``--hard-timeout``) is replaced at once, no back-off;
- forwards SIGTERM and SIGINT to every child, which drain as one ``varmq worker`` does with
  ``--grace``; a second signal is forwarded too (the children stop waiting), and children
  still there a few seconds later are killed;
- exits with the worst status of the last children (0 only when every one drained cleanly).

A child watches its parent (:func:`watch_parent`): a SIGKILLed supervisor cannot forward
anything, so each child that sees its parent gone stops itself gracefully, as on SIGTERM.

Locks: none. The supervisor is one thread; signal handlers only set events it polls.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import FrameType

__all__ = ["PARENT_ENV", "factory_target", "supervise", "supervise_factory", "watch_parent"]

log = logging.getLogger("varmq.supervisor")

PARENT_ENV = "VARMQ_SUPERVISOR_PID"
"""Set in each child's environment: the pid of the supervisor it watches."""
CHILD_ENV = "VARMQ_CHILD"
"""Set in each child's environment: its slot, 1 to N (log lines, metrics)."""

FIRST_BACKOFF = 0.5
LONGEST_BACKOFF = 10.0
QUICK_DEATH = 10.0
"""A child that exits within this many seconds of its start died quickly."""
GIVE_UP_AFTER = 5
"""Quick deaths in a row, in one slot, after which the supervisor gives up (status 1)."""
KILL_AFTER_FORCED = 5.0
"""Seconds children get after a second signal before they are killed."""
# Beyond the grace the children apply themselves: their start-up of the stop, their summary.
_GRACE_MARGIN = 10.0
_POLL = 0.1
BAD_INPUT = 2
HARD_TIMEOUT = 4
"""The exit status of :func:`varmq.run` (a ``varmq worker`` process) that ended itself after a
plain job function ran past its timeout by more than its worker's ``hard_timeout``: the
supervisor replaces such a child at once."""


@dataclass
class _Slot:
    """One child of the fleet: its process, and how its restarts are going."""

    number: int
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    quick_deaths: int = 0
    restart_at: float | None = None
    statuses: list[int] = field(default_factory=list)


def _describe(status: int) -> str:
    if status < 0:
        try:
            return f"was killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"was killed by signal {-status}"
    return f"exited with status {status}"


class _Signals:
    """What the signals asked for; set from the handler, read by the loop."""

    def __init__(self) -> None:
        self.first = threading.Event()
        self.second = threading.Event()
        self.signum = signal.SIGTERM

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.first.is_set():
            self.second.set()
            return
        self.signum = signal.Signals(signum)
        self.first.set()


class _Fleet:
    def __init__(
        self, command: Sequence[str], processes: int, env: Callable[[int], dict[str, str]]
    ) -> None:
        self._command = list(command)
        self._env = env
        self.slots = [_Slot(number) for number in range(1, processes + 1)]

    def start(self, slot: _Slot) -> None:
        env = dict(os.environ)
        env.update(self._env(slot.number))
        env[PARENT_ENV] = str(os.getpid())
        env[CHILD_ENV] = str(slot.number)
        # A session of its own: a terminal's Ctrl-C reaches the supervisor only, which forwards
        # it once; had the child had it too, the forwarded copy would count as a second signal.
        slot.process = subprocess.Popen(self._command, env=env, start_new_session=True)
        slot.started = time.monotonic()
        slot.restart_at = None
        log.info("varmq: child %d started (pid %d)", slot.number, slot.process.pid)

    def alive(self) -> list[subprocess.Popen[bytes]]:
        return [s.process for s in self.slots if s.process is not None and s.process.poll() is None]

    def send(self, signum: int) -> None:
        for process in self.alive():
            with contextlib.suppress(ProcessLookupError):  # it just ended
                process.send_signal(signum)

    def kill_all(self) -> None:
        for process in self.alive():
            with contextlib.suppress(ProcessLookupError):
                process.kill()
        for slot in self.slots:
            if slot.process is not None:
                slot.process.wait()


def supervise(
    command: Sequence[str],
    processes: int,
    grace: float,
    env: Callable[[int], dict[str, str]] = lambda number: {},
) -> int:
    """Run ``processes`` children of ``command`` (a full argument list, the interpreter
    first) until SIGTERM or SIGINT; the exit status of the fleet (see the module docstring).
    ``env(number)`` gives what child ``number`` (1 to N) has in its environment beyond ours."""
    if processes < 1:
        raise ValueError(f"varmq: --processes must be at least 1, got {processes}")
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("varmq: a supervisor runs in the main thread, where signals arrive")
    signals = _Signals()
    previous = {
        sig: signal.signal(sig, signals.on_signal) for sig in (signal.SIGTERM, signal.SIGINT)
    }
    fleet = _Fleet(command, processes, env)
    try:
        for slot in fleet.slots:
            fleet.start(slot)
        status = _watch(fleet, signals)
        if status is not None:  # gave up, or a child's bad input: the others are stopped
            _stop(fleet, signals, grace, signal.SIGTERM)
            return status
        return _stop(fleet, signals, grace, signals.signum)
    except BaseException:
        fleet.kill_all()
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _watch(fleet: _Fleet, signals: _Signals) -> int | None:
    """Keep the fleet running until a signal (``None``) or a reason to end it (a status)."""
    while not signals.first.wait(_POLL):
        now = time.monotonic()
        for slot in fleet.slots:
            if slot.restart_at is not None:
                if now >= slot.restart_at:
                    fleet.start(slot)
                continue
            process = slot.process
            if process is None or process.poll() is None:
                continue
            status = process.returncode
            lived = now - slot.started
            if status == BAD_INPUT:
                log.error(
                    "varmq: child %d (pid %d) exited with status 2 (bad input: see its error "
                    "above); stopping the fleet",
                    slot.number,
                    process.pid,
                )
                return BAD_INPUT
            if status == HARD_TIMEOUT:  # it did what it should: a new child takes its place
                log.warning(
                    "varmq: child %d (pid %d) ended itself after %.1f s, a job past its hard "
                    "timeout; starting a new one",
                    slot.number,
                    process.pid,
                    lived,
                )
                slot.quick_deaths = 0
                slot.restart_at = now
                continue
            slot.quick_deaths = slot.quick_deaths + 1 if lived < QUICK_DEATH else 0
            if slot.quick_deaths >= GIVE_UP_AFTER:
                log.error(
                    "varmq: child %d (pid %d) %s %.1f s after its start, the %dth quick exit "
                    "in a row: children die faster than they start; giving up",
                    slot.number,
                    process.pid,
                    _describe(status),
                    lived,
                    slot.quick_deaths,
                )
                return 1
            wait = 0.0
            if slot.quick_deaths:
                wait = min(FIRST_BACKOFF * 2 ** (slot.quick_deaths - 1), LONGEST_BACKOFF)
            log.warning(
                "varmq: child %d (pid %d) %s after %.1f s; starting a new one in %.1f s",
                slot.number,
                process.pid,
                _describe(status),
                lived,
                wait,
            )
            slot.restart_at = now + wait
    return None


def _stop(fleet: _Fleet, signals: _Signals, grace: float, signum: int) -> int:
    """Forward ``signum`` to every child and wait for them: the worst status of those that
    drained (a child killed here, or by a signal, counts 1)."""
    name = signal.Signals(signum).name
    alive = fleet.alive()
    log.info("varmq: %s: stopping %d children (grace %.0f s)", name, len(alive), grace)
    fleet.send(signum)
    deadline = time.monotonic() + grace + _GRACE_MARGIN
    forced_at: float | None = None
    while fleet.alive():
        now = time.monotonic()
        if signals.second.is_set() and forced_at is None:
            forced_at = now
            fleet.send(signum)  # the children stop waiting for their running jobs
        if now >= deadline or (forced_at is not None and now >= forced_at + KILL_AFTER_FORCED):
            left = fleet.alive()
            log.error("varmq: killing %d children that did not stop in time", len(left))
            fleet.kill_all()
            break
        time.sleep(_POLL)
    worst = 0
    for slot in fleet.slots:
        process = slot.process
        if process is None or slot.restart_at is not None:
            continue
        status = process.wait()
        if status != 0:
            log.warning("varmq: child %d (pid %d) %s", slot.number, process.pid, _describe(status))
        worst = max(worst, status if status >= 0 else 1)  # a signal (negative) counts 1
    return worst


def watch_parent() -> None:
    """In a child of a supervisor: stop this process gracefully (as on SIGTERM) once the
    supervisor is gone, so that a SIGKILLed supervisor leaves no child running for ever."""
    expected = os.environ.get(PARENT_ENV)
    if not expected:
        return
    parent = int(expected)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        log.warning("varmq: the supervisor (pid %d) is gone: stopping", parent)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="varmq:parent-watch", daemon=True).start()


def child_command(argv: Sequence[str]) -> list[str]:
    """The command of a child: this interpreter running ``varmq`` with ``argv``."""
    return [sys.executable, "-m", "varmq", *argv]


def factory_target(factory: Callable[[], object]) -> str:
    """``MODULE:NAME`` (or ``/path/script.py:NAME`` for a script run as ``__main__``) that a
    child imports ``factory`` by; ``ValueError`` for a factory no child could import."""
    module = getattr(factory, "__module__", None)
    qualname = getattr(factory, "__qualname__", None)
    if not callable(factory) or not module or not qualname or "<" in qualname:
        raise ValueError(
            f"varmq.run(processes=N) needs a factory defined at the top level of a module, "
            f"which each child imports; got {factory!r}"
        )
    if module == "__main__":
        path = getattr(sys.modules["__main__"], "__file__", None)
        if not path:
            raise ValueError(
                "varmq.run(processes=N): the factory is in __main__ with no file (an "
                "interactive session); define it in a module"
            )
        return f"{os.path.abspath(path)}:{qualname}"
    return f"{module}:{qualname}"


def supervise_factory(factory: Callable[[], object], processes: int, grace: float) -> int:
    """``varmq.run(factory, processes=N)``: N children, each running the workers
    ``factory()`` returns, as ``varmq worker`` runs them; the fleet's exit status."""
    target = factory_target(factory)
    # The children import as this process does: its import path, whatever started it.
    paths = [entry for entry in sys.path if entry and os.path.isdir(entry)]
    env = {"PYTHONPATH": os.pathsep.join(paths)}
    argv = ["worker", target, "--grace", repr(grace)]
    return supervise(child_command(argv), processes, grace, lambda number: env)
