"""A logger that imports :mod:`logging` at its first use, not at import.

``logging`` (with the ``traceback``, ``string`` and ``textwrap`` it pulls in) is a few
milliseconds of every start, while durably logs only on rare paths (a lease it cannot
release, a damaged approval row, a journal others can read). A process that resumes a run
and logs nothing never imports it (issue 28; tests/api/test_lazy_import.py pins it).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from logging import Logger
    from typing import Any

# The levels durably logs at, as numbers: logging's values, fixed since Python 2.
INFO = 20
WARNING = 30


class LazyLogger:
    """Stands for ``logging.getLogger(name)``; every attribute is the real logger's."""

    __slots__ = ("_logger", "_name")

    def __init__(self, name: str) -> None:
        self._name = name
        self._logger: Logger | None = None

    def __getattr__(self, attr: str) -> Any:
        # Called only for what the slots do not hold: info, warning, log, handlers, ...
        logger = self._logger
        if logger is None:
            import logging

            logger = self._logger = logging.getLogger(self._name)
        return getattr(logger, attr)
