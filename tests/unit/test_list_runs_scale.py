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


@pytest.fixture
def engine(journal_url: str, rows: list[Row]) -> Iterator[durably.Engine]:
    e = durably.Engine(journal_url)  # creates the schema
    insert: Callable[[str, list[Row]], None] = (
        _insert_sqlite if journal_url.startswith("sqlite") else _insert_postgres
    )
    insert(journal_url, rows)
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
    created: list[str] = []
    errors: list[BaseException] = []

    def create() -> None:
        # Another engine (its own connection), on the real path; a clock past every row.
        with durably.Engine(journal_url, clock=durably.FakeClock(T0 + N_RUNS)) as other:
            wf = other.workflow(name="late")(_late)
            try:
                while not stop.is_set():
                    created.append(other.start(wf, run_id=f"new-{len(created):05d}").run_id)
            except BaseException as exc:  # reported below: the walk must not hide it
                errors.append(exc)

    thread = threading.Thread(target=create)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while len(created) < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        before = len(created)
        seen = _walk(engine, limit=PAGE)
        during = len(created) - before
    finally:
        stop.set()
        thread.join(60)
    assert not errors, errors
    assert during > 0, "no run was created while the pages were read"
    assert max(Counter(seen).values()) == 1, "a run was shown twice"
    bulk = [r for r in seen if not r.startswith("new-")]
    _same_walk(bulk, _expected(rows), rows)  # every run that existed, once, in order
    assert len(bulk) == N_RUNS


@pytest.mark.parametrize(
    "filters",
    [
        {"status": "failed"},
        {"status": ["parked", "blocked"], "workflow": "beta"},
        {"workflow": "gamma", "version": "2", "queue": "fast"},
        {"queue": "fast", "search": "r%_"},
        {"search": "_0000", "status": ("completed", "queued", "in_doubt")},
        {"search": "99", "workflow": "alpha", "queue": "default", "status": "cancelled"},
    ],
    ids=[
        "status",
        "statuses+workflow",
        "workflow+version+queue",
        "queue+search%_",
        "search+statuses",
        "all",
    ],
)
def test_filters_combine_over_every_page(
    engine: durably.Engine, rows: list[Row], filters: dict[str, Any]
) -> None:
    want = _expected(rows, **filters)
    assert want, "a filter that matches nothing shows nothing"
    _same_walk(_walk(engine, limit=PAGE, **filters), want, rows)
    counts = engine.count_runs(**{k: v for k, v in filters.items() if k != "status"})
    status = filters.get("status")
    wanted = {status} if isinstance(status, str) else set(status or counts)
    assert sum(n for s, n in counts.items() if s in wanted) == len(want)


def test_count_runs_matches(engine: durably.Engine, rows: list[Row]) -> None:
    counts = engine.count_runs()
    assert {s: n for s, n in counts.items() if n} == dict(Counter(r[8] for r in rows))
    fast_beta = engine.count_runs(workflow="beta", queue="fast")
    assert {s: n for s, n in fast_beta.items() if n} == dict(
        Counter(r[8] for r in rows if r[1] == "beta" and r[3] == "fast")
    )
