"""Running workers as a service: :func:`run` and :func:`run_async` own SIGTERM and SIGINT.

What an operator's process manager (systemd, Docker, Kubernetes) expects of a consumer:

1. it starts the workers (after ``on_startup``) and runs until SIGTERM or SIGINT;
2. on the first signal every worker stops taking at once; jobs taken from storage but not
   started go back to storage at once (their lease released); running jobs get ``grace``
   seconds to finish and be acknowledged;
3. jobs still running when the grace ends are left to their leases (another consumer gets them
   when the lease expires) and reported; a plain function still running past its timeout (its
   job already settled) is running too: it gets the grace and is counted; a second signal ends
   the wait at once;
4. the workers' own ``on_shutdown`` hooks run, once every worker has stopped (a store one
   worker's hook closes may hold another worker's jobs), each distinct hook once; then one
   summary line is logged, then ``run``'s own ``on_shutdown``;
5. the exit status is 0 after a clean drain, 1 when jobs were left running or a settle failed
   (an acknowledgement the storage refused: that job runs again).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from types import FrameType
from typing import Any

from ..api.worker import BaseWorker
from ..model import validate
from ..model.states import Status
from .hard_limit import HardLimit, Overrun
from .hard_limit import apply_hard_timeout as apply_hard_timeout
from .supervisor import HARD_TIMEOUT

__all__ = ["run", "run_async"]

log = logging.getLogger("varmq.service")

AnyWorker = BaseWorker[Any, Any, Any]
Hook = Callable[[], Any]

# Exit statuses of run(): every running job finished in time; some were left to their leases.
CLEAN = 0
ABANDONED = 1
# HARD_TIMEOUT (4, from the supervisor, which restarts a child that exits with it): a plain
# function ran past its job's timeout by more than its worker's hard_timeout, and the process
# ended itself. (2 and 3 are the command's: bad input, a store busy at start-up.)

# How long the workers' on_shutdown hooks may take once a hard timeout ends the process: the
# point is to end it, so a hook that hangs is not waited for.
_HARD_HOOKS = 5.0
# How long acknowledgements still on their way (held for their take, or being sent) may take
# to reach the storage before a hard timeout ends the process.
_HARD_ACKS = 1.0


class _Shutdown:
    """What the signals asked for, guarded by a lock: set from a signal handler or the loop."""

    def __init__(self) -> None:
        self.requested = threading.Event()
        self.forced = threading.Event()
        self.signal_name = ""

    def ask(self, signum: int) -> None:
        if self.requested.is_set():
            self.forced.set()  # a second signal: do not wait out the grace
            return
        self.signal_name = signal.Signals(signum).name
        self.requested.set()


def _check(workers: Sequence[object], grace: float) -> list[AnyWorker]:
    if not workers:
        raise TypeError("varmq.run: give at least one worker")
    for worker in workers:
        if not isinstance(worker, BaseWorker):
            raise TypeError(f"varmq.run: {worker!r} is not a varmq worker")
    validate.seconds("grace", grace)
    return list(workers)  # type: ignore[arg-type]


def _start(workers: list[AnyWorker]) -> None:
    for worker in workers:
        if worker.status in (Status.INITIATED, Status.STOPPED):
            worker.start()


def _stop(workers: list[AnyWorker], shutdown: _Shutdown) -> float:
    log.info(
        "varmq: %s: stopping %s", shutdown.signal_name or "shutdown", plural(len(workers), "worker")
    )
    for worker in workers:
        if worker.status not in (Status.STOPPED, Status.INITIATED):
            worker.stop()
    return time.monotonic()


def _held_hooks(workers: list[AnyWorker]) -> list[Hook]:
    """Take the workers' ``on_shutdown`` hooks over: each distinct one, in worker order."""
    hooks: list[Hook] = []
    for worker in workers:
        hook = worker._hold_shutdown_hook()
        if hook is not None and hook not in hooks:  # == : the same bound method counts once
            hooks.append(hook)
    return hooks


def _run_hooks(hooks: list[Hook]) -> None:
    """Run the workers' hooks, each even if one before it raised (logged, not raised)."""
    for hook in hooks:
        try:
            hook()
        except Exception:
            log.exception("varmq: an on_shutdown hook raised")


