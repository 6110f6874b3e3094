"""Shared fixtures.

PostgreSQL tests use ``pg_url``. In CI (``CI=true``) they must run, so an unreachable
server fails them; on a developer's machine without PostgreSQL they skip with a message
that says how to enable them.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

PG_URL_DEFAULT = "postgresql://postgres@127.0.0.1:5432/test"


def _pg_reachable(url: str) -> str | None:
    """Return None when PostgreSQL answers at ``url``, else the reason it does not."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (pip install 'durably[postgres]')"
    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:  # any failure to connect means "not reachable" here
        return f"{type(exc).__name__}: {exc}"
    return None


@pytest.fixture(scope="session")
def pg_server_url() -> str:
    """The PostgreSQL server URL for tests; skips (locally) or fails (CI) when unreachable."""
    url = os.environ.get("DURABLY_TEST_PG_URL", PG_URL_DEFAULT)
    problem = _pg_reachable(url)
    if problem is not None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI requires PostgreSQL at {url} but it is unreachable: {problem}")
        pytest.skip(
            f"PostgreSQL not reachable at {url} ({problem}); start it or set"
            " DURABLY_TEST_PG_URL=postgresql://user@host:port/db to run these tests"
        )
    return url


@contextlib.contextmanager
def _pg_schema(server_url: str) -> Iterator[str]:
    """A fresh PostgreSQL schema, dropped afterwards; its URL carries
    ``options=-csearch_path=<schema>`` so every connection made from it (including
    those of subprocesses) works inside it."""
    import psycopg

    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    sep = "&" if "?" in server_url else "?"
    try:
        yield f"{server_url}{sep}options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture
def pg_url(pg_server_url: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL schema for one test, dropped afterwards (its URL names
    the schema: see :func:`_pg_schema`)."""
    with _pg_schema(pg_server_url) as url:
        yield url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def journal_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of an empty journal of each kind: a SQLite file, a PostgreSQL schema."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'journal.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def module_journal_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """``journal_url`` shared by the tests of one module: for an expensive journal that
    they only read (fill it in a module-scoped fixture of their own)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('journal') / 'journal.db'}"
        return
    with _pg_schema(request.getfixturevalue("pg_server_url")) as url:
        yield url
