"""The REST API described as OpenAPI 3.1: what ``GET /openapi.json`` serves.

The description is data, written once here; :mod:`varmq.ops.rest` serves it, and the test suite
uses it as the oracle of a property-based fuzz: every route, every method, any parameter, must
answer one of the statuses listed for it (or 401, 404, 405), never a 500.
"""

from __future__ import annotations

from typing import Any

__all__ = ["openapi"]

_ERROR = {
    "type": "object",
    "properties": {"error": {"type": "string"}},
    "required": ["error"],
}
_NAME = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}


def _reply(description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    body = {"content": {"application/json": {"schema": schema}}} if schema else {}
    return {"description": description, **body}


def _errors(*codes: int) -> dict[str, Any]:
    meaning = {
        400: "bad input: the message names it",
        401: "missing or wrong bearer token",
        404: "no such worker, queue or job",
        409: "the worker's state forbids it, a call on the worker still runs, or the job ended",
        503: "not done within control_timeout, too many calls running, or storage unreachable",
    }
    return {str(code): _reply(meaning[code], _ERROR) for code in (401, *codes)}


def _operation(summary: str, ok: str, *errors: int, params: list[Any] | None = None) -> Any:
    return {
        "summary": summary,
        "parameters": params or [],
        "responses": {"200": _reply(ok, {"type": ["object", "array"]}), **_errors(*errors)},
    }


def openapi(prefix: str = "") -> dict[str, Any]:
    """The OpenAPI 3.1 description of the routes, under ``prefix`` (the app's mount point)."""
    action = {
        "name": "action",
        "in": "path",
        "required": True,
        "schema": {"enum": ["pause", "resume", "stop", "restart", "start"]},
    }
    concurrency = {
        "name": "n",
        "in": "path",
        "required": True,
        "description": "the new concurrency; n <= 0 means the CPU count",
        "schema": {"type": "integer", "minimum": -(2**31 - 1), "maximum": 2**31 - 1},
    }
    job_id = {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}
    limit = {
        "name": "limit",
        "in": "query",
        "required": False,
        "schema": {"type": "integer", "minimum": 1, "maximum": 10_000, "default": 100},
    }
    health = {
        "summary": "Whether every bound queue's storage answers (no token needed)",
        "security": [],
        "parameters": [],
        "responses": {
            "200": _reply("every storage answers", {"type": "object"}),
            "503": _reply("some storage does not answer", {"type": "object"}),
        },
    }
    paths = {
        "/health": {"get": health},
        "/openapi.json": {"get": _operation("This description", "OpenAPI 3.1")},
        "/workers": {
            "get": _operation(
                "Every served worker's summary, then the records of the other workers (any "
                "process) that the stores of their storage queues keep",
                "a list",
            )
        },
        "/workers/{name}": {
            "get": _operation("One worker, with its metrics", "the worker", 404, params=[_NAME])
        },
        "/workers/{name}/actions/{action}": {
            "patch": _operation(
                "Pause, resume, stop, restart or start a worker",
                "done (empty body)",
                400,
                404,
                409,
                503,
                params=[_NAME, action],
            )
        },
        "/workers/{name}/config/concurrency/{n}": {
            "patch": _operation(
                "Change a worker's concurrency (tune_pool)",
                "done (empty body)",
                400,
                404,
                409,
                503,
                params=[_NAME, concurrency],
            )
        },
        "/queues": {"get": _operation("Every queue the workers bind", "a list")},
        "/queues/{name}": {"get": _operation("One queue", "the queue", 404, params=[_NAME])},
        "/queues/{name}/dead": {
            "get": _operation(
                "A queue's dead letters, oldest first",
                "a list",
                400,
                404,
                503,
                params=[_NAME, limit],
            )
        },
        "/queues/{name}/jobs/{id}": {
            "get": _operation(
                "A job's record", "the record", 400, 404, 503, params=[_NAME, job_id]
            ),
            "delete": _operation(
                "Cancel a job", '{"cancelled": true}', 400, 404, 409, 503, params=[_NAME, job_id]
            ),
        },
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "varmq workers", "version": "1"},
        "servers": [{"url": prefix or "/"}],
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
        "paths": paths,
    }
