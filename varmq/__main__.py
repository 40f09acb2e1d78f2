"""``python -m varmq``: the ``varmq`` command line (see :mod:`varmq.ops.cli`)."""

import sys

from .ops.cli import main

sys.exit(main())
