"""``engine.list_runs`` over 100,000 runs on both stores: walking every page while
another engine keeps creating runs shows each run that existed exactly once, filters
combine as a plain Python filter over the same rows says, and ``count_runs`` agrees.

The 100,000 rows are written straight into the ``runs`` table in one transaction (an
``executemany`` on SQLite, a ``COPY`` on PostgreSQL) with every column a read checks, so
the test spends its time reading, not creating; the runs created during the walk go
through ``engine.start``, the real path. Three runs share each ``created_at``, so page
boundaries fall inside groups of equal times (the run id orders them).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import durably

N_RUNS = 100_000
T0 = 1_700_000_000.0
PAGE = 1000
STATUSES = ("completed", "failed", "queued", "parked", "cancelled", "blocked", "in_doubt")
WORKFLOWS = ("alpha", "beta", "gamma")

Row = tuple[Any, ...]


def _rows() -> list[Row]:
    out: list[Row] = []
    for i in range(N_RUNS):
        status = STATUSES[i % 7]
        out.append(
            (
                f"run-{i:06d}" if i % 11 else f"r%_{i:06d}",  # some ids hold LIKE wildcards
                WORKFLOWS[i % 3],
                None if i % 4 == 0 else str(i % 4),
                "fast" if i % 5 == 0 else "default",
                "[]",
                "digest",
                1,
                f"{i:012x}",
                status,
                '"ok"' if status == "completed" else None,
                "E" if status == "failed" else None,
                T0 + i // 3,  # three runs per instant
                T0 + i // 3,
            )
        )
    return out


COLUMNS = (
    "run_id, workflow, version, queue, input, input_digest, codec_version, incarnation,"
    " status, outcome, error_type, created_at, updated_at"
)


def _insert_sqlite(url: str, rows: list[Row]) -> None:
    import sqlite3

    conn = sqlite3.connect(url.removeprefix("sqlite:///"))
    try:
        with conn:
            conn.executemany(f"INSERT INTO runs ({COLUMNS}) VALUES ({', '.join('?' * 13)})", rows)
    finally:
        conn.close()


def _insert_postgres(url: str, rows: list[Row]) -> None:
    import psycopg

    with psycopg.connect(url) as conn, conn.cursor() as cur:
        with cur.copy(f"COPY runs ({COLUMNS}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)


def _late(ctx: durably.Context) -> None:
    return None


def _same_walk(seen: list[str], want: list[str], rows: list[Row]) -> None:
    """``seen`` holds exactly the runs of ``want``, each once, newest first. (Runs of one
    instant are ordered by run id in the database's collation, which need not be
    Python's: test_list_runs.py pins that order with ids every collation agrees on.)"""
    created = {r[0]: r[11] for r in rows}
    assert len(seen) == len(set(seen)), "a run was shown twice"
    assert set(seen) == set(want) and len(seen) == len(want)
    times = [created[r] for r in seen]
    assert all(a >= b for a, b in itertools.pairwise(times)), "not newest first"


@pytest.fixture(scope="module")
def rows() -> list[Row]:
    return _rows()


def _filled(url: str, rows: list[Row]) -> durably.Engine:
    e = durably.Engine(url)  # creates the schema
    insert: Callable[[str, list[Row]], None] = (
        _insert_sqlite if url.startswith("sqlite") else _insert_postgres
    )
    insert(url, rows)
    return e


@pytest.fixture
def engine(journal_url: str, rows: list[Row]) -> Iterator[durably.Engine]:
    """A journal of its own: for the test that adds runs while it reads."""
    e = _filled(journal_url, rows)
    yield e
    e.close()


@pytest.fixture(scope="module")
def shared(module_journal_url: str, rows: list[Row]) -> Iterator[durably.Engine]:
    """One filled journal per store for the tests that only read it (filling 100,000
    rows is most of their time)."""
    e = _filled(module_journal_url, rows)
    yield e
    e.close()


def _walk(engine: durably.Engine, limit: int = PAGE, **filters: Any) -> list[str]:
    out: list[str] = []
    after: str | None = None
    while True:
        page = engine.list_runs(after=after, limit=limit, **filters)
        out.extend(r.run_id for r in page.runs)
        if page.next is None:
            return out
        after = page.next


def _expected(rows: list[Row], **filters: Any) -> list[str]:
    """What ``list_runs(**filters)`` must return, computed in Python."""
    status = filters.get("status")
    statuses = {status} if isinstance(status, str) else set(status or ())
    keep = [
        r
        for r in rows
        if (not statuses or r[8] in statuses)
        and filters.get("workflow") in (None, r[1])
        and ("version" not in filters or filters["version"] == r[2])
        and filters.get("queue") in (None, r[3])
        and (filters.get("search") is None or filters["search"] in r[0])
    ]
    keep.sort(key=lambda r: (-r[11], r[0]))
    return [r[0] for r in keep]


def test_walk_sees_every_run_once_while_runs_arrive(
    engine: durably.Engine, journal_url: str, rows: list[Row]
) -> None:
    stop = threading.Event()
    created: dict[str, list[str]] = {"new": [], "skewed": []}
    errors: list[BaseException] = []

    def create(prefix: str, at: float) -> None:
        # Another engine (its own connection), on the real path. "new": a clock past
        # every row (the usual case); "skewed": a host whose clock is behind, stamping
        # runs in the middle of the ones being walked.
        with durably.Engine(journal_url, clock=durably.FakeClock(at)) as other:
            wf = other.workflow(name="late")(_late)
            mine = created[prefix]
            try:
                while not stop.is_set():
                    mine.append(other.start(wf, run_id=f"{prefix}-{len(mine):05d}").run_id)
            except BaseException as exc:  # reported below: the walk must not hide it
                errors.append(exc)

    threads = [
        threading.Thread(target=create, args=("new", T0 + N_RUNS)),
        threading.Thread(target=create, args=("skewed", T0 + N_RUNS / 6)),
    ]
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + 30
        while min(map(len, created.values())) < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        before = len(created["new"])
        seen = _walk(engine, limit=PAGE)
        during = len(created["new"]) - before
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    assert not errors, errors
    assert during > 0, "no run was created while the pages were read"
    assert max(Counter(seen).values()) == 1, "a run was shown twice"
    bulk = [r for r in seen if not r.startswith(("new-", "skewed-"))]
    _same_walk(bulk, _expected(rows), rows)  # every run that existed, once, in order
    assert len(bulk) == N_RUNS


FILTERS = {
    "status": {"status": "failed"},
    "statuses+workflow": {"status": ["parked", "blocked"], "workflow": "beta"},
    "workflow+version+queue": {"workflow": "gamma", "version": "2", "queue": "fast"},
    "queue+search%_": {"queue": "fast", "search": "r%_"},
    "search+statuses": {"search": "_0000", "status": ("completed", "queued", "in_doubt")},
    "all": {"search": "99", "workflow": "alpha", "queue": "default", "status": "cancelled"},
}


def test_filters_combine_over_every_page(shared: durably.Engine, rows: list[Row]) -> None:
    engine = shared
    for case, filters in FILTERS.items():
        want = _expected(rows, **filters)
        assert want, f"{case}: a filter that matches nothing shows nothing"
        _same_walk(_walk(engine, limit=PAGE, **filters), want, rows)
        counts = engine.count_runs(**{k: v for k, v in filters.items() if k != "status"})
        status = filters.get("status")
        wanted = {status} if isinstance(status, str) else set(status or counts)
        assert sum(n for s, n in counts.items() if s in wanted) == len(want), case


def test_count_runs_matches(shared: durably.Engine, rows: list[Row]) -> None:
    engine = shared
    counts = engine.count_runs()
    assert {s: n for s, n in counts.items() if n} == dict(Counter(r[8] for r in rows))
    fast_beta = engine.count_runs(workflow="beta", queue="fast")
    assert {s: n for s, n in fast_beta.items() if n} == dict(
        Counter(r[8] for r in rows if r[1] == "beta" and r[3] == "fast")
    )


PLANNED = {
    "first page": {},
    "a later page": {"after_at": T0 + 20_000, "after_id": "run-060000"},
    "status": {"statuses": ["failed"]},
    "statuses and queue": {"statuses": ["failed", "parked"], "queue": "fast"},
    "search": {"search": "999"},
    "workflow and version": {"workflow": "beta", "version": "2"},
}


def test_a_page_is_an_index_range_not_a_sort_of_the_table(
    shared: durably.Engine, module_journal_url: str
) -> None:
    # The page query as the store runs it, explained by the database over 100,000 runs:
    # it walks runs_by_created from the cursor (sorting only runs of one instant), never
    # scans and sorts the whole table.
    for case in PLANNED:
        _check_plan(module_journal_url, case)


def _check_plan(journal_url: str, case: str) -> None:
    import json as jsonlib

    from durably.store.sqlfiles import load_queries

    params: dict[str, Any] = {
        "statuses": None,
        "workflow": None,
        "version": None,
        "queue": None,
        "search": None,
        "since": None,
        "after_at": None,
        "after_id": None,
        "limit": 51,
        **PLANNED[case],
    }
    if journal_url.startswith("sqlite"):
        import sqlite3

        if params["statuses"] is not None:
            params["statuses"] = jsonlib.dumps(params["statuses"])
        conn = sqlite3.connect(journal_url.removeprefix("sqlite:///"))
        try:
            query = load_queries("sqlite")["list_runs"]
            plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + query, params)]
        finally:
            conn.close()
        assert any("USING INDEX runs_by_created (created_at<?)" in p for p in plan), (case, plan)
        assert not any(p.startswith("SCAN runs") for p in plan), (case, plan)
        assert "USE TEMP B-TREE FOR ORDER BY" not in plan, (case, plan)  # only ties are sorted
    else:
        import psycopg

        with psycopg.connect(journal_url, autocommit=True) as conn:
            conn.execute("ANALYZE runs")
            query = load_queries("postgres")["list_runs"]
            plan = "\n".join(row[0] for row in conn.execute("EXPLAIN " + query, params))
        assert "Index Scan Backward using runs_by_created" in plan, (case, plan)
        assert "Seq Scan" not in plan, (case, plan)
