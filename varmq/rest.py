"""The public name of :mod:`varmq.ops.rest` (see there)."""

from __future__ import annotations

from .ops.rest import *  # noqa: F403
from .ops.rest import __all__ as __all__
