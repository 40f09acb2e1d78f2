"""The adapters' copies of ``varmq.topic_names`` (they never import varmq) are the same code."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _code(path: Path) -> str:
    """The module without its docstring, as a normalised syntax tree."""
    tree = ast.parse(path.read_text("utf-8"))
    body = tree.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return ast.dump(ast.Module(body=body, type_ignores=[]))


@pytest.mark.parametrize(
    "copy", ["adapters/sqliteq/_topic_names.py", "adapters/redisq/topic_names.py"]
)
def test_the_copy_is_the_code_of_varmq_topic_names(copy: str) -> None:
    assert _code(ROOT / copy) == _code(ROOT / "varmq/topic_names.py"), (
        f"{copy} differs from varmq/topic_names.py: copy it again"
    )
