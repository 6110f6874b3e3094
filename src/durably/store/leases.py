"""The leases role, written once where the dialects agree (over the :mod:`.tx`
protocol). Claims stay each backend's own for now: which rows they lock, and how, is
where the dialects differ most (``FOR UPDATE SKIP LOCKED`` and per-queue locks on
PostgreSQL; the one writer on SQLite)."""

from __future__ import annotations

from .tx import Backend, Tx


class Leases(Backend):
    """Store methods of the leases role (see :class:`~durably.store.base.Store`)."""

    def renew(self, run_id: str, token: int, lease_s: float) -> bool:
        """Extend the lease; False when the token is stale."""

        def op(tx: Tx) -> bool:
            # The time read inside the transaction (the lease runs from when it holds).
            expires = self.clock.time() + lease_s
            n = tx.q("renew_lease", run_id=run_id, token=token, lease_expires_at=expires)
            return n.rowcount == 1

        return self._writing(op, atomic=False)
