"""The history role's reads, written once: a generation's records and blobs (over the
:mod:`.tx` protocol). Writing records (append, finish, park) is each backend's own: the
step path is tuned per dialect, and park's lock order differs."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import NotADurablyDatabase
from ..history import CorruptRecord, StepRecord
from .rules import blobs_from_rows
from .tx import Backend


class History(Backend):
    """Store methods of the history role (see :class:`~durably.store.base.Store`)."""

    def load_history(self, run_id: str, generation: int) -> list[StepRecord]:
        """All records of one generation, in one query, checked on the way out."""
        rows = self._reading(
            lambda tx: tx.q("load_history", run_id=run_id, generation=generation).fetchall()
        )
        try:
            return [StepRecord(*r).check() for r in rows]
        except CorruptRecord as exc:
            raise NotADurablyDatabase(
                f"{self._where}: run {run_id!r} has a corrupt history record ({exc}); restore"
                " it from a backup"
            ) from exc

    def get_blobs(self, digests: Sequence[str]) -> dict[str, str]:
        """The stored blobs among ``digests``, as text by digest (missing ones left out)."""
        rows = self._reading(
            lambda tx: tx.q("get_blobs", digests=tx.array(list(digests))).fetchall()
        )
        return blobs_from_rows(rows)
