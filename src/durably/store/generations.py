"""The generations role, written once over the :mod:`.tx` protocol: the hand-over of
``ctx.continue_as_new`` (one fenced transaction) and reads of finished generations.

A run's generation N ends ``continued`` and N + 1 begins in one transaction: the last
records of N, its ``generations`` row (its input, size and end), the run row's next
generation and input, and the ``run.continued`` event. The run row itself never becomes
terminal, and keeps its lease and token: the process that handed over drives the next
generation at once. A crash before the commit leaves generation N as it was (a replay
reaches the same hand-over again); after it, generation N + 1 is the run's, with no
record yet.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import LeaseLost, StoreError
from ..events import NewEvent
from ..history import RunRecord, StepRecord
from ..journal.events import RUN_CONTINUED, new_event
from .base import Generation
from .history import History
from .runs import run_from_row
from .tx import Tx


class Generations(History):
    """Store methods of the generations role (see :class:`~durably.store.base.Store`)."""

    def continue_as_new(
        self,
        run_id: str,
        token: int,
        generation: int,
        records: Sequence[StepRecord],
        events: Sequence[NewEvent],
        input: str,
        input_digest: str,
    ) -> RunRecord:
        """End ``generation`` (``continued``) and start the next with ``input``, in one
        fenced transaction; returns the run's row after it. Retried after a commit whose
        outcome was unknown, it finds its own hand-over (the run one generation on under
        the same token) and returns the row unchanged: never two generations for one."""
        now = self.clock.time()

        def op(tx: Tx) -> RunRecord:
            row = tx.one("lock_generation", run_id=run_id)
            if row is None or row[0] != token:
                raise LeaseLost(run_id, token)
            if row[1] == generation + 1:
                # This hand-over, retried: only this token's holder moves the generation.
                done = tx.one("get_run", run_id=run_id)
                assert done is not None
                return run_from_row(done)
            if row[1] != generation:
                raise StoreError(
                    f"run {run_id!r} is at generation {row[1]}, not {generation}: a"
                    " hand-over found the run elsewhere than it replayed (this is a bug in"
                    " durably; please report it)"
                )
            self._append_records(tx, run_id, token, records)
            count = int(tx.scalar("generation_records", run_id=run_id, generation=generation))
            tx.q(
                "put_generation",
                run_id=run_id,
                generation=generation,
                input=row[2],
                input_digest=row[3],
                records=count,
                now=now,
            )
            rows = tx.q(
                "continue_run",
                run_id=run_id,
                token=token,
                generation=generation,
                input=input,
                input_digest=input_digest,
                now=now,
            ).fetchall()
            if not rows:
                raise LeaseLost(run_id, token)
            data = {"generation": generation + 1, "records": count}
            done_event = new_event(RUN_CONTINUED, None, data, now, f"g{generation + 1}:continued")
            tx.events(run_id, [*events, done_event])
            return run_from_row(rows[0])

        return self._writing(op)

    def list_generations(self, run_id: str) -> list[Generation]:
        """The run's finished generations, oldest first (none before a continue_as_new)."""
        rows = self._reading(lambda tx: tx.q("list_generations", run_id=run_id).fetchall())
        return [Generation(int(r[0]), r[1], r[2], r[3], int(r[4]), float(r[5])) for r in rows]

    def origin_digest(self, run_id: str) -> str | None:
        """The input digest generation 0 of the run was created with, once the run has
        continued as new (None before: the run row's own digest is generation 0's)."""
        return self._reading(lambda tx: tx.scalar("origin_digest", run_id=run_id))  # type: ignore[no-any-return]
