"""``python -m varmq``: the ``varmq`` command line (see :mod:`varmq.cli`)."""

import sys

from .cli import main

sys.exit(main())
