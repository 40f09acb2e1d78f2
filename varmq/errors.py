"""Every exception varmq raises or reports (:mod:`varmq.model.errors`), rooted at
:class:`VarMQError`; the ones users catch daily are re-exported by :mod:`varmq` too."""

from __future__ import annotations

from .model.errors import *  # noqa: F403
from .model.errors import __all__ as __all__
