"""JSON values rebuilt as the types their annotations name: the way back from a stored job.

:func:`decoder` turns an annotation into a function that rebuilds, from the JSON value
:mod:`varmq.tasks.json_values` made, a value of the annotated type (a datetime from its ISO 8601
string, a dataclass from its dict, ...), checking the value's shape as it goes; a value that does
not fit raises :class:`~varmq.tasks.json_values.ConversionFailure` saying where and why.
:func:`resolve_hints` reads the annotations of a function or class, keeping what it can of those
that cannot be resolved.
"""

from __future__ import annotations

import collections.abc as cabc
import dataclasses
import enum
import inspect
import types
import typing
from collections.abc import Callable
from datetime import date, time
from decimal import Decimal
from typing import Any
from uuid import UUID

from .json_values import (
    ConversionFailure,
    Decoder,
    NoneType,
    at,
    pydantic_base,
    short_repr,
    to_json,
    type_name,
    with_article,
)

__all__ = ["decoder", "nullable", "resolve_hints"]

_QUALIFIERS = frozenset({"Required", "NotRequired", "ReadOnly", "Final", "ClassVar"})
_P = inspect.Parameter


# -- JSON values back to the annotated types ----------------------------------------------------
# A builder returns None where the JSON value is already right (str, int, Any, list[str], ...),
# so callers can skip the call. strict=True is for union members: every builder then returns a
# decoder that also rejects values of another shape, so that the first member that fits wins.


def _check(test: Callable[[Any], bool], what: str) -> Decoder:
    def check(v: Any) -> Any:
        if test(v):
            return v
        raise ConversionFailure(TypeError, f"expected {what}, got {with_article(type(v).__name__)}")

    return check


def _any(v: Any) -> Any:
    return v


