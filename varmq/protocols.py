"""Moved to :mod:`varmq.contract.protocols`; this name stays importable for one release."""

from __future__ import annotations

import warnings

from .contract.protocols import *  # noqa: F403
from .contract.protocols import __all__ as __all__

warnings.warn(
    "varmq.protocols is now varmq.contract.protocols; the old name goes in the next release",
    DeprecationWarning,
    stacklevel=2,
)
