"""REST API as a WSGI app: serve it with wsgiref, then query and control a worker over HTTP.

Shows ``varmq.rest.wsgi_app`` (standard library only) under ``wsgiref.simple_server`` on a
free loopback port: list the workers, change a worker's concurrency, read it back. To mount it
in Flask instead, under ``/varmq``::

    from werkzeug.middleware.dispatcher import DispatcherMiddleware
    app.wsgi_app = DispatcherMiddleware(app.wsgi_app, {"/varmq": varmq.rest.wsgi_app(token=...)})

Run it with::

    python examples/rest_wsgi.py
"""

from __future__ import annotations

import json
import threading
import urllib.request
from wsgiref.simple_server import WSGIRequestHandler, make_server

import varmq
from varmq.rest import wsgi_app

TOKEN = "change-me"


def call(method: str, url: str) -> object:
    request = urllib.request.Request(url, method=method)
    request.add_header("Authorization", f"Bearer {TOKEN}")
    with urllib.request.urlopen(request, timeout=10) as response:
        body = response.read()
        return json.loads(body) if body else response.status


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def main() -> None:
    worker = varmq.new_worker(lambda job: None, 2, name="resizer")
    server = make_server("127.0.0.1", 0, wsgi_app(token=TOKEN), handler_class=QuietHandler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="wsgiref")
    thread.start()
    base = f"http://127.0.0.1:{server.server_port}"
    try:
        print("GET /health  ->", call("GET", base + "/health"))
        print("GET /workers ->", call("GET", base + "/workers"))
        print(
            "PATCH concurrency 8 ->", call("PATCH", base + "/workers/resizer/config/concurrency/8")
        )
        print("concurrency now:", call("GET", base + "/workers/resizer")["concurrency"])  # type: ignore[index]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
        worker.stop()
        worker.wait_until_stopped(10)


if __name__ == "__main__":
    main()
