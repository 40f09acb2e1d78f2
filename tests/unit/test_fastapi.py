"""A FastAPI app through httpx.ASGITransport: POST queues, the lifespan-started worker runs the
job on the app's loop, and shutdown drains."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]


def _example() -> Any:
    spec = importlib.util.spec_from_file_location("fastapi_app", ROOT / "examples/fastapi_app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fastapi_app"] = module
    spec.loader.exec_module(module)
    return module


def test_post_queues_the_lifespan_worker_runs_it_and_shutdown_drains(tmp_path: Path) -> None:
    example = _example()
    example.SENT.clear()

    async def main() -> None:
        app = example.create_app(str(tmp_path / "emails.db"))
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
                posted = await asyncio.gather(
                    *(client.post("/emails", json={"to": f"u{n}@example.com"}) for n in range(50))
                )
                assert all(r.status_code == 200 and r.json() == {"queued": True} for r in posted)
        # Shutdown waited for the queue to drain before it stopped the worker.
        assert sorted(example.SENT) == sorted(f"u{n}@example.com" for n in range(50))

    asyncio.run(main())
