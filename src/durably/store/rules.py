"""Rules every store applies the same way, and the errors they raise.

Backends differ in SQL, never in these decisions, so they live here rather than in one
backend that the others import.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Sequence
from typing import Any

from ..approvals import EXPIRED, OUTCOMES, ApprovalRequest, ApprovalRow, is_time
from ..budget import Budget, Spend, SpendEntry
from ..errors import (
    ApprovalAlreadyDecided,
    ApprovalMismatch,
    ApprovalNotFound,
    ConfigError,
    NotADurablyDatabase,
    RunConflict,
    RunFinished,
    RunInDoubt,
    RunLeased,
    RunNotFound,
    RunQuarantined,
    SerializationError,
    StoreError,
)
from ..history import (
    BLOCKED,
    CANCELLED,
    IN_DOUBT,
    QUARANTINED,
    QUEUED,
    TERMINAL,
    CorruptRecord,
    RunRecord,
    StepRecord,
)
from ..shell import command

_RUN_FIELDS = len(RunRecord.__slots__)
# Every column of a step row (the blobs a record carries go to the blobs table).
_STEP_FIELDS: tuple[str, ...] = tuple(f for f in StepRecord.__slots__ if f != "blobs")


def check_claimable(run: RunRecord, now: float, owner_dead: Callable[[str], bool]) -> None:
    """Raise unless ``run`` may be claimed now: ``RunFinished`` for a finished run (a
    claim must never reopen it), ``RunInDoubt`` / ``RunQuarantined`` for a run waiting
    for a person, ``RunLeased`` while a live owner holds an unexpired lease."""
    if run.terminal:
        raise RunFinished(
            f"run {run.run_id!r} is already {run.status}; its recorded outcome stands"
        )
    if run.status == IN_DOUBT:
        raise RunInDoubt(f"run {run.run_id!r} is in doubt: {run.park_reason}")
    if run.status == QUARANTINED:
        raise RunQuarantined(
            f"run {run.run_id!r} is quarantined after {run.starts} starts without progress;"
            " fix the cause, then `durably retry` it"
        )
    # The same process does not get a pass: another thread of it may be driving the run.
    # A driver that ends for any reason releases its lease, so this costs nothing normally.
    if run.owner is None:
        return
    if run.lease_expires_at is not None and run.lease_expires_at <= now:
        return
    if owner_dead(run.owner):
        return
    left = (run.lease_expires_at or now) - now
    raise RunLeased(
        f"run {run.run_id!r} is being driven by {run.owner} (lease expires in {left:.1f} s);"
        " two processes may never drive one run. Wait for it to finish or for the lease to"
        " expire, or stop that process."
    )


CANCEL_ERROR_TYPE = "durably.Cancelled"
"""The ``error_type`` of a cancelled run."""

# Statuses whose code cannot run again without a person: a cancel ends them at once.
_STUCK = frozenset({BLOCKED, QUARANTINED, IN_DOUBT})


def cancel_not_found(run_id: str, where: str) -> RunNotFound:
    """``engine.cancel`` of a run the journal does not hold: say what to check."""
    return RunNotFound(
        f"no run {run_id!r} in {where}; nothing was cancelled. Check the run id (`durably"
        " runs list` shows runs) and the database (--db / DURABLY_URL)"
    )


def cancel_plan(run: RunRecord, has_records: bool) -> str | None:
    """What a cancel does to ``run`` (as found under its row lock): ``"at_once"`` (it ends
    ``cancelled`` in the cancel's transaction: queued and never ran, or stuck waiting
    for a person), ``"flag"`` (the flag is set; the workflow unwinds at its next step,
    a parked run wakes for it) or None (nothing to do: cancelled already, or the flag
    is set already). Raises ``RunFinished`` for a run that finished otherwise."""
    if run.status == CANCELLED:
        return None
    if run.terminal:
        raise RunFinished(
            f"run {run.run_id!r} already finished ({run.status}); there is nothing to"
            " cancel and its recorded outcome stands"
        )
    if run.status in _STUCK or (run.status == QUEUED and not has_records):
        return "at_once"
    return None if run.cancel_requested_at is not None else "flag"


def cancelled_at_once_note(run: RunRecord) -> str:
    """The recorded note (``park_reason``) of a run a cancel ended at once."""
    if run.status == QUEUED:
        return "cancelled while queued: it had not started, so nothing ran"
    return (
        f"cancelled while {run.status}: the workflow did not run again, so its cleanup"
        " (except blocks, saga compensations) did not run; to let it clean up, `durably"
        " retry` a run first and cancel it while it runs"
    )


def check_signalable(run_id: str, status: str | None, where: str) -> None:
    """Raise unless a run with ``status`` (None: no such run) may take a signal:
    ``RunNotFound``, or ``RunFinished`` once it is completed, failed, cancelled or
    continued (a signal nobody can ever consume must not be accepted as sent)."""
    if status is None:
        raise RunNotFound(
            f"no run {run_id!r} in {where}; nothing was sent. Check the run id"
            " (`durably runs list` shows runs) and the database (--db / DURABLY_URL)"
        )
    if status in TERMINAL:
        raise RunFinished(
            f"run {run_id!r} is already {status}, so no wait can take a signal any more;"
            " nothing was sent. Signal a run that is still going (`durably runs list"
            " --status parked` shows the waiting ones)"
        )


def dead_owners(candidates: Sequence[str], owner_dead: Callable[[str], bool]) -> list[str]:
    """The owners among ``candidates`` (this host's, with live leases) that are provably
    dead: the one judgement a claim query cannot make itself, made here and passed in."""
    return sorted({o for o in candidates if owner_dead(o)})


def quarantined_error(run_id: str, max_starts: int) -> RunQuarantined:
    """The error of a run that was just quarantined."""
    return RunQuarantined(
        f"run {run_id!r} was started {max_starts} times without recording progress (each"
        " start crashed or was killed at the same place), so it is quarantined instead of"
        " looping. Look at `durably runs show` for the step it dies in, fix the cause, then"
        " `durably retry` it."
    )


def check_requeueable(run: RunRecord, from_statuses: Sequence[str]) -> None:
    """Raise ``StoreError`` unless an operator may requeue ``run`` from its status."""
    if run.status not in from_statuses:
        raise StoreError(
            f"run {run.run_id!r} is {run.status}, not {' or '.join(from_statuses)}; nothing"
            " was changed"
        )


def no_doubt_error(run_id: str, position: str) -> StoreError:
    """The error of a skip that names a position without an effect in doubt."""
    return StoreError(
        f"run {run_id!r} has no effect in doubt at position {position}; nothing was changed"
    )


def overwrite_error(run_id: str, position: str) -> StoreError:
    """The error of an append that would overwrite a recorded result."""
    return StoreError(
        f"run {run_id!r}: position {position} already holds a result; a result is never"
        " overwritten (this is a bug in durably; please report it)"
    )


def fork_conflict(run_id: str) -> RunConflict:
    """The error of a fork whose new run id is taken."""
    return RunConflict(
        f"run_id {run_id!r} already exists; a fork needs a new run id (leave it out and"
        " one is drawn)"
    )


def record_params(run_id: str, rec: StepRecord) -> dict[str, Any]:
    """The named parameters of a record's row, checked on the way in."""
    rec.check()
    params: dict[str, Any] = {f: getattr(rec, f) for f in _STEP_FIELDS}
    params["input_digest"] = params.pop("digest")
    params["run_id"] = run_id
    return params


def blob_params(rec: StepRecord, now: float) -> list[dict[str, Any]]:
    """The ``put_blob`` parameters of the blobs ``rec`` carries (UTF-8 bytes)."""
    out = []
    for digest, text in rec.blobs:
        data = text.encode("utf-8")
        out.append({"digest": digest, "data": data, "size": len(data), "now": now})
    return out


def blobs_from_rows(rows: Sequence[Sequence[Any]]) -> dict[str, str]:
    """Blob rows ``(digest, data)`` read back, as text by digest, each checked on the way
    out: a blob is stored under the sha256 of its bytes, so bytes that hash to anything
    else were changed after they were written (a hand edit, a damaged file) and are
    never handed out as a recorded value. ``SerializationError`` names the blob; the
    engine blocks the run reading it (never fails it), and nothing is changed."""
    out: dict[str, str] = {}
    for digest, data in rows:
        raw = bytes(data)
        actual = hashlib.sha256(raw).hexdigest()
        if actual != digest:
            raise SerializationError(
                f"blob {digest} does not match its sha256: its {len(raw):,} stored bytes"
                f" hash to {actual[:16]}..., so the blobs table was edited or damaged after"
                " it was written and its contents are not used"
            )
        out[digest] = raw.decode("utf-8")  # written as UTF-8 text; its hash says unchanged
    return out


def run_from_row(row: Sequence[Any]) -> RunRecord:
    """A run row read back, checked on the way out. Every query that reads a run selects
    every field of :class:`RunRecord` in order: a shorter row would silently default the
    incarnation to None, and with it change every key of the run."""
    if len(row) != _RUN_FIELDS:
        raise AssertionError(f"a run query selected {len(row)} columns, not {_RUN_FIELDS}")
    try:
        return RunRecord(*row).check()
    except CorruptRecord as exc:
        raise NotADurablyDatabase(f"corrupt run row: {exc}") from exc


WORKERS_MAX = 10_000
"""Most live workers one ``live_workers`` call returns."""
WORKER_ROWS_KEPT_S = 86_400.0
"""How long a dead worker's row stays (for people reading the table) before a beat
prunes it."""


def worker_params(owner: object, queues: Sequence[str], now: float, ttl_s: float) -> dict[str, Any]:
    """The parameters of ``beat_worker``: the queues as a JSON array."""
    import json

    return {
        "owner": str(owner),
        "queues": json.dumps(list(queues)),
        "now": now,
        "expires_at": now + ttl_s,
        "before": now - WORKER_ROWS_KEPT_S,
    }


def worker_rows(rows: Sequence[Sequence[Any]]) -> list[tuple[str, tuple[str, ...]]]:
    """``(owner, queues)`` of rows read from ``workers``; a crafted row's queues that are
    not a JSON array of strings count as none (the row is shown, never trusted)."""
    import json

    out = []
    for owner, text in rows:
        try:
            queues = json.loads(text) if isinstance(text, str) else None
        except (ValueError, RecursionError):
            queues = None
        ok = isinstance(queues, list) and all(isinstance(q, str) for q in queues)
        out.append((str(owner), tuple(queues) if ok and queues is not None else ()))
    return out


def spend_params(run_id: str, entry: SpendEntry, now: float) -> dict[str, Any]:
    """The named parameters of a ledger row (``insert_spend``)."""
    return {
        "run_id": run_id,
        "entry": entry.entry,
        "generation": entry.generation,
        "position": entry.position,
        "attempt": entry.attempt,
        "token": entry.token,
        "tokens": entry.tokens,
        "input_tokens": entry.input_tokens,
        "output_tokens": entry.output_tokens,
        "cost_usd": entry.cost_usd,
        "now": now,
    }


def budget_params(run_id: str, token: int, budget: Budget, now: float) -> dict[str, Any]:
    """The named parameters of ``set_budget``."""
    return {
        "run_id": run_id,
        "token": token,
        "tokens": budget.tokens,
        "cost_usd": budget.cost_usd,
        "now": now,
    }


def spend_from_row(row: Sequence[Any] | None) -> Spend:
    """A ``get_spend`` row as a :class:`Spend` (a hand-edited row that does not make a
    budget is shown as no budget rather than trusted)."""
    if row is None:
        return Spend()
    tokens, ins, outs, cost, entries, has_budget, b_tokens, b_cost = row
    budget = None
    if has_budget:
        try:
            budget = Budget(b_tokens, None if b_cost is None else float(b_cost))
        except ConfigError:
            budget = None
    try:
        spend = Spend(int(tokens), int(ins), int(outs), float(cost), int(entries), budget)
    except (TypeError, ValueError, OverflowError) as exc:
        raise NotADurablyDatabase(
            f"the spend ledger holds a value that is not a number ({exc}); repair the row"
            " or restore the journal from a backup"
        ) from exc
    # Every row the ledger writes is a finite amount >= 0: a NaN (PostgreSQL keeps one)
    # would make every later sum NaN and the budget never trigger; a negative amount
    # would silently give a run more budget. Both come from a hand edit.
    sums = (spend.tokens, spend.input_tokens, spend.output_tokens, spend.cost_usd)
    if not all(math.isfinite(v) and v >= 0 for v in sums):
        raise NotADurablyDatabase(
            f"the spend ledger sums to tokens={spend.tokens}, input_tokens="
            f"{spend.input_tokens}, output_tokens={spend.output_tokens}, cost_usd="
            f"{spend.cost_usd}: a row holds a negative or non-finite amount (a hand"
            " edit; durably writes none). Repair the spend rows or restore the journal"
            " from a backup"
        )
    return spend


# -- approvals -----------------------------------------------------------------------------

APPROVAL_COLUMNS = (
    "run_id, request_id, action, args, digest, requested_at, expires_at, decided_at,"
    " outcome, by_name, note"
)


def approval_row(row: Sequence[Any]) -> ApprovalRow:
    """An ``approvals`` row (columns in :data:`APPROVAL_COLUMNS` order), checked on the
    way out: an outcome the code does not know, or a time that is none (SQLite keeps
    text in a REAL column), is a damaged row."""
    try:
        out = ApprovalRow(
            str(row[0]),
            str(row[1]),
            str(row[2]),
            str(row[3]),
            str(row[4]),
            float(row[5]),
            None if row[6] is None else float(row[6]),
            None if row[7] is None else float(row[7]),
            None if row[8] is None else str(row[8]),
            None if row[9] is None else str(row[9]),
            None if row[10] is None else str(row[10]),
        )
    except (TypeError, ValueError) as exc:
        raise NotADurablyDatabase(
            f"run {str(row[0])[:200]!r} approval {str(row[1])[:200]}: a time of the row is"
            f" no time ({exc}); the row was edited by hand: repair it or restore a backup"
        ) from None
    times = (out.requested_at, out.expires_at, out.decided_at)
    if not all(t is None or is_time(t) for t in times):
        raise NotADurablyDatabase(
            f"run {out.run_id!r} approval {out.request_id}: a time of the row is no time"
            f" ({times!r}); the row was edited by hand: repair it or restore a backup"
        )
    if out.outcome is not None and (out.outcome not in OUTCOMES or out.decided_at is None):
        raise NotADurablyDatabase(
            f"run {out.run_id!r} approval {out.request_id}: outcome {out.outcome!r} (decided"
            f" at {out.decided_at!r}) is not one durably writes; the row was edited by hand"
        )
    return out


def park_waits(
    wait_signals: Sequence[str], approvals: Sequence[ApprovalRequest]
) -> tuple[dict[str, Any], list[ApprovalRequest]]:
    """A park's ``wait_signal`` and ``wait_approval`` parameters and the requests whose
    rows it writes: each a JSON array of names (request ids), or None when there are none
    (``runs.wait_signal`` holds this array: a signal of any name in it wakes the run)."""
    names = list(dict.fromkeys(wait_signals))
    reqs = list(approvals)
    ids = [r.request_id for r in reqs]
    params = {
        "wait_signal": json.dumps(names) if names else None,
        "wait_approval": json.dumps(ids) if ids else None,
    }
    return params, reqs


def approval_params(run_id: str, req: ApprovalRequest) -> dict[str, Any]:
    """The parameters of put_approval for ``req``."""
    return {
        "run_id": run_id,
        "request_id": req.request_id,
        "action": req.action,
        "args": req.args,
        "digest": req.digest,
        "requested_at": req.requested_at,
        "expires_at": req.expires_at,
    }


def check_decidable(
    run_id: str,
    request_id: str,
    status: str | None,
    row: ApprovalRow | None,
    digest: str,
    now: float,
    where: str,
    *,
    cancelling: bool = False,
) -> ApprovalRow:
    """Raise unless a person may decide the request ``row`` of a run with ``status``
    (None: no such run) naming ``digest``; return the row. The order matters: an unknown
    run or request says so before anything about digests, and a wrong digest is refused
    before saying whether the request was decided (it names another action).
    ``cancelling``: a cancel was asked for, so the run unwinds at its next wake and never
    uses a decision (accepting one would tell the person it was approved)."""
    if status is None:
        raise RunNotFound(
            f"no run {run_id!r} in {where}; nothing was decided. `durably approvals list`"
            " shows the requests waiting"
        )
    if row is None:
        raise ApprovalNotFound(
            f"run {run_id!r} has no approval request {request_id!r} (a request id is the"
            " request's position, e.g. '3'); nothing was decided. `durably approvals list"
            " --json` shows the requests waiting"
        )
    if digest != row.digest:
        shown = digest if len(digest) <= 16 else f"{digest[:12]}..."
        hint = (
            " (the API takes the full 64-hex digest; the CLI takes a prefix)"
            if len(digest) != len(row.digest)
            else " (digests are lowercase hex: pass it as listed)"
            if digest.lower() == row.digest
            else ""
        )
        # A prefix or an upper-case copy of the right digest names the right request in
        # the wrong form: saying it names another action would send the person hunting.
        what = (
            "the digest is not given as the request's full lowercase digest"
            if row.digest.startswith(digest.lower())
            else "the decision names another action or other arguments"
        )
        raise ApprovalMismatch(
            f"run {run_id!r} request {request_id} is for {row.action!r} with digest"
            f" {row.digest[:12]}..., not {shown!r}{hint}: {what}, so it was refused and"
            " nothing changed. Read the request again (`durably approvals list`) and decide"
            " on what it shows"
        )
    if not row.shows_its_digest():
        raise NotADurablyDatabase(
            f"run {run_id!r} request {request_id}: the action and arguments of its approvals"
            f" row do not hash to its digest {row.digest[:12]}...: the row was edited by hand,"
            " so what it shows is not what the run asked for. Nothing was decided; restore"
            " the row from a backup"
        )
    if row.outcome is not None:
        raise ApprovalAlreadyDecided(run_id, request_id, row.outcome, row.by, row.decided_at)
    if row.expires_at is not None and now >= row.expires_at:
        # The run takes the expiry when it wakes (due at expires_at): too late to decide.
        raise ApprovalAlreadyDecided(run_id, request_id, EXPIRED, None, row.expires_at)
    if status in TERMINAL:
        raise RunFinished(
            f"run {run_id!r} is already {status}, so nothing waits for request"
            f" {request_id} any more; nothing was decided"
        )
    if cancelling:
        raise RunFinished(
            f"run {run_id!r} is being cancelled (a cancel was asked for), so it will not"
            f" act on request {request_id}: nothing was decided."
            f" `{command('runs why', run_id)}` says when it ends"
        )
    return row
