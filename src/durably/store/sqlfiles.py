"""Named SQL queries kept in ``.sql`` files, one folder per dialect.

A queries file holds blocks introduced by ``-- name: query_name`` lines; migrations are
numbered files ``NNNN_description.sql`` applied in order.
"""

from __future__ import annotations

import os
import re

from .._record import Record, set_field

# Plain files next to this module. (importlib.resources would import pathlib, tempfile and
# more, about 10 ms, and opening a store is on the resume path.)
_SQL_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sql")

_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


ROOMS = (
    "runs",
    "leases",
    "history",
    "generations",
    "events",
    "stream",
    "signals",
    "approvals",
    "spend",
    "fleet",
    "meta",
    "retention",
)
"""The rooms of each dialect's named queries: ``sql/<dialect>/<room>.sql`` (a dialect
may lack one: SQLite has no meta queries)."""


def load_queries(dialect: str) -> dict[str, str]:
    """All named queries of ``sql/<dialect>/<room>.sql``, without their comment lines.

    The comments stay in the files for readers; the driver never needs them, and on
    PostgreSQL they cost every execution: psycopg caches its parsing of a query only up
    to 4,096 bytes and parses a longer one again at each call (``append_with_events``,
    on every step's path, is 4 KB with its comments and 2.5 KB without). A name is
    unique across a dialect's rooms.
    """
    queries: dict[str, str] = {}
    for room in ROOMS:
        if not os.path.exists(os.path.join(_SQL_DIR, dialect, f"{room}.sql")):
            continue
        parts = _NAME.split(_read(dialect, f"{room}.sql"))
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in queries:
                raise AssertionError(f"query {name!r} is named twice in sql/{dialect}/")
            # Whole-line comments only: no query holds a string literal over several
            # lines, and a trailing "-- ..." after code is left as it is.
            lines = [line for line in body.splitlines() if not line.lstrip().startswith("--")]
            queries[name] = "\n".join(lines).strip().rstrip(";")
    return queries


def schema(dialect: str) -> str:
    """The full current schema of ``dialect`` (``sql/<dialect>/schema.sql``)."""
    return _read(dialect, "schema.sql")


class Migration(Record, frozen=True):
    """One numbered migration file."""

    version: int
    name: str
    sql: str

    def __init__(self, version: int, name: str, sql: str) -> None:
        set_field(self, "version", version)
        set_field(self, "name", name)
        set_field(self, "sql", sql)


def migrations(dialect: str, root: str = _SQL_DIR) -> list[Migration]:
    """The migrations of ``dialect`` in version order (under ``root``: the journal's by
    default; the receiving side keeps a sequence of its own)."""
    folder = os.path.join(root, dialect, "migrations")
    found = []
    for name in os.listdir(folder):
        m = re.match(r"^(\d{4})_(\w+)\.sql$", name)
        if m:
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                found.append(Migration(int(m.group(1)), m.group(2), f.read()))
    found.sort(key=lambda mig: mig.version)
    # Contiguous, from 1: a journal records only the number it reached, so a migration
    # numbered below one already applied (a gap filled later, a branch merged late)
    # would never run there; a gap or a number used twice is a merge mistake.
    for expected, mig in enumerate(found, start=1):
        if mig.version != expected:
            raise RuntimeError(
                f"migrations of {dialect} go from {expected - 1} to {mig.version}: number"
                f" them 1, 2, ... without a gap or a repeat"
            )
    return found


def pending(steps: list[Migration], current: int) -> list[Migration]:
    """The migrations of ``steps`` a journal at schema ``current`` has not applied."""
    return [mig for mig in steps if mig.version > current]


def latest_version(dialect: str) -> int:
    """The number of the newest migration of ``dialect``, without reading the files."""
    names = os.listdir(os.path.join(_SQL_DIR, dialect, "migrations"))
    return max((int(n[:4]) for n in names if re.match(r"^\d{4}_\w+\.sql$", n)), default=0)


def _read(dialect: str, name: str) -> str:
    with open(os.path.join(_SQL_DIR, dialect, name), encoding="utf-8") as f:
        return f.read()
