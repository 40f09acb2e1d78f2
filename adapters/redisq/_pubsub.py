"""The pub/sub listener of one ``Queues``: one connection, one thread, every distributed queue.

Why a thread: Redis pushes "enqueued" messages on a subscribed connection, and somebody must read
them while the caller does other things. The thread is named ``redisq:pubsub``, is started by the
first ``subscribe`` (producer-only processes never open the connection) and is stopped by
``Queues.close()``. It is a daemon thread because nothing guarantees that the owner calls
``close()`` before the interpreter exits.

Pub/sub is lossy: messages published while the connection is down are gone. After the listener
re-subscribes a channel, it therefore calls the ``missed`` function each subscriber gave (a
queue's: its callback with "enqueued", so a worker checks the queue instead of waiting for its
next poll; a record listener's: wake every waiter to read again). A callback only ever gets the
messages of its own channel.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError

from ._health import Health
from .errors import FAILURES

if TYPE_CHECKING:
    from redis.client import PubSub

    from ._script import Client

__all__ = ["Listener"]

Callback = Callable[[str], None]
Missed = Callable[[], None]
"""Called once after a re-subscription: messages of the channel may have been lost."""

# How long one read waits for a message: bounds how late a new subscription is sent and how
# late close() is noticed.
_READ_SECONDS = 0.05
_MAX_BACKOFF_SECONDS = 1.0


class Listener:
    """Reads every channel the distributed queues of one ``Queues`` subscribed to."""

    def __init__(self, client: Client, health: Health, confirm_seconds: float = 3.0) -> None:
        self._client = client
        self._health = health
        self._confirm_seconds = confirm_seconds
        # Protects _callbacks, _confirmed, _ever_confirmed, _down and confirmations; the
        # condition wakes subscribe() and tests waiting for a (re)subscription.
        # Invariant: _confirmed holds only channels of _callbacks the server confirmed on the
        # current connection.
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._callbacks: dict[str, list[Callback]] = {}
        # (channel, callback) -> what to call after a re-subscription; absent: nothing.
        self._missed: dict[tuple[str, Callback], Missed] = {}
        self._confirmed: set[str] = set()
        self._ever_confirmed: set[str] = set()
        self._down = False
        # Failed attempts to reach Redis so far, and the last one's exception: subscribe()
        # gives up at the first failure after it registered its callback.
        self._failures = 0
        self._last_failure: BaseException | None = None
        # Subscriptions the server confirmed so far, re-subscriptions included: grows after
        # every reconnect, which is what tests wait for.
        self.confirmations = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def subscribe(
        self, channel: str, callback: Callback, missed: Missed | None = None
    ) -> BaseException | None:
        """Call ``callback`` with each message on ``channel``, and ``missed()`` once after each
        re-subscription (messages sent meanwhile are lost).

        Returns ``None`` once the server confirmed the subscription (so an enqueue made
        afterwards is heard). When the next attempt to reach Redis fails, or nothing is
        confirmed within the listener's confirm time (a connect and a reply), the callback is
        dropped again and the failure is returned (the caller raises); the thread keeps
        serving the other subscriptions and reconnects on its own.
        """
        with self._changed:
            if self._stop.is_set():
                return None
            self._callbacks.setdefault(channel, []).append(callback)
            if missed is not None:
                self._missed[(channel, callback)] = missed
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="redisq:pubsub", daemon=True)
                self._thread.start()
            failures = self._failures
            confirmed = self._changed.wait_for(
                lambda: (
                    channel in self._confirmed or self._failures > failures or self._stop.is_set()
                ),
                self._confirm_seconds,
            )
            if channel in self._confirmed or self._stop.is_set():
                return None
            failure: BaseException = (
                self._last_failure
                if confirmed and self._last_failure is not None
                else TimeoutError(
                    f"no confirmation of the subscription within {self._confirm_seconds:g} s"
                )
            )
        self.unsubscribe(channel, callback)
        return failure

    def unsubscribe(self, channel: str, callback: Callback) -> None:
        """Stop calling ``callback`` for ``channel``; unknown pairs are ignored."""
        with self._lock:
            callbacks = self._callbacks.get(channel, [])
            if callback in callbacks:
                callbacks.remove(callback)
            if callback not in callbacks:
                self._missed.pop((channel, callback), None)
            if not callbacks:
                self._callbacks.pop(channel, None)
                self._confirmed.discard(channel)

    @property
    def connected(self) -> bool:
        """Whether the last attempt to reach Redis worked (``True`` before the first one)."""
        return not self._down

    @property
    def running(self) -> bool:
        """Whether the thread ``redisq:pubsub`` is alive."""
        return self._thread is not None and self._thread.is_alive()

    def wait_for(self, predicate: Callable[[Listener], bool], timeout: float) -> bool:
        """Wait until ``predicate(self)`` holds, re-checked on every change; for tests."""
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self), timeout)

    def close(self) -> None:
        """Stop the thread and close the connection; later subscribes are ignored."""
        with self._changed:
            self._stop.set()
            thread = self._thread
            self._changed.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5.0)

    def _run(self) -> None:
        # Any: redis-py annotates PubSub in some releases (8.2) and not in others (8.1).
        pubsub: Any = None
        requested: set[str] = set()
        backoff = _READ_SECONDS
        while not self._stop.is_set():
            try:
                if pubsub is None:
                    client: Any = self._client
                    pubsub = client.pubsub()
                    requested = set()
                with self._lock:
                    wanted = set(self._callbacks)
                for channel in wanted - requested:
                    pubsub.subscribe(channel)
                    requested.add(channel)
                if requested - wanted:
                    pubsub.unsubscribe(*(requested - wanted))
                    requested &= wanted
                if not requested:
                    self._stop.wait(_READ_SECONDS)
                    continue
                message = pubsub.get_message(timeout=_READ_SECONDS)
                backoff = _READ_SECONDS
                if message is not None:
                    self._handle(message)
            except FAILURES as exc:
                self._health.failed("", "pub/sub", exc)
                _close_quietly(pubsub)
                pubsub = None
                with self._changed:
                    self._confirmed.clear()
                    self._down = True
                    self._failures += 1
                    self._last_failure = exc
                    self._changed.notify_all()
                self._stop.wait(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF_SECONDS)
        _close_quietly(pubsub)

    def _handle(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        channel = _text(message.get("channel", b""))
        if kind == "subscribe":
            with self._lock:
                again = channel in self._ever_confirmed
                missed = [
                    self._missed[(channel, callback)]
                    for callback in self._callbacks.get(channel, [])
                    if (channel, callback) in self._missed
                ]
            if again:
                # Messages sent while we were away are lost: each subscriber says what to do.
                self._call_missed(channel, missed)
            self._health.ok()
            with self._changed:
                if channel in self._callbacks:
                    self._confirmed.add(channel)
                self._ever_confirmed.add(channel)
                self._down = False
                self.confirmations += 1
                self._changed.notify_all()
        elif kind == "message":
            with self._lock:
                callbacks = list(self._callbacks.get(channel, []))
            self._call(channel, callbacks, _text(message.get("data", b"")))

    def _call_missed(self, channel: str, missed: list[Missed]) -> None:
        for function in missed:
            try:
                function()
            except Exception:
                self._health.warn_once(
                    ("missed", channel, repr(function)),
                    f"redisq: a subscriber of {channel} raised after a reconnection; ignored",
                    exc_info=True,
                )

    def _call(self, channel: str, callbacks: list[Callback], action: str) -> None:
        for callback in callbacks:
            try:
                callback(action)
            except Exception:
                # A subscriber's bug must not stop the others or the listener.
                self._health.warn_once(
                    ("callback", channel, repr(callback)),
                    f"redisq: subscriber {callback!r} of {channel} raised; it keeps being called",
                    exc_info=True,
                )


def _close_quietly(pubsub: PubSub | None) -> None:
    if pubsub is None:
        return
    # The connection is being thrown away; an error while closing it changes nothing.
    with contextlib.suppress(RedisError, OSError):
        pubsub.close()


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
