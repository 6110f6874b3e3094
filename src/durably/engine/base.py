"""What every room of the engine shares: the options, the store, the retried store call
and the run lookups every entry point starts with.

The store is the one attribute set after construction: ``engine.store`` may be swapped
(tests wrap it to inject faults), and every room reads it here at each call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TypeVar

from ..errors import ConfigError, RunNotFound
from ..history import RunRecord, StepRecord, position_key, unstorable
from ..redact import redact_url
from ..store import retry
from ..store.base import Store
from .options import Options
from .tombstones import pruned_error

T = TypeVar("T")


class Base:
    """The engine's options and store, shared by reference by every room."""

    def __init__(self, opts: Options, store: Store) -> None:
        self.opts = opts
        self.store = store

    def call(self, op: Callable[[], T]) -> T:
        """``op()``, retrying a transient store error for up to ``store_retry_s``."""
        return retry.call(op, self.opts.clock, self.opts.store_retry_s)

    def not_found(self, run_id: str) -> RunNotFound:
        """``RunNotFound`` for ``run_id``, saying where to look."""
        return RunNotFound(
            f"no run {run_id!r} in {redact_url(self.opts.url)}; `durably runs list` shows runs"
        )

    def get_run(self, run_id: str) -> RunRecord:
        """The run's record; raises ``RunNotFound``."""
        self.known_run_id(run_id)
        run = self.store.get_run(run_id)
        if run is None:
            self.raise_if_pruned(run_id)
            raise self.not_found(run_id)
        return run

    def raise_if_pruned(self, run_id: str) -> None:
        """Raise ``RunPruned`` when ``run_id`` has a tombstone (read only once a run was
        not found: a run that exists costs nothing)."""
        tomb = self.store.get_tombstone(run_id)
        if tomb is not None:
            raise pruned_error(tomb)

    @contextlib.contextmanager
    def pruned_for_not_found(self, run_id: str) -> Iterator[None]:
        """Turn a ``RunNotFound`` the store raised for ``run_id`` into ``RunPruned`` when
        the run has a tombstone (signal, cancel, approve, events)."""
        try:
            yield
        except RunNotFound:
            if storable_run_id(run_id):  # a NUL or a lone surrogate cannot be looked up
                self.raise_if_pruned(run_id)
            raise

    def history(self, run_id: str, generation: int | None = None) -> list[StepRecord]:
        """The run's history in program order (of ``generation``, default the current
        one); raises ``RunNotFound``."""
        run = self.get_run(run_id)
        gen = run.generation if generation is None else generation
        if isinstance(gen, bool) or not isinstance(gen, int) or not 0 <= gen <= run.generation:
            # An int of the run's: anything else read as a generation with no records
            # (an empty history, a run that seems to have done nothing), or True as 1.
            raise ConfigError(
                f"run {run_id!r} has generations 0 to {run.generation}; there is no"
                f" generation {generation!r:.40} (generation= takes one of those)"
            )
        return sorted(
            self.store.load_history(run_id, gen),
            key=lambda r: position_key(r.position),
        )

    def known_run_id(self, run_id: object) -> None:
        """Refuse a run id no journal can hold before it reaches the store: not a str is
        a ``ConfigError``; a NUL or a lone surrogate (a mistyped or mis-decoded id) is
        ``RunNotFound``, since no run can have it (PostgreSQL would refuse the query,
        and a surrogate cannot be sent to either database)."""
        if not storable_run_id(run_id):
            raise RunNotFound(
                f"no run {str(run_id)[:80]!a} in {redact_url(self.opts.url)}: a run id never"
                f" holds {unstorable(str(run_id))}; `durably runs list` shows runs"
            )


def storable_run_id(run_id: object) -> bool:
    """Whether ``run_id`` is text a journal can hold (``ConfigError`` when it is not a
    str at all)."""
    if not isinstance(run_id, str):
        raise ConfigError(f"run_id must be a str, got {run_id!r:.80}")
    return unstorable(run_id) is None
