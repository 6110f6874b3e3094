"""The small transaction protocol the store's semantics are written over.

The role modules (:mod:`.runs`, :mod:`.signals`, :mod:`.approvals`, :mod:`.spend`,
:mod:`.events`, :mod:`.fleet`) say *what* each store operation does once, in terms of
named queries run inside one :class:`Tx`; :class:`~durably.store.sqlite.SQLiteStore` and
:class:`~durably.store.postgres.PostgresStore` say *how*: the connection, the pragmas or
the pool, the fork gate, error translation, LISTEN/NOTIFY. (procrastinate's manager is
written the same way over its connector.)

What a backend provides (:class:`Backend`):

- ``_writing(op, atomic=True)``: run ``op(tx)`` as one write transaction. SQLite opens it
  with ``BEGIN IMMEDIATE``, so the database's single writer lock is held from the first
  statement (every "lock the run row" below is that lock). PostgreSQL runs it on a pooled
  connection inside ``conn.transaction()`` and runs it again, once, on a fresh connection
  when the first one died (``tx.retried`` then says the first attempt's outcome is
  unknown). ``atomic=False`` is a promise that ``op`` is one statement, or statements
  each safe on their own: PostgreSQL then runs them in autocommit (one round trip each),
  SQLite still in one transaction.
- ``_reading(op, snapshot=False)``: run ``op(tx)`` for reads; ``snapshot=True`` asks for
  all its reads from one snapshot where the dialect gives that cheaply (SQLite's deferred
  ``BEGIN``; PostgreSQL reads in autocommit and the op orders its reads instead).
- ``_where``: the journal as error messages name it.

Lock ordering stays each dialect's own and explicit: the queries named ``lock_*`` take the
run row's lock on PostgreSQL (``FOR UPDATE`` / ``FOR NO KEY UPDATE``) and are plain reads
on SQLite, where ``BEGIN IMMEDIATE`` already holds the whole database. Operations whose
statement order differs between the dialects say so through a named hook of the backend:
``_lock_for_park`` (PostgreSQL takes ``lock_token`` in a statement of its own before
anything else; SQLite has held its one writer lock since ``BEGIN IMMEDIATE``) and
``_append_quick`` (the step path's tuned append: one autocommit statement where the
dialect can write a step's record, or on PostgreSQL a record and its events, in one round
trip; on SQLite a record and its events in a transaction written out, the events in one
statement; the transaction written once in :mod:`.history` decides everything else).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

from ..clock import Clock
from ..events import NewEvent

T = TypeVar("T")


class Result(Protocol):
    """What running one named query gives back (a DB-API cursor)."""

    @property
    def rowcount(self) -> int:
        """Rows the statement changed (or, for a PostgreSQL ``SELECT``, returned)."""
        ...

    def fetchone(self) -> Any:
        """The next row, or None."""
        ...

    def fetchall(self) -> list[Any]:
        """Every row left (a RETURNING statement on SQLite must be read to its end)."""
        ...


class Tx(Protocol):
    """One open transaction (or, for ``atomic=False``, one autocommit session)."""

    retried: bool
    """True on PostgreSQL's second attempt, after the first one's connection died with
    its commit outcome unknown (the op must then recognise its own committed work). Always
    False on SQLite, whose commit outcome is never unknown to the caller."""

    def q(self, name: str, /, **params: Any) -> Result:
        """Run the named query of this dialect's ``sql/`` files with ``params``."""
        ...

    def one(self, name: str, /, **params: Any) -> Any:
        """The first row of the named query, or None (the rest is read and dropped)."""
        ...

    def scalar(self, name: str, /, **params: Any) -> Any:
        """The first column of the first row of the named query, or None."""
        ...

    def many(self, name: str, rows: Sequence[dict[str, Any]], /) -> None:
        """Run the named query once per parameter set of ``rows`` (the driver's
        ``executemany``: one prepared statement, no per-row round trip through Python)."""
        ...

    def array(self, values: Sequence[Any]) -> Any:
        """``values`` as this dialect passes a list parameter (a JSON text on SQLite, an
        array on PostgreSQL)."""
        ...

    def notify(self) -> None:
        """Wake the workers waiting for work when this transaction commits (PostgreSQL's
        NOTIFY, delivered at commit so never before the change it announces); nothing on
        SQLite, whose workers poll."""
        ...

    def events(self, run_id: str, events: Sequence[NewEvent]) -> None:
        """Number ``events`` after the run's newest and insert them in this transaction
        (one already stored, by its dedupe, is skipped)."""
        ...

    def savepoint(self) -> AbstractContextManager[None]:
        """A savepoint inside this transaction: an exception leaving the block rolls back
        what the block wrote (and goes on; a database error the dialect rejected a row
        with comes out as a ``StoreError``), the transaction goes on (group commit: one
        append of a batch that fails alone)."""
        ...


class Backend:
    """What the role modules need from a store backend (see the module docstring): the
    store classes inherit the roles, and each backend overrides these."""

    clock: Clock

    @property
    def _where(self) -> str:
        """The journal as error messages name it (a file path, a server and schema)."""
        raise NotImplementedError

    def _writing(self, op: Callable[[Tx], T], atomic: bool = True, durable: bool = True) -> T:
        """Run ``op`` as one write transaction (see the module docstring); ``durable``
        False (effects mode, a pure step's append) lets its commit skip the fsync."""
        raise NotImplementedError

    def _reading(self, op: Callable[[Tx], T], snapshot: bool = False) -> T:
        """Run ``op`` for reads (see the module docstring)."""
        raise NotImplementedError

    def _shared_write(self, run_id: str, op: Callable[[Tx], T]) -> T:
        """:meth:`_writing` for a run's writes on the way of every run (its creation,
        claim and finish: ``op`` atomic, durable, citing no blob): the backend may run
        it inside the transaction that group commit shares between concurrent appends
        (SQLite, whose one writer would otherwise make every batch wait for it), with a
        savepoint of its own, so that it fails alone as in a transaction of its own."""
        return self._writing(op)
