"""The store's semantics are written once (durably.store.tx and the role modules): these
pin that shape, so the two backends cannot drift apart again method by method."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from types import ModuleType

import pytest

from durably.store import (
    approvals,
    events,
    fleet,
    generations,
    history,
    leases,
    retention,
    runs,
    signals,
    spend,
    sqlfiles,
    streamwriter,
)
from durably.store.base import Store
from durably.store.sqlite import SQLiteStore
from durably.store.tx import Backend

ROLES = (
    runs,
    leases,
    history,
    generations,
    signals,
    approvals,
    spend,
    events,
    fleet,
    retention,
    streamwriter,
)
QUERY_CALLS = {"q", "one", "scalar"}
# The store methods each backend still writes itself: dialect mechanics only (polling or
# LISTEN, the owner-lock session, the server clock, closing). append is written once; its
# tuned one-round-trip statement is the named hook _append_quick (HOOKS below).
PER_BACKEND = {
    "wait_for_work",
    "wait_for_events",
    "hold_owner",
    "owner_lock_lost",
    "owners_without_lock",
    "db_time",
    "close",
}
# Where the dialects' statements or locks differ, the role asks its backend through a
# named hook (never a private method of the other backend's shape).
HOOKS = {
    "_append_quick",
    "_lock_for_park",
    "_served_params",
    "_open_queues",
    # The stream writer's own connection (durably.store.streamwriter).
    "_stream_transact",
    "_stream_close_conn",
}
# Hooks with a written-once default a backend may replace: PostgreSQL pipelines a batch of
# step appends (one round trip), falling back to the default on any refusal.
OPTIONAL_HOOKS = {"_append_many"}


def _queries_named_in(module: ModuleType) -> set[str]:
    tree = ast.parse(inspect.getsource(module))
    names = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in QUERY_CALLS
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "tx"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            names.add(node.args[0].value)
    return names


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_every_query_the_roles_run_exists_in_each_dialect(dialect: str) -> None:
    queries = sqlfiles.load_queries(dialect)
    named = set().union(*(_queries_named_in(m) for m in ROLES))
    assert len(named) > 40  # the scan finds the calls (it would pass vacuously otherwise)
    assert sorted(named - set(queries)) == []


def test_the_store_protocol_is_written_once_but_for_the_dialect_mechanics() -> None:
    from durably.store.postgres import PostgresStore

    protocol = {n for n, _ in inspect.getmembers(Store, inspect.isfunction) if n[0] != "_"}
    for backend in (SQLiteStore, PostgresStore):
        assert {n for n in vars(backend) if n in protocol} == PER_BACKEND, backend.__name__
    classes = [
        runs.Runs,
        leases.Leases,
        history.History,
        generations.Generations,
        signals.Signals,
        approvals.Approvals,
        spend.SpendLedger,
        events.Events,
        fleet.Fleet,
        retention.Retention,
        streamwriter.StreamTier,  # publish, flush_stream: the stream writer's tier
    ]
    written_once = protocol - PER_BACKEND
    assert len(written_once) == 42
    for name in sorted(written_once):
        assert [c.__name__ for c in classes if name in vars(c)] != [], name
        assert len([c for c in classes if name in vars(c)]) == 1, name


def test_each_backend_says_how_through_the_named_hooks_only() -> None:
    from durably.store.postgres import PostgresStore

    role_privates = {
        n
        for m in ROLES
        for c in vars(m).values()
        if isinstance(c, type) and issubclass(c, Backend) and c is not Backend
        for n, v in vars(c).items()
        if n.startswith("_") and not n.startswith("__") and inspect.isfunction(v)
    }
    assert HOOKS | OPTIONAL_HOOKS <= role_privates
    for backend in (SQLiteStore, PostgresStore):
        overridden = {n for n in vars(backend) if n in role_privates}
        assert HOOKS <= overridden <= HOOKS | OPTIONAL_HOOKS, backend.__name__


def test_a_query_named_twice_across_rooms_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "sqlite").mkdir()
    (tmp_path / "sqlite" / "runs.sql").write_text("-- name: get_run\nSELECT 1;\n")
    (tmp_path / "sqlite" / "spend.sql").write_text("-- name: get_run\nSELECT 2;\n")
    monkeypatch.setattr(sqlfiles, "_SQL_DIR", str(tmp_path))
    with pytest.raises(AssertionError, match="'get_run' is named twice"):
        sqlfiles.load_queries("sqlite")
