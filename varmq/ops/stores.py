"""Opening a store by URL for operator tools, through the adapter the URL's scheme names.

An adapter is a module with ``URL_SCHEMES`` (the schemes it opens) and ``open_url(url)``
(its ``Queues``, checked to answer: a missing file or an unreachable server raises). The
built-in adapters are found by :data:`SCHEMES` (``sqlite:`` and plain paths: ``sqliteq``;
``redis://``, ``rediss://``, ``unix://``: ``redisq``), others by the ``varmq.stores``
entry-point group: an entry point names such a module (``mystore = "mystore"``), and
``varmq stats|watch|dead|requeue-dead|purge`` then work on its URLs too. An adapter is imported
only when a URL asks for it; the core imports none.

:func:`redact_url` is the redaction every operator message uses for a URL it could not open
(an opened store names itself by its ``location``, which its adapter already redacted): the
password of the user info and the value of every ``*password=`` query parameter become
``***`` (:func:`varmq.contract.urls.redact_url`, which redisq's messages use too).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import re
from collections.abc import Iterator, Mapping
from importlib.metadata import entry_points
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from ..contract.urls import HIDDEN, redact_url

__all__ = ["ENTRY_POINT_GROUP", "SCHEMES", "StoreError", "open_store", "redact_url", "scrub"]

SCHEMES: dict[str, str] = {
    "": "sqliteq",
    "sqlite": "sqliteq",
    "redis": "redisq",
    "rediss": "redisq",
    "unix": "redisq",
}
"""URL scheme -> adapter module, for the adapters that ship with varmq (``""``: a plain path)."""
ENTRY_POINT_GROUP = "varmq.stores"
"""The entry-point group where third-party adapters name their module."""

# What to install when a built-in adapter's dependencies are missing.
_EXTRAS = {"redisq": "pip install 'varmq[redis]'"}
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")


class StoreError(Exception):
    """A store that cannot be opened: bad URL, no adapter for it, missing, refused, unreachable.

    The message is one line that names the store without its credentials.
    """


def scheme_of(url: str) -> str:
    """The URL's scheme, lower case; ``""`` for a plain file path.

    Something before a colon is a scheme only when the URL has ``://`` or the scheme is one an
    adapter ships with, so that ``C:\\jobs.db`` or ``a:b.db`` stay paths.
    """
    match = _SCHEME.match(url)
    if match is None:
        return ""
    scheme = match.group(1).lower()
    if url[match.end() :].startswith("//") or scheme in SCHEMES:
        return scheme
    return ""


def adapter_for(url: str) -> Any:
    """The adapter (a module with ``URL_SCHEMES`` and ``open_url``) that opens ``url``, imported
    now; :class:`StoreError` when none."""
    scheme = scheme_of(url)
    name = SCHEMES.get(scheme)
    if name is not None:
        try:
            return importlib.import_module(name)
        except ImportError as exc:
            hint = _EXTRAS.get(name, f"install the {name} package")
            raise StoreError(
                f"varmq: {scheme or 'file'} URLs need {name}: {hint} ({exc})"
            ) from None
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        try:
            module = entry.load()
        except Exception as exc:
            raise StoreError(
                f"varmq: the {ENTRY_POINT_GROUP} entry point {entry.name!r} ({entry.value}) "
                f"cannot be loaded: {type(exc).__name__}: {exc}"
            ) from None
        if scheme in tuple(getattr(module, "URL_SCHEMES", ())) and hasattr(module, "open_url"):
            return module
    known = sorted({*(s for s in SCHEMES if s), *_entry_point_schemes()})
    raise StoreError(
        f"varmq: unsupported URL {redact_url(url)!r}: give a SQLite file path or a URL with "
        f"one of the schemes {', '.join(s + ':' for s in known)}"
    )


def _entry_point_schemes() -> list[str]:
    schemes: list[str] = []
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        with contextlib.suppress(Exception):
            schemes.extend(str(s) for s in getattr(entry.load(), "URL_SCHEMES", ()))
    return schemes


@contextlib.contextmanager
def open_store(url: str, *, read_only: bool = False) -> Iterator[Any]:
    """The store ``url`` names, opened by its adapter's ``open_url`` and closed on exit.

    Nothing is created: an adapter whose opener takes ``create`` is given ``create=False``.
    ``read_only``: for commands that only look; an adapter whose opener takes ``read_only``
    then opens without writing anything (sqliteq: no WAL files, no schema upgrade). Raises
    :class:`StoreError` when the store cannot be opened.
    """
    module = adapter_for(url)
    opener = module.open_url
    try:
        accepted: Mapping[str, Any] = inspect.signature(opener).parameters
    except (TypeError, ValueError):
        accepted = {}
    options: dict[str, bool] = {}
    if "create" in accepted:
        options["create"] = False
    if read_only and "read_only" in accepted:
        options["read_only"] = True
    try:
        store = opener(url, **options)
    except FileNotFoundError as exc:
        raise StoreError(f"varmq: no such file: {exc.filename or url}") from None
    except Exception as exc:
        shown, text = redact_url(url), scrub(str(exc), url)
        # The adapter's own message usually names the store already; else say which it was.
        where = "" if shown in text or _path_named(url, text) else f"cannot open {shown}: "
        raise StoreError(f"varmq: {where}{text}") from None
    try:
        yield store
    finally:
        store.close()


def _path_named(url: str, text: str) -> bool:
    path = url.partition(":")[2] if scheme_of(url) else url
    return bool(path) and path.lstrip("/") in text


def location(store: Any, url: str) -> str:
    """How messages name an open store: its ``location``, else its URL redacted."""
    where = getattr(store, "location", None)
    return str(where) if where else redact_url(url)


# -- redaction --------------------------------------------------------------------------------


def scrub(text: str, url: str) -> str:
    """``text`` (a message that may quote ``url``) with ``url``'s secrets hidden."""
    text = text.replace(url, redact_url(url)) if url else text
    for secret in _secrets(url):
        text = text.replace(secret, HIDDEN)
    return text


def _secrets(url: str) -> list[str]:
    if "://" not in url:
        return []
    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    found = [parts.password] if parts.password else []
    found += [v for k, v in parse_qsl(parts.query) if k.lower().endswith("password") and v]
    return sorted({s for s in found if len(s) >= 3}, key=len, reverse=True)
