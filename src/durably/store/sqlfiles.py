"""Named SQL queries kept in ``.sql`` files, one folder per dialect.

A queries file holds blocks introduced by ``-- name: query_name`` lines; migrations are
numbered files ``NNNN_description.sql`` applied in order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


def load_queries(dialect: str) -> dict[str, str]:
    """All named queries of ``sql/<dialect>/queries.sql``."""
    text = _read(dialect, "queries.sql")
    parts = _NAME.split(text)
    queries = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        queries[name] = body.strip().rstrip(";")
    return queries


def schema(dialect: str) -> str:
    """The full current schema of ``dialect`` (``sql/<dialect>/schema.sql``)."""
    return _read(dialect, "schema.sql")


@dataclass(frozen=True)
class Migration:
    """One numbered migration file."""

    version: int
    name: str
    sql: str


def migrations(dialect: str) -> list[Migration]:
    """The migrations of ``dialect`` in version order."""
    folder = resources.files("durably.store").joinpath("sql", dialect, "migrations")
    found = []
    for entry in folder.iterdir():
        m = re.match(r"^(\d{4})_(\w+)\.sql$", entry.name)
        if m:
            found.append(Migration(int(m.group(1)), m.group(2), entry.read_text("utf-8")))
    found.sort(key=lambda mig: mig.version)
    for expected, mig in enumerate(found, start=1):
        if mig.version != expected:
            raise RuntimeError(f"migrations of {dialect} skip from {expected - 1} to {mig.version}")
    return found


def _read(dialect: str, name: str) -> str:
    return resources.files("durably.store").joinpath("sql", dialect, name).read_text("utf-8")
