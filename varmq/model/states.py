"""Worker lifecycle states: what is stored, what users see, and the error for each.

The table of which control call raises what in which state lives with these names, so the
dispatcher and the worker share one mapping.
"""

from __future__ import annotations

from enum import Enum

from . import errors

__all__ = ["STATUS_OF", "State", "Status", "state_error"]


class Status(str, Enum):
    """What a worker is doing, as ``Worker.status`` reports it."""

    INITIATED = "Initiated"
    IDLE = "Idle"
    RUNNING = "Running"
    PAUSING = "Pausing"
    PAUSED = "Paused"
    STOPPING = "Stopping"
    STOPPED = "Stopped"
    UNKNOWN = "Unknown"
    """Never reported by a worker; kept because upstream has it."""

    def __str__(self) -> str:
        return self.value


class State(Enum):
    """The stored lifecycle state; Idle and Running are both ACTIVE (told apart by load)."""

    INITIATED = 0
    ACTIVE = 1
    PAUSING = 2
    PAUSED = 3
    STOPPING = 4
    STOPPED = 5


STATUS_OF = {
    State.INITIATED: Status.INITIATED,
    State.PAUSING: Status.PAUSING,
    State.PAUSED: Status.PAUSED,
    State.STOPPING: Status.STOPPING,
    State.STOPPED: Status.STOPPED,
}


def state_error(status: Status) -> errors.VarMQError:
    if status in (Status.RUNNING, Status.IDLE):
        return errors.RunningWorkerError()
    return {
        Status.PAUSING: errors.WorkerPausingError,
        Status.PAUSED: errors.WorkerPausedError,
        Status.STOPPING: errors.WorkerStoppingError,
        Status.STOPPED: errors.WorkerStoppedError,
    }.get(status, errors.NotRunningWorkerError)()
