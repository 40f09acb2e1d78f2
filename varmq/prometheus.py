"""The public name of :mod:`varmq.ops.prometheus` (see there)."""

from __future__ import annotations

from .ops.prometheus import *  # noqa: F403
from .ops.prometheus import __all__ as __all__