_CHECKS: dict[Any, Decoder] = {
    str: _check(lambda v: isinstance(v, str), "a string"),
    int: _check(lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    float: _check(lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "a number"),
    bool: _check(lambda v: isinstance(v, bool), "a boolean"),
    NoneType: _check(lambda v: v is None, "null"),
    list: _check(lambda v: isinstance(v, list), "a list"),
    dict: _check(lambda v: isinstance(v, dict), "a dict"),
}


def decoder(tp: Any, memo: dict[type, Decoder], strict: bool = False) -> Decoder | None:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated or getattr(origin, "_name", None) in _QUALIFIERS:
        return decoder(args[0], memo, strict)
    if isinstance(tp, typing.TypeVar):
        return decoder(tp.__bound__ or Any, memo, strict)
    if hasattr(tp, "__supertype__"):  # NewType
        return decoder(tp.__supertype__, memo, strict)
    if origin is typing.Union or origin is types.UnionType:
        return _union(tp, args, memo, strict)
    if origin is typing.Literal:
        return _literal(args)
    if origin in (list, cabc.Sequence, cabc.MutableSequence, cabc.Collection, cabc.Iterable):
        return _sequence(list, decoder(args[0] if args else Any, memo, strict), strict)
    if origin in (set, cabc.Set, cabc.MutableSet):
        return _sequence(set, decoder(args[0] if args else Any, memo, strict), strict)
    if origin is frozenset:
        return _sequence(frozenset, decoder(args[0] if args else Any, memo, strict), strict)
    if origin is tuple:
        if tp is typing.Tuple or (len(args) == 2 and args[1] is Ellipsis):  # noqa: UP006
            return _sequence(tuple, decoder(args[0] if args else Any, memo, strict), strict)
        items = [] if args in ((), ((),)) else [decoder(a, memo, strict) for a in args]
        return _fixed_tuple(tuple, items, tp)
    if origin in (dict, cabc.Mapping, cabc.MutableMapping):
        key, value = args if len(args) == 2 else (Any, Any)
        return _mapping(decoder(key, memo, strict), decoder(value, memo, strict), strict)
    if isinstance(origin, type):  # a generic class such as Box[int]: its fields say the rest
        return decoder(origin, memo, strict)
    if isinstance(tp, type):
        return _class(tp, memo, strict)
    return _any if strict else None  # Any, object, unresolved names and forms we do not know


def _class(tp: type, memo: dict[type, Decoder], strict: bool) -> Decoder | None:
    if tp in memo:
        return memo[tp]
    if tp in _CHECKS:
        return _CHECKS[tp] if strict else None
    if issubclass(tp, enum.Enum):
        return _enum(tp)
    if issubclass(tp, (date, time)):  # datetime too: tp.fromisoformat is its own
        return _from_string(tp.fromisoformat, with_article(tp.__name__))
    if issubclass(tp, UUID):
        return _from_string(tp, "a UUID")
    if issubclass(tp, Decimal):
        return _from_string(lambda v: tp(v if isinstance(v, str) else repr(v)), "a Decimal", True)
    if dataclasses.is_dataclass(tp):
        fields = dataclasses.fields(tp)
        names = {f.name: f.default for f in fields if f.init}
        skip = frozenset(f.name for f in fields if not f.init)
        return _record(tp, memo, names, lambda kw: tp(**kw), ".{}", skip=skip)
    if issubclass(tp, dict) and hasattr(tp, "__required_keys__"):  # a TypedDict
        hints = _hints(tp)
        names = {k: _P.empty for k in hints}
        # __required_keys__ misses NotRequired[...] written as a string: the hints do not.
        marks = {k: getattr(typing.get_origin(h), "_name", None) for k, h in hints.items()}
        need = {k for k in tp.__required_keys__ if marks.get(k) != "NotRequired"}
        need |= {k for k, mark in marks.items() if mark == "Required"}
        return _record(tp, memo, names, dict, "[{!r}]", required=frozenset(need))
    if issubclass(tp, tuple) and hasattr(tp, "_fields"):  # a NamedTuple
        hints = _hints(tp)
        items = [decoder(hints.get(name, Any), memo) for name in tp._fields]
        return _fixed_tuple(lambda values: tp(*values), items, tp)
    base = pydantic_base()
    if base is not None and issubclass(tp, base):
        return _construct(typing.cast(Any, tp).model_validate, tp.__name__)
    if issubclass(tp, (str, int, float)):  # e.g. class UserId(str): JSON keeps only the str
        plain = next(b for b in (str, int, float) if issubclass(tp, b))
        check, build = _CHECKS[plain], _construct(tp, tp.__name__)
        return lambda v: build(check(v))
    if tp is tuple or tp is set or tp is frozenset:
        return _sequence(tp, None, strict)
    return _any if strict else None


def _union(
    tp: Any, args: tuple[Any, ...], memo: dict[type, Decoder], strict: bool
) -> Decoder | None:
    members = [a for a in args if a is not NoneType]
    nullable = len(members) < len(args)
    if not strict and all(decoder(m, memo) is None for m in members):
        return None
    tries = [typing.cast(Decoder, decoder(m, memo, strict=True)) for m in members]
    if len(tries) == 1 and nullable:
        only = tries[0]  # Optional[X]: X's own error message is the useful one
        return lambda v: None if v is None else only(v)
    names = " | ".join(type_name(a) for a in args)

    def decode(v: Any) -> Any:
        if v is None and nullable:
            return None
        for attempt in tries:
            try:
                return attempt(v)
            except ConversionFailure:
                continue
        raise ConversionFailure(TypeError, f"{short_repr(v)} matches none of {names}")

    return decode


def _literal(values: tuple[Any, ...]) -> Decoder:
    table = {}
    for value in values:
        try:
            j = to_json(value)
        except ConversionFailure:
            continue
        table[type(j), j] = value  # keyed by type as well, as True == 1 and 1 == 1.0

    def decode(v: Any) -> Any:
        try:
            return table[type(v), v]
        except (KeyError, TypeError):
            allowed = ", ".join(short_repr(x) for x in values)
            raise ConversionFailure(
                ValueError, f"{short_repr(v)} is not one of {allowed}"
            ) from None

    return decode


def _sequence(make: Callable[[Any], Any], item: Decoder | None, strict: bool) -> Decoder | None:
    if item is None and make is list and not strict:
        return None
    build = _construct(make, "a collection")

    def decode(v: Any) -> Any:
        if type(v) is not list:
            raise ConversionFailure(
                TypeError, f"expected a list, got {with_article(type(v).__name__)}"
            )
        out = v if item is None else [at(item, x, i) for i, x in enumerate(v)]
        return out if make is list else build(out)

    return decode


def _fixed_tuple(make: Callable[[Any], Any], items: list[Decoder | None], tp: Any) -> Decoder:
    build = _construct(make, type_name(tp))

    def decode(v: Any) -> Any:
        if type(v) is not list or len(v) != len(items):
            raise ConversionFailure(
                TypeError, f"expected a list of {len(items)} for {type_name(tp)}"
            )
        pairs = enumerate(zip(items, v, strict=True))
        return build([x if d is None else at(d, x, i) for i, (d, x) in pairs])

    return decode


def _mapping(key: Decoder | None, value: Decoder | None, strict: bool) -> Decoder | None:
    if key is None and value is None and not strict:
        return None

    def decode(v: Any) -> Any:
        if type(v) is not dict:
            raise ConversionFailure(
                TypeError, f"expected a dict, got {with_article(type(v).__name__)}"
            )
        return {
            k if key is None else at(key, k, k): x if value is None else at(value, x, k)
            for k, x in v.items()
        }

    return decode


def _record(
    tp: type,
    memo: dict[type, Decoder],
    names: dict[str, Any],
    build: Callable[[dict[str, Any]], Any],
    segment: str,
    required: frozenset[str] = frozenset(),
    skip: frozenset[str] = frozenset(),
) -> Decoder:
    """A dataclass or TypedDict from a dict; ``names`` maps its keys to their defaults, ``skip``
    names the dataclass fields with init=False (encoded as asdict() does, not passed back)."""
    fields: dict[str, Decoder] = {}
    construct = _construct(build, tp.__name__)

    def decode(v: Any) -> Any:
        if type(v) is not dict:
            raise ConversionFailure(
                TypeError, f"expected a dict for {tp.__name__}, got {short_repr(v)}"
            )
        if not required <= v.keys():
            raise ConversionFailure(TypeError, f"{tp.__name__} lacks {sorted(required - v.keys())}")
        kw = {}
        for k, x in v.items():
            dec = fields.get(k)
            if dec is not None:
                kw[k] = at(dec, x, k, segment)
            elif k not in skip:
                kw[k] = x
        return construct(kw)

    memo[tp] = decode  # before the fields, for classes that contain themselves
    hints = _hints(tp)
    for name, default in names.items():
        dec = decoder(hints.get(name, Any), memo)
        if dec is not None:
            fields[name] = nullable(dec) if default is None else dec
    return decode


def nullable(dec: Decoder) -> Decoder:
    # `x: datetime = None` is common even though the annotation does not say Optional.
    return lambda v: None if v is None else dec(v)


def _construct(make: Callable[[Any], Any], what: str) -> Decoder:
    def construct(v: Any) -> Any:
        try:
            return make(v)
        except ConversionFailure:
            raise
        except Exception as e:  # constructors, __post_init__, validators: any error means "no"
            kind = TypeError if isinstance(e, TypeError) else ValueError
            raise ConversionFailure(kind, f"cannot rebuild {what} from {short_repr(v)}: {e}") from e

    return construct


def _from_string(make: Callable[[Any], Any], what: str, numbers: bool = False) -> Decoder:
    def decode(v: Any) -> Any:
        # One frame on the path of every job: the constructor is called here, not through
        # _construct (a datetime argument is the common case).
        if type(v) is str or (numbers and type(v) in (int, float)):
            try:
                return make(v)
            except Exception as e:
                kind = TypeError if isinstance(e, TypeError) else ValueError
                message = f"cannot rebuild {what} from {short_repr(v)}: {e}"
                raise ConversionFailure(kind, message) from e
        raise ConversionFailure(
            TypeError, f"expected {what} as a string, got {with_article(type(v).__name__)}"
        )

    return decode


def _enum(cls: type[enum.Enum]) -> Decoder:
    def decode(v: Any) -> Any:
        try:
            return cls(v)
        except (ValueError, TypeError):
            pass
        for member in cls:  # values JSON changed (a tuple became a list) match in JSON form only
            try:
                if to_json(member.value) == v:
                    return member
            except ConversionFailure:
                continue
        raise ConversionFailure(ValueError, f"{short_repr(v)} is not a value of {cls.__name__}")

    return decode


def resolve_hints(obj: Any) -> tuple[dict[str, Any], Exception | None]:
    """The annotations of ``obj`` resolved, and the error that kept them from all being resolved
    (None if nothing did): then only those that are objects already, not strings, are kept."""
    try:
        return typing.get_type_hints(obj, include_extras=True), None
    except RecursionError:
        raise  # a bug of ours, not an annotation that cannot be resolved
    except Exception as e:
        # A name under TYPE_CHECKING or in a function's locals: keep what is real.
        try:
            found = inspect.get_annotations(obj)
        except Exception:
            return {}, e
        return {k: v for k, v in found.items() if not isinstance(v, str)}, e


def _hints(obj: Any) -> dict[str, Any]:
    return resolve_hints(obj)[0]
