"""The codec between a task's Python calls and the JSON kept in its jobs: :class:`TaskSignature`.

At enqueue time :meth:`TaskSignature.encode_call` checks a call against the function's signature
and turns each argument into a JSON-ready value (:mod:`varmq.tasks.json_values`); at the worker
:meth:`TaskSignature.decode_call` rebuilds typed values from the function's annotations
(:mod:`varmq.tasks.rebuild`). Return values go the same way with the return annotation. What can
be worked out from the function is worked out once, in ``__init__``, so a call whose arguments
are JSON values already costs one type check per argument.

:func:`to_json_value`, the same conversion without a function, is here too for its callers.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any

from .json_values import (
    PLAIN,
    ConversionFailure,
    Decoder,
    encode,
    short_repr,
    to_json,
    to_json_value,
)
from .rebuild import decoder, nullable, resolve_hints

__all__ = ["TaskSignature", "to_json_value"]

log = logging.getLogger("varmq.tasks")
_P = inspect.Parameter


class TaskSignature:
    """How one task's calls and results become JSON and back, built once at registration.

    Encoding checks a call the way Python would (:class:`TypeError` naming the task) and converts
    each value by what it is; decoding rebuilds each value by its parameter's annotation.
    Positional arguments stay positional and keywords stay keywords. A union's members are tried
    left to right and the first that fits wins (``str | date`` keeps a string); annotations the
    codec does not know, and names it cannot resolve, leave the JSON value as it is (names it
    cannot resolve with a warning on the ``varmq.tasks`` logger, once, at registration).
    """

    def __init__(self, task_name: str, fn: Callable[..., Any]) -> None:
        self._task = task_name
        try:
            self._sig: inspect.Signature | None = inspect.signature(fn)
            params = list(self._sig.parameters.values())
        except (TypeError, ValueError):  # no signature to be had (some builtins): accept any call
            self._sig, params = None, [_P("args", _P.VAR_POSITIONAL), _P("kw", _P.VAR_KEYWORD)]
        hints, unresolved = resolve_hints(fn)
        if unresolved is not None:
            log.warning(
                "task %r: its annotations cannot be resolved (%s: %s); those written as strings"
                " are not used, so the values they annotate stay as JSON left them",
                task_name,
                type(unresolved).__name__,
                unresolved,
            )
        memo: dict[type, Decoder] = {}

        def dec(p: inspect.Parameter) -> Decoder | None:
            found = decoder(hints.get(p.name, Any), memo)
            return nullable(found) if found is not None and p.default is None else found

        positional = [p for p in params if p.kind in (_P.POSITIONAL_ONLY, _P.POSITIONAL_OR_KEYWORD)]
        var_pos = [p for p in params if p.kind is _P.VAR_POSITIONAL]
        var_kw = [p for p in params if p.kind is _P.VAR_KEYWORD]
        self._pos_names = tuple(p.name for p in positional)
        self._pos_decoders = tuple(dec(p) for p in positional)
        # The positions that need rebuilding, for the common call (positional arguments only).
        self._pos_plan = tuple((i, d) for i, d in enumerate(self._pos_decoders) if d is not None)
        self._var_pos_name = var_pos[0].name if var_pos else None
        self._var_pos_decoder = dec(var_pos[0]) if var_pos else None
        self._kw_decoders = {
            p.name: dec(p) for p in params if p.kind in (_P.POSITIONAL_OR_KEYWORD, _P.KEYWORD_ONLY)
        }
        self._var_kw_decoder = dec(var_kw[0]) if var_kw else None
        self._result_decoder = decoder(hints.get("return", Any), memo)
        every = [*self._pos_decoders, *self._kw_decoders.values()]
        self._plain = all(d is None for d in [*every, self._var_pos_decoder, self._var_kw_decoder])
        # inspect's bind() costs ~2.5 us, more than the rest of a call's encoding: for each count
        # of positional arguments, which keywords are then taken and which are still required,
        # so that _binds() can tell the usual calls are fine with three set operations.
        self._var_pos = bool(var_pos) or self._sig is None
        self._keywords = None if var_kw else frozenset(self._kw_decoders)
        must = {p.name for p in params if p.kind is _P.KEYWORD_ONLY and p.default is _P.empty}
        self._shapes: list[tuple[frozenset[str], frozenset[str]] | None] = []
        for n in range(len(positional) + 1):
            rest = [p for p in positional[n:] if p.default is _P.empty]
            taken = frozenset(p.name for p in positional[:n] if p.kind is _P.POSITIONAL_OR_KEYWORD)
            usable = all(p.kind is _P.POSITIONAL_OR_KEYWORD for p in rest)
            self._shapes.append(
                (taken, frozenset(must | {p.name for p in rest})) if usable else None
            )

    def encode_call(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[list[Any], dict[str, Any]]:
        """The call's arguments as JSON-ready values; :class:`TypeError` naming the task (and the
        argument) for a call the function would refuse or a value with no JSON form."""
        if self._binds(len(args), kwargs):
            try:
                out = [v if type(v) in PLAIN else to_json(v) for v in args]
                if not kwargs:
                    return out, {}
                return out, {k: v if type(v) in PLAIN else to_json(v) for k, v in kwargs.items()}
            except (ConversionFailure, RecursionError):
                pass  # the path below says which argument
        elif self._sig is not None:
            try:
                self._sig.bind(*args, **kwargs)
            except TypeError as e:
                raise TypeError(f"task {self._task!r}: {e}") from None
        positional = [self._encode(v, *self._label(i)) for i, v in enumerate(args)]
        return positional, {k: self._encode(v, k, "") for k, v in kwargs.items()}

    def decode_call(self, args: Any, kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The stored ``args`` (a list) and ``kwargs`` (a dict) rebuilt by the annotations;
        :class:`TypeError` or :class:`ValueError` naming the task and the argument if not."""
        if not isinstance(args, (list, tuple)):
            raise TypeError(f"task {self._task!r}: args must be a list, not {short_repr(args)}")
        if not isinstance(kwargs, dict):
            raise TypeError(f"task {self._task!r}: kwargs must be a dict, not {short_repr(kwargs)}")
        if self._plain:
            return tuple(args), kwargs
        decoders, n = self._pos_decoders, len(self._pos_decoders)
        if not kwargs and len(args) <= n:
            # The common call, on every job: no label is built unless a value fails, and then
            # the loop below runs again to name it.
            try:
                fast = list(args)
                for i, rebuild in self._pos_plan:
                    if i < len(fast):
                        fast[i] = rebuild(fast[i])
                return tuple(fast), kwargs
            except ConversionFailure:
                pass
        out = []
        for i, v in enumerate(args):
            d = decoders[i] if i < n else self._var_pos_decoder
            out.append(v if d is None else self._decode(d, v, *self._label(i)))
        kw = {}
        for k, v in kwargs.items():
            d = self._kw_decoders.get(k, self._var_kw_decoder)
            kw[k] = v if d is None else self._decode(d, v, k, "")
        return tuple(out), kw

    def encode_result(self, value: Any) -> Any:
        """The function's return value as a JSON-ready value; :class:`TypeError` if it has none."""
        if type(value) in PLAIN:
            return value
        try:
            return encode(value)
        except ConversionFailure as e:
            raise TypeError(
                f"task {self._task!r}, its return value{e.where()}: {e.message}"
            ) from None

    def decode_result(self, value: Any) -> Any:
        """A stored return value rebuilt by the return annotation (the awaited type for
        ``async def``)."""
        dec = self._result_decoder
        if dec is None:
            return value
        try:
            return dec(value)
        except ConversionFailure as e:
            raise e.kind(
                f"task {self._task!r}, its return value{e.where()}: {e.message}"
            ) from e.__cause__

    def _binds(self, n: int, kwargs: dict[str, Any]) -> bool:
        """Whether a call surely binds; False sends it to bind() for the verdict and message."""
        if n >= len(self._shapes):
            if not self._var_pos:
                return False
            n = len(self._shapes) - 1
        shape = self._shapes[n]
        if shape is None:
            return False
        taken, needed = shape
        if not kwargs:
            return not needed
        keys = kwargs.keys()
        if self._keywords is not None and not keys <= self._keywords:
            return False
        return needed <= keys and taken.isdisjoint(keys)

    def _label(self, i: int) -> tuple[str, str]:
        if i < len(self._pos_names):
            return self._pos_names[i], ""
        return self._var_pos_name or "args", f"[{i - len(self._pos_names)}]"

    def _encode(self, v: Any, name: str, index: str) -> Any:
        try:
            return encode(v)
        except ConversionFailure as e:
            where = f"argument {name!r}{index}{e.where()}"
            raise TypeError(f"task {self._task!r}, {where}: {e.message}") from None

    def _decode(self, dec: Decoder, v: Any, name: str, index: str) -> Any:
        try:
            return dec(v)
        except ConversionFailure as e:
            where = f"argument {name!r}{index}{e.where()}"
            raise e.kind(f"task {self._task!r}, {where}: {e.message}") from e.__cause__
