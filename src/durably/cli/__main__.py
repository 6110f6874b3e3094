"""``python -m durably.cli``: the ``durably`` command."""

from __future__ import annotations

import sys

from . import main

sys.exit(main())
