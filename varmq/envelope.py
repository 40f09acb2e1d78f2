"""Moved to :mod:`varmq.contract.envelope`; this name stays importable for one release."""

from __future__ import annotations

import warnings

from .contract.envelope import *  # noqa: F403
from .contract.envelope import __all__ as __all__

warnings.warn(
    "varmq.envelope is now varmq.contract.envelope; the old name goes in the next release",
    DeprecationWarning,
    stacklevel=2,
)
