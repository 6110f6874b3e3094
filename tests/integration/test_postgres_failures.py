"""PostgreSQL failure domains: errors classified transient or permanent, and a real
dropped connection (``pg_terminate_backend`` on the store's own sessions, again and again
for a while) mid-append never becomes the workflow's error."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import psycopg
import psycopg.errors as pg_errors
import pytest

import durably
from durably.errors import StoreDiskFull, StoreError, StoreUnavailable
from durably.store.postgres import classify


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (pg_errors.SerializationFailure("x"), StoreUnavailable),
        (pg_errors.DeadlockDetected("x"), StoreUnavailable),
        (pg_errors.AdminShutdown("x"), StoreUnavailable),
        (pg_errors.ConnectionFailure("x"), StoreUnavailable),
        (psycopg.OperationalError("server closed the connection unexpectedly"), StoreUnavailable),
        (pg_errors.DiskFull("x"), StoreDiskFull),
        (pg_errors.UndefinedTable("x"), StoreError),
        (pg_errors.DataCorrupted("x"), StoreError),
    ],
)
def test_errors_are_classified(exc: psycopg.Error, kind: type[StoreError]) -> None:
    assert classify(exc) is kind
    assert kind.transient is (kind is not StoreError)


@pytest.fixture
def own_database(pg_server_url: str) -> Iterator[tuple[str, str]]:
    """A database of this test's own (the admin URL, the database name): the test may
    refuse connections to it without disturbing anything else on the server."""
    name = f"durably_drop_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield pg_server_url, name
    with psycopg.connect(pg_server_url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def _outage(admin_url: str, db: str, seconds: float, over: threading.Event) -> None:
    """Terminate every session of ``db`` and refuse new ones for ``seconds``."""
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{db}" ALLOW_CONNECTIONS false')
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (db,)
        )
        time.sleep(seconds)
        admin.execute(f'ALTER DATABASE "{db}" ALLOW_CONNECTIONS true')
    over.set()


@pytest.mark.postgres
def test_a_dropped_connection_mid_append_is_retried_not_the_workflows(
    own_database: tuple[str, str],
) -> None:
    admin_url, db = own_database
    url = admin_url.rsplit("/", 1)[0] + f"/{db}"
    # connect_timeout_s=1 < the outage: the store's own single retry fails (PoolTimeout).
    engine = durably.Engine(url, connect_timeout_s=1, store_retry_s=60)
    count: Counter[str] = Counter()
    over = threading.Event()

    def charge(amount: int, *, idempotency_key: str) -> str:
        count["charge"] += 1
        if count["charge"] == 1:
            # The store's sessions die now and the server refuses new ones for 3 s, so the
            # append of this step's result meets a dropped connection.
            outage = threading.Thread(target=_outage, args=(admin_url, db, 3.0, over))
            outage.start()
            time.sleep(0.3)
        return f"charged {amount}"

    def after(*, idempotency_key: str) -> str:
        count["after"] += 1
        return "after"

    @engine.workflow(name="pay")
    def pay(ctx: durably.Context) -> list[str]:
        caught = []
        out = []
        for name, fn, args in (("charge", charge, (5,)), ("after", after, ())):
            try:
                out.append(ctx.step(name, fn, *args))
            except Exception as exc:  # the store's trouble must never land here
                caught.append(repr(exc))
        assert not caught, caught
        return out

    try:
        assert engine.run(pay, run_id="p") == ["charged 5", "after"]
        assert over.wait(30)
        assert count == Counter({"charge": 1, "after": 1})
        assert engine.get_run("p").status == "completed"
    finally:
        engine.close()


@pytest.mark.postgres
def test_a_claim_next_whose_reply_was_lost_returns_the_run_it_took(pg_url: str) -> None:
    """The connection dies after claim_next's COMMIT, before its reply: the store's retry
    on a fresh connection must return the run the first attempt took. Taking another left
    the first leased to a claim nobody received, undriven until its lease expired."""
    engine = durably.Engine(pg_url, lease_s=60.0)

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> int:
        return 1

    engine.start(w, run_id="first")
    engine.start(w, run_id="second")
    store: Any = engine.store
    real_call, real_claim_next = store._call, store.claim_next
    lost: list[bool] = []

    def claim_next(*args: Any, **kwargs: Any) -> Any:
        lost.append(False)  # armed: this call's first commit loses its reply
        return real_claim_next(*args, **kwargs)

    def call(op: Any, durable: bool = True) -> Any:
        def committed_then_lost(conn: Any, retried: bool) -> Any:
            out = op(conn, retried)
            if lost == [False]:
                lost[0] = True
                raise psycopg.OperationalError("server closed the connection unexpectedly")
            return out

        return real_call(committed_then_lost, durable)

    store._call, store.claim_next = call, claim_next
    try:
        run = engine.claim_next(["default"])
    finally:
        del store._call, store.claim_next
    try:
        assert lost == [True]  # the reply of a committed claim was lost, then retried
        assert run is not None and run.run_id == "first"
        assert engine.get_run("second").status == "queued"  # not taken as well
        assert engine.execute_claimed(run) == 1
    finally:
        engine.close()
