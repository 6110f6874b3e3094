"""psycopg helpers of the PostgreSQL backend (:mod:`durably.store.postgres`): error
classification and messages, quiet closing, and the SQL of event batches.

psycopg is imported here and in postgres.py only; neither is imported for SQLite.
"""

from __future__ import annotations

import re
import select
from typing import Any

import psycopg
from psycopg import Connection
from psycopg.conninfo import conninfo_to_dict

from ..errors import ConfigError, StoreDiskFull, StoreError, StoreUnavailable
from ..history import StepRecord
from ..redact import redact
from .history import record_params
from .sqlfiles import load_queries

_Q = load_queries("postgres")
Conn = Connection[tuple[Any, ...]]


def _close(conn: Conn | None) -> None:
    """Close ``conn`` (if any), quietly: it is dropped because it failed or is done."""
    if conn is not None:
        try:
            conn.close()
        except psycopg.Error:
            pass  # already dead


_EVENTS_VALUES_MAX = 8
"""Events written at most as a VALUES list (a step's two, plus a few emits); more go as
arrays. Scalar parameters cost psycopg about half of what five arrays do, the row count
is part of the query text (so a generic plan is exact), and each count is its own
prepared statement: few counts, few statements."""

_EVENTS_ROW = (
    "(%(k{i})s::text, %(p{i})s::text, %(d{i})s::text, %(a{i})s::double precision,"
    " %(x{i})s::text, {n})"
)
# The arrays go through scalar subqueries so that the planner estimates the same row count
# with or without their values: the cached generic plan then costs what a custom one does
# and is kept, instead of the statement being planned again at each call.
_EVENTS_ARRAYS = (
    "unnest((SELECT %(kinds)s::text[]), (SELECT %(positions)s::text[]),"
    " (SELECT %(datas)s::text[]), (SELECT %(ats)s::double precision[]),"
    " (SELECT %(dedupes)s::text[])) WITH ORDINALITY"
)
_events_queries: dict[tuple[str, int], str] = {}


def _events_sql(name: str, count: int) -> str:
    """Query ``name`` (write_events or append_with_events) for ``count`` events: its
    ``{events}`` rows a VALUES list of ``count`` rows, or arrays past
    ``_EVENTS_VALUES_MAX`` (the parameters :meth:`PostgresStore._event_params` makes)."""
    key = (name, count if count <= _EVENTS_VALUES_MAX else 0)
    query = _events_queries.get(key)
    if query is None:
        if count > _EVENTS_VALUES_MAX:
            rows = _EVENTS_ARRAYS
        else:
            values = (_EVENTS_ROW.format(i=i, n=i + 1) for i in range(count))
            rows = f"(VALUES {', '.join(values)})"
        query = _events_queries[key] = _Q[name].replace("{events}", rows)
    return query


def _record_params(run_id: str, token: int, rec: StepRecord) -> dict[str, Any]:
    """The named parameters of ``append_record`` for one record, checked on the way in."""
    params = record_params(run_id, rec)
    params["token"] = token
    return params


_TRANSIENT_SQLSTATES = frozenset({"40001", "40P01", "57P01", "57P02", "57P03", "53300"})
"""serialization failure, deadlock, admin/crash shutdown, cannot connect now, too many
connections: the same call may succeed when tried again."""


def classify(exc: psycopg.Error) -> type[StoreError]:
    """``StoreDiskFull`` (SQLSTATE 53100), ``StoreUnavailable`` for errors that may pass
    (a dropped or refused connection, a serialization failure, a deadlock, a shutdown), else
    ``StoreError`` (permanent: a schema or data problem)."""
    state = getattr(exc, "sqlstate", None)
    if state == "53100":
        return StoreDiskFull
    if state in _TRANSIENT_SQLSTATES or (
        isinstance(exc, psycopg.OperationalError) and (state is None or state.startswith("08"))
    ):
        return StoreUnavailable
    return StoreError


def _refused_for_good(exc: psycopg.Error) -> bool:
    """True when the server itself refused the connection for a reason that stays (a bad
    role, password or database name), not because it is starting, stopping or full."""
    text = str(exc)
    passing = ("starting up", "shutting down", "too many", "recovery mode", "in recovery")
    return "FATAL:" in text and not any(p in text for p in passing)


def _has_input(conn: Conn) -> bool:
    """True when the server sent something on the idle connection ``conn`` (or closed it)."""
    try:
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
    except (OSError, ValueError, psycopg.Error):
        return True  # no usable socket: let the ping find out
    return bool(readable)


def _describe(url: str) -> str:
    """``PostgreSQL host:port/db`` for messages; never the password."""
    try:
        info = conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise ConfigError(
            f"bad PostgreSQL URL: {_first_line(exc, url)}; write postgresql://user@host:port/dbname"
        ) from None  # libpq's own message may quote the password: never chain it
    host = info.get("host") or "localhost"
    port = info.get("port") or "5432"
    return f"PostgreSQL {host}:{port}/{info.get('dbname') or info.get('user') or ''}"


def _first_line(exc: BaseException, url: str | None = None) -> str:
    """The first line of a driver message (libpq adds multi-line detail), with credentials
    masked: libpq may echo the part of ``url`` it could not parse, password included."""
    text = redact(str(exc).strip(), url=url)
    return re.split(r"\r?\n", text, maxsplit=1)[0] if text else type(exc).__name__
