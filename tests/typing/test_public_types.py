"""The public API's types, checked by running mypy --strict on code a user would write."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from mypy import api

import varmq

SNIPPETS = Path(__file__).parent / "snippets"
ROOT = Path(__file__).parents[2]


def _mypy(path: Path) -> tuple[str, int]:
    out, err, status = api.run(
        ["--config-file", str(ROOT / "pyproject.toml"), "--no-error-summary", str(path)]
    )
    return out + err, status


def test_code_a_user_writes_type_checks_and_infers_the_worker_types() -> None:
    out, status = _mypy(SNIPPETS / "accepted.py")
    assert status == 0, out


def test_mypy_rejects_misspelt_and_mistyped_worker_options() -> None:
    source = (SNIPPETS / "rejected.py").read_text().splitlines()
    expected = {
        number: match.group(1)
        for number, line in enumerate(source, start=1)
        if (match := re.search(r"# expect: ([a-z-]+)", line))
    }
    out, status = _mypy(SNIPPETS / "rejected.py")
    assert status == 1
    reported = {
        int(m.group(1)): m.group(2)
        for m in re.finditer(r"rejected\.py:(\d+): error: .*\[([a-z-]+)\]", out)
    }
    assert reported == expected, out


def test_worker_options_name_exactly_the_keywords_of_the_worker() -> None:
    keywords = {
        name
        for name, parameter in inspect.signature(varmq.BaseWorker.__init__).parameters.items()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY
    }
    assert set(varmq.WorkerOptions.__annotations__) == keywords
