"""Prometheus metrics: export worker counters and storage-side queue gauges, then scrape them.

Shows ``varmq.prometheus.VarmqCollector`` on a registry served at ``/metrics`` (here by
prometheus-client's WSGI app under wsgiref on a free port; in a service,
``prometheus_client.start_http_server(9100)`` does the same). A worker runs a few jobs from a
SQLite queue; the script scrapes its own endpoint once and prints the varmq series (all but
the duration histogram's buckets and the status series).

Run it with (prometheus-client: ``pip install 'varmq[prometheus]'``)::

    python examples/prometheus_metrics.py
"""

from __future__ import annotations

import tempfile
import threading
import urllib.request
from pathlib import Path
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

import sqliteq
import varmq
from varmq.prometheus import VarmqCollector


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        queues = sqliteq.new(Path(tmp) / "jobs.db")
        worker = varmq.new_worker(lambda job: None, 2, name="thumbnails")
        handle = worker.with_distributed_queue(queues.new_distributed_queue("images"))

        registry = CollectorRegistry()
        # Every named worker and the queues they bind; job durations are measured from here on.
        VarmqCollector(registry=registry)
        for n in range(5):
            handle.add({"image": n})
        worker.wait_until_idle(10)
        server = make_server("127.0.0.1", 0, make_wsgi_app(registry), handler_class=QuietHandler)
        thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="metrics")
        thread.start()
        try:
            url = f"http://127.0.0.1:{server.server_port}/metrics"
            with urllib.request.urlopen(url, timeout=10) as response:
                text = response.read().decode()
            for line in text.splitlines():
                if line.startswith("varmq_") and 'status="' not in line and "_bucket" not in line:
                    print(line)
        finally:
            server.shutdown()
            server.server_close()
            thread.join(10)
            worker.stop()
            worker.wait_until_stopped(10)
            queues.close()


if __name__ == "__main__":
    main()
