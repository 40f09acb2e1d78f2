"""Every script in ``examples/`` runs to completion and exits 0.

Each ``examples/*.py`` is run as its own process (``python examples/<name>.py``) from the
repository root. Marker comments, each on a line of its own anywhere in the script, adjust
how it is run:

- ``# example: requires <what>``: the example needs a service (a Redis server, several
  hosts...) and is run by its own test elsewhere; here it is reported as skipped, with
  ``<what>`` as the reason, never left out silently.
- ``# example: args <arguments>``: command-line arguments to run it with (split like a shell).
- ``# example: timeout <seconds>``: how long it may take (default 60).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
DEFAULT_TIMEOUT = 60.0

_MARKER = re.compile(r"^\s*#\s*example:\s*(requires|args|timeout)\b[ \t]*(.*?)\s*$", re.MULTILINE)


def markers(script: Path) -> dict[str, str]:
    """The ``# example: <key> <value>`` markers of ``script``; the last of each key wins."""
    return {key: value for key, value in _MARKER.findall(script.read_text(encoding="utf-8"))}


def test_examples_are_found() -> None:
    assert EXAMPLES, "no examples/*.py found"


@pytest.mark.timeout(0)  # the subprocess has its own timeout
@pytest.mark.parametrize("script", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs_and_exits_zero(script: Path) -> None:
    marks = markers(script)
    if "requires" in marks:
        pytest.skip(f"{script.name} requires {marks['requires'] or 'a service'}; run elsewhere")
    timeout = float(marks.get("timeout") or DEFAULT_TIMEOUT)
    env = dict(os.environ)
    paths = [str(ROOT), str(ROOT / "adapters"), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    command = [sys.executable, str(script), *shlex.split(marks.get("args", ""))]
    try:
        done = subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(
            f"{script.name} did not finish within {timeout:g} s\n"
            f"--- stdout ---\n{_text(exc.stdout)}\n--- stderr ---\n{_text(exc.stderr)}"
        )
    assert done.returncode == 0, (
        f"{shlex.join(command)} exited {done.returncode}\n"
        f"--- stdout ---\n{done.stdout}\n--- stderr ---\n{done.stderr}"
    )


def _text(output: str | bytes | None) -> str:
    if output is None:
        return ""
    return output if isinstance(output, str) else output.decode(errors="replace")
