"""The one error of the ``varmq`` command: a failure to report on one line, with its exit code
(shared by the command's modules, :mod:`varmq.ops.cli` and those it calls)."""

from __future__ import annotations

__all__ = ["CliError"]


class CliError(Exception):
    """A failure to report on one line, with its exit code."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code
