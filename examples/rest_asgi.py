"""REST API as an ASGI app: serve it with uvicorn, then query and control a worker over HTTP.

Shows ``varmq.rest.asgi_app`` with a prefix and a bearer token, served by uvicorn on a free
loopback port; the script asks for the workers, pauses one, reads its queue counts and dead
letters and the health check, then stops the server. To mount it in FastAPI/Starlette instead::

    app.mount("/varmq", varmq.rest.asgi_app(token=os.environ["VARMQ_TOKEN"]))

Run it with (uvicorn comes with the dev extra)::

    python examples/rest_asgi.py
"""

from __future__ import annotations

import json
import socket
import threading
import urllib.request

import uvicorn

import varmq
from varmq.rest import asgi_app

TOKEN = "change-me"


def call(method: str, url: str) -> object:
    request = urllib.request.Request(url, method=method)
    request.add_header("Authorization", f"Bearer {TOKEN}")
    with urllib.request.urlopen(request, timeout=10) as response:
        body = response.read()
        return json.loads(body) if body else response.status


class Server(uvicorn.Server):
    """uvicorn, telling us when it listens."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.ready.set()


def send(job: varmq.Job[dict[str, str]]) -> None:
    if "@" not in job.data["to"]:
        raise ValueError(f"not an address: {job.data['to']!r}")


def main() -> None:
    # One attempt, and no log line for the failure: the dead letter is what this shows.
    worker = varmq.new_worker(
        send, 2, name="mailer", retry=varmq.Retry(max_attempts=1), log_failures=False
    )
    emails = worker.bind_queue(name="emails")
    emails.add({"to": "a@example.com"})
    emails.add({"to": "nobody"})  # fails once and becomes a dead letter
    worker.wait_until_idle(10)

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    base = f"http://127.0.0.1:{sock.getsockname()[1]}/varmq"
    server = Server(uvicorn.Config(asgi_app(prefix="/varmq", token=TOKEN), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="uvicorn")
    thread.start()
    try:
        assert server.ready.wait(10), "uvicorn did not start"
        print("GET /workers ->", call("GET", base + "/workers"))
        print("PATCH pause  ->", call("PATCH", base + "/workers/mailer/actions/pause"))
        worker.wait_until_paused(10)
        print("GET /workers/mailer ->", call("GET", base + "/workers/mailer"))
        print("GET /queues/emails  ->", call("GET", base + "/queues/emails"))
        print("GET /queues/emails/dead ->", call("GET", base + "/queues/emails/dead?limit=10"))
        print("GET /health ->", call("GET", base + "/health"))  # 503 if a storage is down
    finally:
        server.should_exit = True
        thread.join(10)
        worker.stop()
        worker.wait_until_stopped(10)


if __name__ == "__main__":
    main()