def plural(n: int, noun: str) -> str:
    """``"1 job"``, ``"2 jobs"``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _settled(workers: list[AnyWorker]) -> bool:
    """Whether every worker stopped and no function of theirs still runs past its timeout."""
    return all(w.is_stopped and not w.num_running_past_timeout for w in workers)


def _summary(workers: list[AnyWorker], started: float, shutdown: _Shutdown) -> int:
    """Log one line about how the workers stopped; the exit status."""
    overrunning = sum(w.num_running_past_timeout for w in workers)
    past = f" ({overrunning} past {'its' if overrunning == 1 else 'their'} timeout)"
    running = sum(w.num_processing for w in workers if not w.is_stopped) + sum(
        w.num_running_past_timeout for w in workers if w.is_stopped
    )
    completed = sum(w.metrics.completed for w in workers)
    released = sum(w.metrics.released for w in workers)
    unsettled = sum(w.metrics.unacknowledged for w in workers)
    took = time.monotonic() - started
    line = (
        f"varmq: stopped {plural(len(workers), 'worker')} in {took:.1f} s after "
        f"{shutdown.signal_name or 'shutdown'}: {plural(completed, 'job')} completed, "
        f"{released} taken {'job' if released == 1 else 'jobs'} handed back to storage, "
        f"{running} still running{past if overrunning else ''}, {unsettled} not acknowledged"
    )
    if running or unsettled:
        log.warning(
            "%s (left to their leases: those jobs run again, on this or another consumer, "
            "once their lease runs out)",
            line,
        )
        return ABANDONED
    log.info("%s", line)
    return CLEAN


def _end_hard(
    workers: list[AnyWorker], hooks: list[Hook], overrun: Overrun, shutdown: _Shutdown
) -> int:
    """A function ran past its worker's ``hard_timeout``: stop every worker as SIGTERM does
    (taken jobs not started go back to storage), but give the running functions no grace:
    their jobs go back to storage at once where it can take them (``nack`` with no delay, so
    the delivery counts), else they are left to their leases; acknowledgements on their way
    get a moment, the workers' hooks run (for at most ``_HARD_HOOKS`` seconds). The exit
    status, :data:`HARD_TIMEOUT`.

    The functions still running are left to the process's exit: the threads that run plain
    job functions are daemon threads, so returning the status (and the command's exit with it)
    ends the process under them; no ``os._exit`` is needed, and log handlers and the store's
    own hooks get their normal shutdown."""
    log.error("%s", overrun.line())
    began = time.monotonic()
    if not shutdown.requested.is_set():
        shutdown.signal_name = "hard_timeout"
        _stop(workers, shutdown)
    handed = left = 0
    for worker in workers:
        given, kept = worker._give_back_running(_HARD_ACKS)
        handed += given
        left += kept
    hooking = threading.Thread(
        target=_run_hooks, args=(hooks,), name="varmq:hard-timeout:hooks", daemon=True
    )
    hooking.start()
    hooking.join(_HARD_HOOKS)
    if hooking.is_alive():
        log.warning(
            "varmq: the on_shutdown hooks did not end within %g s; not waited for", _HARD_HOOKS
        )
    completed = sum(w.metrics.completed for w in workers)
    released = sum(w.metrics.released for w in workers)
    unsettled = sum(w.metrics.unacknowledged for w in workers)
    leases = (
        f", {left} left to {'its lease' if left == 1 else 'their leases'} (their storage "
        "cannot take a running job back: they run again once the lease runs out)"
        if left
        else ""
    )
    log.warning(
        "varmq: stopped %s in %.1f s after hard_timeout: %s completed, %d taken %s handed "
        "back to storage, %d running %s handed back to storage to run again at once%s, %d not "
        "acknowledged; functions still running end with the process (exit status %d)",
        plural(len(workers), "worker"),
        time.monotonic() - began,
        plural(completed, "job"),
        released,
        "job" if released == 1 else "jobs",
        handed,
        "job" if handed == 1 else "jobs",
        leases,
        unsettled,
        HARD_TIMEOUT,
    )
    return HARD_TIMEOUT


def run(
    worker: AnyWorker | Callable[[], Any],
    *workers: AnyWorker,
    grace: float = 30.0,
    on_startup: Hook | None = None,
    on_shutdown: Hook | None = None,
    processes: int = 1,
) -> int:
    """Run ``worker`` (and ``workers``) until SIGTERM or SIGINT, then stop them gracefully.

    With ``processes`` above 1, ``worker`` is a zero-argument factory defined at the top level
    of a module (or of the script being run) returning the workers: this process becomes a
    supervisor of that many children, each importing the factory and running its workers as
    ``varmq worker MODULE:FACTORY --processes N`` does (docs/deploy.md); the hooks are then
    the children's business (give the workers their own).

    Blocks; call it from the main thread (signals are delivered there). Returns the exit
    status: 0 when every running job finished within ``grace`` seconds and was acknowledged, 1
    when some were left to their leases or their acknowledgement failed (the job, not the
    process, is what a lease protects). ``on_startup`` runs before the workers start,
    ``on_shutdown`` after they stopped (or the grace ended). The workers' own ``on_shutdown``
    hooks wait for every worker given here to stop, then run once each.

    A worker with ``hard_timeout`` ends the process when one of its plain functions runs that
    many seconds past its job's timeout (the job already failed as timed out): one ERROR line,
    the workers stopped as on SIGTERM but with no grace (their running jobs go back to
    storage at once where it can take them, else to their leases), and the status 4
    (:data:`HARD_TIMEOUT`), for a supervisor to start a fresh process.
    """
    if processes != 1:
        return _run_processes(worker, workers, grace, on_startup, on_shutdown, processes)
    every = _check((worker, *workers), grace)
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError(
            "varmq.run: call it from the main thread, which is where signals arrive; from "
            "other threads, stop the workers yourself (stop_and_wait)"
        )
    shutdown = _Shutdown()
    hooks = _held_hooks(every)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        shutdown.ask(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        if on_startup is not None:
            on_startup()
        _start(every)
        hard = HardLimit(every)
        # A timeout, so that signal handlers run (and, with a hard_timeout, to look at it).
        while not shutdown.requested.wait(hard.period or 0.5):
            if hard.tripped():
                break
        if not hard.tripped():
            started = _stop(every, shutdown)
            deadline = started + grace
            for each in every:
                while not each.wait_until_stopped(timeout=0.1):
                    if shutdown.forced.is_set() or time.monotonic() >= deadline or hard.tripped():
                        break
            # A function past its timeout still runs after its worker stopped: it has the grace
            # (within its hard_timeout).
            while not _settled(every) and not shutdown.forced.wait(0.05):
                if time.monotonic() >= deadline or hard.tripped():
                    break
        if hard.overrun is not None:
            status = _end_hard(every, hooks, hard.overrun, shutdown)
        else:
            _run_hooks(hooks)
            status = _summary(every, started, shutdown)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if on_shutdown is not None:
        on_shutdown()
    return status


def _run_processes(
    factory: Any,
    workers: tuple[AnyWorker, ...],
    grace: float,
    on_startup: Hook | None,
    on_shutdown: Hook | None,
    processes: int,
) -> int:
    from .supervisor import supervise_factory

    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
        raise ValueError(f"varmq.run: processes must be a count of at least 1, got {processes!r}")
    if workers or isinstance(factory, BaseWorker) or on_startup or on_shutdown:
        raise TypeError(
            "varmq.run(factory, processes=N) takes one zero-argument factory that each child "
            "calls (workers made here cannot cross into another process), and no hooks"
        )
    validate.seconds("grace", grace)
    return supervise_factory(factory, processes, grace)


async def run_async(
    worker: AnyWorker,
    *workers: AnyWorker,
    grace: float = 30.0,
    on_startup: Hook | Callable[[], Awaitable[Any]] | None = None,
    on_shutdown: Hook | Callable[[], Awaitable[Any]] | None = None,
) -> int:
    """:func:`run` for an asyncio program: the running loop handles SIGTERM and SIGINT.

    The hooks may be plain or ``async def`` functions. Returns the exit status as :func:`run`,
    ``hard_timeout`` included.
    """
    every = _check((worker, *workers), grace)
    loop = asyncio.get_running_loop()
    shutdown = _Shutdown()
    hooks = _held_hooks(every)
    asked = asyncio.Event()

    def on_signal(signum: int) -> None:
        shutdown.ask(signum)
        asked.set()

    installed = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
        installed.append(sig)
    try:
        await _call(on_startup)
        _start(every)
        hard = HardLimit(every)
        if hard.period is None:
            await asked.wait()
        else:
            while not asked.is_set() and not hard.tripped():
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(asked.wait(), hard.period)
        if not hard.tripped():
            started = _stop(every, shutdown)
            deadline = started + grace
            while not _settled(every):
                if shutdown.forced.is_set() or time.monotonic() >= deadline or hard.tripped():
                    break
                await asyncio.sleep(0.05)
        if hard.overrun is not None:
            # Storage calls and the hooks: off the loop.
            status = await asyncio.to_thread(_end_hard, every, hooks, hard.overrun, shutdown)
        else:
            await asyncio.to_thread(_run_hooks, hooks)  # a store's close may block
            status = _summary(every, started, shutdown)
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
    await _call(on_shutdown)
    return status


async def _call(hook: Hook | Callable[[], Awaitable[Any]] | None) -> None:
    if hook is None:
        return
    result = hook()
    if inspect.isawaitable(result):
        await result
