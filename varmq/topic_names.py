"""Moved to :mod:`varmq.contract.topic_names`; this name stays importable for one release."""

from __future__ import annotations

import warnings

from .contract.topic_names import *  # noqa: F403
from .contract.topic_names import __all__ as __all__

warnings.warn(
    "varmq.topic_names is now varmq.contract.topic_names; the old name goes in the next release",
    DeprecationWarning,
    stacklevel=2,
)
