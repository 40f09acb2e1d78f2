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

__all__ = ["run", "run_async"]

log = logging.getLogger("varmq.service")

AnyWorker = BaseWorker[Any, Any, Any]
Hook = Callable[[], Any]

# Exit statuses of run(): every running job finished in time; some were left to their leases.
CLEAN = 0
ABANDONED = 1


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


def run(
    worker: AnyWorker,
    *workers: AnyWorker,
    grace: float = 30.0,
    on_startup: Hook | None = None,
    on_shutdown: Hook | None = None,
) -> int:
    """Run ``worker`` (and ``workers``) until SIGTERM or SIGINT, then stop them gracefully.

    Blocks; call it from the main thread (signals are delivered there). Returns the exit
    status: 0 when every running job finished within ``grace`` seconds and was acknowledged, 1
    when some were left to their leases or their acknowledgement failed (the job, not the
    process, is what a lease protects). ``on_startup`` runs before the workers start,
    ``on_shutdown`` after they stopped (or the grace ended). The workers' own ``on_shutdown``
    hooks wait for every worker given here to stop, then run once each.
    """
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
        while not shutdown.requested.wait(0.5):  # a timeout, so that signal handlers run
            pass
        started = _stop(every, shutdown)
        deadline = started + grace
        for each in every:
            while not each.wait_until_stopped(timeout=0.1):
                if shutdown.forced.is_set() or time.monotonic() >= deadline:
                    break
        # A function past its timeout still runs after its worker stopped: it has the grace.
        while not _settled(every) and not shutdown.forced.wait(0.05):
            if time.monotonic() >= deadline:
                break
        _run_hooks(hooks)
        status = _summary(every, started, shutdown)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if on_shutdown is not None:
        on_shutdown()
    return status


async def run_async(
    worker: AnyWorker,
    *workers: AnyWorker,
    grace: float = 30.0,
    on_startup: Hook | Callable[[], Awaitable[Any]] | None = None,
    on_shutdown: Hook | Callable[[], Awaitable[Any]] | None = None,
) -> int:
    """:func:`run` for an asyncio program: the running loop handles SIGTERM and SIGINT.

    The hooks may be plain or ``async def`` functions. Returns the exit status as :func:`run`.
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
        await asked.wait()
        started = _stop(every, shutdown)
        deadline = started + grace
        while not _settled(every):
            if shutdown.forced.is_set() or time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.05)
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
