"""Shared fixtures.

PostgreSQL tests use ``pg_url``. In CI (``CI=true``) they must run, so an unreachable
server fails them; on a developer's machine without PostgreSQL they skip with a message
that says how to enable them.

``make test`` runs the suite on several pytest-xdist worker processes (``-n``). Each test
has its own tmp_path, PostgreSQL schema and free port, so tests share nothing but the
machine (a PostgreSQL journal schema is emptied and reused by the next test of the same
process, only while it is exactly as migrated: ``tests/pg_journals.py``); the modules of
``SERIAL_TIMING`` (real SIGSTOPs and leases of a second or two, timed against real
worker processes) are scheduled as one unit, so they run one after another on one
worker and never compete with each other for the CPU.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.pg_journals import JournalPool, fresh_schema

PG_URL_DEFAULT = "postgresql://postgres@127.0.0.1:5432/test"

# Test modules whose outcome rests on real time (a stopped worker's lease of 1.5 s running
# out, a renewal that must come within a lease): one unit of xdist's schedule (see above).
SERIAL_TIMING = frozenset(
    {
        "tests/fleet/test_workers.py",
        "tests/fleet/test_stop_latches.py",
        "tests/fleet/test_torture.py",
        "tests/integration/test_owner_lock.py",
    }
)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's schedule: each test on its own, but ``SERIAL_TIMING`` as one unit.

    xdist's own ``--dist loadgroup`` cannot do it here: it renames the node ids of a
    group's tests through ``Item._nodeid``, which pytest 9 no longer reads (pytest-xdist
    3.8), so the groups were silently ignored."""
    from xdist.scheduler import LoadScopeScheduling

    class Scheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return xdist_unit(nodeid)

    return Scheduling(config, log)


def xdist_unit(nodeid: str) -> str:
    """The unit of xdist's schedule a test belongs to: ``serial_timing`` for the tests of
    ``SERIAL_TIMING``, else the test's own node id."""
    path = nodeid.split("::", 1)[0]  # node ids are relative to the rootdir
    return "serial_timing" if path in SERIAL_TIMING else nodeid


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


@pytest.fixture(scope="session")
def pg_journals(pg_server_url: str) -> Iterator[JournalPool]:
    """Migrated, empty journal schemas reused by this process's tests (see
    ``tests/pg_journals.py``: a schema is kept only while it is exactly as migrated)."""
    pool = JournalPool(pg_server_url)
    yield pool
    pool.close()


@pytest.fixture
def pg_url(request: pytest.FixtureRequest, pg_server_url: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL schema for one test, dropped afterwards (its URL names
    the schema: see :func:`tests.pg_journals.schema_url`). In a test that has a
    PostgreSQL ``journal_url`` too, that journal's schema: one schema a test."""
    if _journal_param(request) == "postgres":
        yield request.getfixturevalue("journal_url")
        return
    with fresh_schema(pg_server_url) as url:
        yield url


def _journal_param(request: pytest.FixtureRequest) -> str | None:
    callspec = getattr(request.node, "callspec", None)
    if callspec is None or "journal_url" not in request.fixturenames:
        return None
    return str(callspec.params.get("journal_url"))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def journal_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of an empty journal of each kind: a SQLite file (not created yet), a
    PostgreSQL schema with today's tables and no rows (reused from an earlier test once
    emptied: see ``tests/pg_journals.py``). A test that creates the journal's tables
    itself (an old schema version) is marked ``pg_empty_schema``: its schema is empty."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'journal.db'}"
        return
    if request.node.get_closest_marker("pg_empty_schema") is not None:
        with fresh_schema(request.getfixturevalue("pg_server_url")) as url:
            yield url
        return
    pool: JournalPool = request.getfixturevalue("pg_journals")
    with pool.journal() as url:
        yield url


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
    pool: JournalPool = request.getfixturevalue("pg_journals")
    with pool.journal() as url:
        yield url
