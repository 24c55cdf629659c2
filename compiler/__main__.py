"""``python -m a2acc`` runs the command line."""

from __future__ import annotations

import sys

from a2acc.cli import main

sys.exit(main())
