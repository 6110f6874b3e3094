"""What people and other processes send a run: signals and approval decisions (and the
pending approval requests a person decides on)."""

from __future__ import annotations

from typing import Any

from .. import codec
from ..approvals import APPROVED, ApprovalRow, Decision, PendingApproval, pending_list
from ..approvals import check_text as check_approval_text
from ..errors import ConfigError, SerializationError, clause
from ..history import SIGNAL_DATA_BYTES_MAX, check_name
from .base import Base, storable_run_id


class Messages:
    """``engine.signal``, ``engine.approve``/``reject`` and the approval listings."""

    def __init__(self, base: Base) -> None:
        self._base = base

    def signal(self, run_id: str, name: str, data: Any) -> int:
        """Send signal ``name`` to the run; returns its per-run sequence number."""
        if not isinstance(run_id, str) or not run_id:
            raise ConfigError(f"engine.signal: run_id must be a non-empty str, got {run_id!r:.300}")
        self._base.known_run_id(run_id)
        if not isinstance(name, str) or not name:
            raise ConfigError(
                f"engine.signal: the signal name must be a non-empty str, got {name!r:.300}"
            )
        check_name(name, "engine.signal: the signal name")
        try:
            text = codec.dumps(data, f"the data of signal {name!r}", SIGNAL_DATA_BYTES_MAX)
        except SerializationError as exc:
            # exc's message ends with a full stop already.
            raise SerializationError(f"{clause(exc)}. Nothing was sent to run {run_id!r}") from None
        import uuid  # imported on first use: it pulls in platform (slow)

        # One name for this send across the retries below: a retry after an unknown
        # commit outcome finds the stored signal instead of sending it twice.
        send = uuid.uuid4().hex
        return self._base.call(lambda: self._base.store.send_signal(run_id, name, text, send))

    def pending_approvals(self, run_id: str | None) -> list[PendingApproval]:
        """Approval requests waiting for a person, oldest first."""
        # A damaged row is left out, with a warning (approvals.pending_list).
        return pending_list(self.pending_approval_rows(run_id))

    def pending_approval_rows(self, run_id: str | None) -> list[ApprovalRow]:
        """The pending requests as stored."""
        if run_id is not None and not storable_run_id(run_id):
            return []  # no run can have that id, so none of its requests wait
        return self._base.call(lambda: self._base.store.pending_approvals(run_id))

    def approval_row(self, run_id: str, request_id: str) -> ApprovalRow | None:
        """One request as stored, pending or decided, or None."""
        if not storable_run_id(run_id) or not storable_run_id(request_id):
            return None  # no run (or request) can have that id
        return self._base.call(lambda: self._base.store.get_approval(run_id, request_id))

    def decide(
        self,
        run_id: str,
        request_id: str,
        digest: str,
        outcome: str,
        by: str | None,
        note: str | None,
        where: str,
    ) -> Decision:
        """Record a person's decision on a request (checked against its digest)."""
        for name, value in (("run_id", run_id), ("request_id", request_id)):
            if not isinstance(value, str) or not value:
                raise ConfigError(f"{where}: {name} must be a non-empty str, got {value!r:.200}")
        self._base.known_run_id(run_id)
        if not isinstance(digest, str):
            raise ConfigError(f"{where}: digest must be the request's digest (a str)")
        by = check_approval_text(by, f"{where}: by")
        note = check_approval_text(note, f"{where}: {'note' if outcome == APPROVED else 'reason'}")
        row = self._base.call(
            lambda: self._base.store.decide_approval(
                run_id, request_id, digest=digest, outcome=outcome, by=by, note=note
            )
        )
        return row.decision()
