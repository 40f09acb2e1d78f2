"""The public name of :mod:`varmq.ops.stores` (see there)."""

from __future__ import annotations

from .ops.stores import *  # noqa: F403
from .ops.stores import __all__ as __all__
