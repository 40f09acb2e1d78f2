"""Python values as JSON values: what a task's arguments and results become before they are stored.

:func:`to_json` turns a value into one made of dicts, lists, strings, numbers, booleans and None
by what the value is (ISO 8601 strings for datetimes, lists for tuples and sets, dicts for
dataclasses, ...), with no annotation needed. Here too are the pieces the way back
(:mod:`varmq.tasks.rebuild`) shares: :class:`ConversionFailure` and the helpers that say where in
a value and what went wrong.

pydantic models work without depending on pydantic: it is only looked up in ``sys.modules``, as
no value or class can be a pydantic model unless pydantic was imported by someone else.
"""

from __future__ import annotations

import dataclasses
import enum
import sys
import typing
from collections.abc import Callable, Iterable
from datetime import date, time
from decimal import Decimal
from typing import Any, NoReturn
from uuid import UUID

__all__ = [
    "PLAIN",
    "ConversionFailure",
    "Decoder",
    "NoneType",
    "at",
    "encode",
    "pydantic_base",
    "short_repr",
    "to_json",
    "to_json_value",
    "type_name",
    "with_article",
]

# A conversion of one value, either way: to_json, or a decoder built from an annotation.
Decoder = Callable[[Any], Any]
NoneType = type(None)
# JSON values exactly as they are; float is not here because NaN and infinities are not JSON.
PLAIN = frozenset({str, int, bool, NoneType})


class ConversionFailure(Exception):
    """A value that cannot be converted; ``path`` gathers where, innermost first, as it unwinds."""

    def __init__(self, kind: type[Exception], message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.path: list[str] = []

    def where(self) -> str:
        return "".join(reversed(self.path))


def at(convert: Decoder, value: Any, key: Any, segment: str = "[{!r}]") -> Any:
    """``convert(value)``, adding where ``value`` sits in its container to a failure's path."""
    try:
        return convert(value)
    except ConversionFailure as e:
        e.path.append(segment.format(key))
        raise


def with_article(name: str) -> str:
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def type_name(tp: Any) -> str:
    return "None" if tp is NoneType else str(getattr(tp, "__name__", tp))


def pydantic_base() -> type | None:
    # pydantic.main, not pydantic: pydantic's package imports BaseModel lazily, on first access.
    base = getattr(sys.modules.get("pydantic.main"), "BaseModel", None)
    return base if isinstance(base, type) else None


# -- Python values to JSON values ---------------------------------------------------------------


def to_json(v: Any) -> Any:
    """``v`` as a JSON-ready value; :class:`ConversionFailure` if it has no JSON form."""
    t = type(v)
    if t in PLAIN:
        return v
    if t is float:
        if v - v == 0.0:  # false for NaN and both infinities
            return v
        raise ConversionFailure(TypeError, f"the float {v!r} has no JSON form")
    if t is list or t is tuple or t is set or t is frozenset:
        return _json_list(v)
    if t is dict:
        return _json_dict(v)
    if isinstance(v, enum.Enum):  # before int and str: IntEnum and StrEnum members are both
        return to_json(v.value)
    if isinstance(v, (date, time)):
        return v.isoformat()
    if isinstance(v, (UUID, Decimal)):
        return str(v)
    if hasattr(t, "__dataclass_fields__"):
        return {name: at(to_json, getattr(v, name), name, ".{}") for name in _field_names(t)}
    # The base classes' own conversions, so a subclass's __str__ or __int__ cannot change the value.
    if isinstance(v, str):
        return str.__str__(v)
    if isinstance(v, int):
        return int.__int__(v)
    if isinstance(v, float):
        return to_json(float.__float__(v))
    if isinstance(v, (list, tuple, set, frozenset)):
        return _json_list(v)
    if isinstance(v, dict):
        return _json_dict(v)
    model = pydantic_base()
    if model is not None and isinstance(v, model):
        # Converted again: a model's JSON mode can still hand back NaN.
        return to_json(typing.cast(Any, v).model_dump(mode="json"))
    raise ConversionFailure(TypeError, f"{with_article(t.__name__)} has no JSON form")


def _json_list(v: Iterable[Any]) -> list[Any]:
    try:
        return [x if type(x) in PLAIN else to_json(x) for x in v]
    except ConversionFailure as err:
        _relocate(err, enumerate(v))


def _json_dict(v: dict[Any, Any]) -> dict[str, Any]:
    try:
        return {
            k if type(k) is str else _json_key(k): x if type(x) in PLAIN else to_json(x)
            for k, x in v.items()
        }
    except ConversionFailure as err:
        _relocate(err, v.items())


def _relocate(err: ConversionFailure, items: Iterable[tuple[Any, Any]]) -> NoReturn:
    """Find which item of a container failed, by converting them again one at a time.

    Only on the error path, so that the usual path can stay a comprehension without bookkeeping.
    """
    for where, x in items:
        at(to_json, x, where)
    raise err  # not a value: a key, which the message names, and no path is needed


def _json_key(k: Any) -> str:
    if isinstance(k, enum.Enum):
        k = k.value
    if isinstance(k, str):
        return str.__str__(k)
    raise ConversionFailure(
        TypeError, f"the dict key {short_repr(k)} has no JSON form (keys must be str)"
    )


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(cls)
    if names is None:  # a race only computes the same tuple twice
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


def encode(v: Any) -> Any:
    """:func:`to_json`, with a value nested too deeply (or containing itself) a failure too."""
    try:
        return to_json(v)
    except RecursionError:
        raise ConversionFailure(
            TypeError, "nests too deeply for JSON (does it contain itself?)"
        ) from None


def to_json_value(value: Any) -> Any:
    """``value`` as a JSON-ready value, by the same rules as task arguments but without
    annotations (for enqueueing by name); :class:`TypeError` saying what has no JSON form."""
    try:
        return encode(value)
    except ConversionFailure as e:
        where = e.where()
        raise TypeError(f"{e.message} (at {where})" if where else e.message) from None
