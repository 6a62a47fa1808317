"""``python -m benchmarks``: run the suite (see ``--help``)."""

from __future__ import annotations

import sys

from .harness import main

if __name__ == "__main__":
    sys.exit(main())
