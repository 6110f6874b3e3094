"""``durably runs why``: one plain sentence saying why a run is where it is.

:func:`explain_facts` is pure: it builds the sentence from facts (the run row, its history, what
the event stream says about the step in flight, the queue ahead of it), so every row of
the table in ``docs/why.md`` is a unit of its own. :func:`gather` reads those facts from an
engine, through its public reads only (the inspect room sits above the engine: ``Engine``
never imports this module). :func:`explain` does both and returns an :class:`Explanation`,
the data ``durably runs why`` prints. The sentence quotes journal text (names, error
messages, park reasons) as it is: a terminal printer escapes it
(``durably.cli.common.term``).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import events as ev_kinds
from .budget import NEAR_FRACTION, Spend
from .errors import ConfigError
from .events import Event
from .history import (
    APPROVAL,
    FAILED,
    HALT,
    INTENT,
    OK,
    SIGNAL,
    STEP,
    WAITING,
    RunRecord,
    StepRecord,
    position_key,
    top_level,
)
from .ownership import describe_owner, owner_dead
from .reopen import compensated_steps, failed_frontier
from .runlist import LIST_RUNS_LIMIT_MAX
from .shell import command as cli_command
from .shell import option as cli_option

if TYPE_CHECKING:
    from .engine import Engine

QUEUE_SCAN_MAX = 10_000
"""Runs of one status looked at to count a queue (beyond it the count is "at least")."""
EVENTS_SCAN_MAX = 100_000
"""Events read to find the step in flight and the last error (a bound on one ``why``)."""
QUOTE_CHARS_MAX = 300
"""Longest piece of journal text (an error message) quoted in a sentence."""

# A NonDeterminism always starts so (core.py); every other blocking reason is a value the
# journal cannot store or read back (SerializationError).
_NONDETERMINISM = re.compile(r"^step ([0-9.]+): history has ")


@dataclass(frozen=True, slots=True)
class StepActivity:
    """What the event stream says about the latest step: its position, name, the attempt
    running (1 for the first), the retry budget when known, and the error of the attempt
    before (a retried step)."""

    position: str
    name: str
    attempt: int = 1
    attempts_max: int | None = None
    retry_error_type: str | None = None
    retry_error_message: str | None = None
    finished: bool = False


@dataclass(frozen=True, slots=True)
class QueueView:
    """The queue in front of a queued run: runs ahead of it (``capped`` when the count hit
    :data:`QUEUE_SCAN_MAX`) and the live workers serving its queue."""

    ahead: int
    workers: int
    capped: bool = False


@dataclass(frozen=True, slots=True)
class Facts:
    """Everything :func:`explain_facts` reads. ``owner_gone``: the owner is provably dead (judged
    by the caller, since that looks at this host's processes). ``last_error``: the last
    error type and message the stream recorded (for a quarantined run)."""

    run: RunRecord
    history: Sequence[StepRecord] = ()
    now: float = 0.0
    owner_gone: bool = False
    activity: StepActivity | None = None
    queue: QueueView | None = None
    last_error: tuple[str, str] | None = None
    blocked_type: str | None = None
    spend: Spend | None = None
    park_kind: str | None = None


@dataclass(frozen=True, slots=True)
class Why:
    """A run's state (a row of the table in docs/why.md), its sentence, and the facts the
    sentence was built from (for ``--json``)."""

    state: str
    sentence: str
    facts: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        """``{"state", "sentence", ...facts}`` for ``durably runs why --json``."""
        return {"state": self.state, "sentence": self.sentence, **self.facts}


@dataclass(frozen=True, slots=True)
class Fact:
    """One fact an explanation rests on, for people: a label (``"lease expires at"``)
    and its value as text (``"2026-12-01 10:00:00 UTC"``)."""

    label: str
    text: str


@dataclass(frozen=True, slots=True)
class Explanation:
    """Why a run is where it is (``durably.explain``): the run, its status, the state
    the sentence words (a row of docs/why.md: ``orphaned``, ``signal``, ...), the
    headline sentence, and the facts it rests on, as text (``facts``) and as JSON
    values (``to_json``). The sentence quotes journal text as it is: escape it for a
    terminal or a page."""

    run_id: str
    status: str
    state: str
    sentence: str
    facts: list[Fact]
    values: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Exactly what ``durably runs why --json`` prints: ``{"state", "sentence",
        "run_id", "status", "queue", ...}`` (the keys of each state: docs/why.md)."""
        return {"state": self.state, "sentence": self.sentence, **self.values}


def explain(engine: Engine, run_id: str, *, now: float | None = None) -> Explanation:
    """Why run ``run_id`` is where it is and what to do, as data: what ``durably runs
    why`` prints. ``now`` (epoch seconds) defaults to the engine's clock. Reads only
    through the engine's public methods; raises ``RunNotFound`` for an unknown run, and
    ``ConfigError`` for an ``engine`` that is no ``durably.Engine`` or a ``now`` that is
    no time."""
    if not all(hasattr(engine, a) for a in ("clock", "get_run", "history", "events")):
        raise ConfigError(
            "durably.explain takes a durably.Engine (durably.Engine(url)) and a run id, got"
            f" {type(engine).__module__}.{type(engine).__qualname__} for the engine"
        )
    if now is not None and (
        isinstance(now, bool) or not isinstance(now, int | float) or not math.isfinite(now)
    ):
        raise ConfigError(
            f"durably.explain: now must be None (the engine's clock) or a time in epoch"
            f" seconds, got {type(now).__name__} {now!r:.40}"
        )
    at = engine.clock.time() if now is None else now
    why = explain_facts(gather(engine, run_id, at))
    values = why.facts
    return Explanation(
        run_id=str(values.get("run_id", run_id)),
        status=str(values.get("status", "")),
        state=why.state,
        sentence=why.sentence,
        facts=facts_of(why.facts),
        values=dict(why.facts),
    )


# Facts whose value is a time (epoch seconds), said as one.
_TIME_FACTS = frozenset(
    {
        "queued_at",
        "lease_expires_at",
        "finished_at",
        "cancel_requested_at",
        "wake_at",
        "since",
        "deadline",
        "expires_at",
    }
)


def facts_of(values: dict[str, Any]) -> list[Fact]:
    """The JSON facts of a sentence as labelled text, in their order; facts without a
    value (None) are left out, and ``run_id``/``status`` are the explanation's own."""
    out: list[Fact] = []
    for key, value in values.items():
        if value is None or key in ("run_id", "status"):
            continue
        out.append(Fact(key.replace("_", " "), _fact_text(key, value)))
    return out


def _fact_text(key: str, value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if key in _TIME_FACTS and isinstance(value, (int, float)):
        return clock_text(float(value))
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def explain_facts(f: Facts) -> Why:
    """The sentence for the run in ``f``; see docs/why.md for the table of states."""
    run = f.run
    base: dict[str, Any] = {"run_id": run.run_id, "status": run.status, "queue": run.queue}
    builder = _BUILDERS.get(run.status, _other)
    if run.status == "running" and (f.owner_gone or orphaned_row(run, f.now)):
        builder = _orphaned
    elif run.status == "running" and _near_budget(f.spend):
        builder = _running_near_budget
    elif run.status == "failed" and (run.error_type or "").endswith(BUDGET_EXCEEDED):
        builder = _over_budget
    if run.cancel_requested_at is not None and run.status in ("queued", "running", "parked"):
        builder = _cancel_requested
    state, sentence, facts = builder(f)
    return Why(state, sentence, {**base, **facts})


def orphaned_row(run: RunRecord, now: float) -> bool:
    """True when a running run's row alone shows nobody drives it (no owner, or its lease
    expired); a provably dead owner is the caller's judgement (``Facts.owner_gone``)."""
    return run.status == "running" and (
        run.owner is None or run.lease_expires_at is None or run.lease_expires_at <= now
    )


_Built = tuple[str, str, dict[str, Any]]


def _queued(f: Facts) -> _Built:
    run, q = f.run, f.queue
    # updated_at: when it was queued (a retried run was created long before).
    text = f"queued since {clock_text(run.updated_at)} on queue {run.queue!r}"
    facts: dict[str, Any] = {"queued_at": run.updated_at}
    if q is not None:
        more = "at least " if q.capped else ""
        ahead = f"{more}{q.ahead} run{'s' if q.ahead != 1 else ''} ahead"
        if q.workers:
            serving = f"{q.workers} worker{'s' if q.workers != 1 else ''} serving it"
        else:
            serving = f"no live worker serves it (start one: `{_worker_command(run.queue)}`)"
        text = f"{text}, {ahead}, {serving}"
        facts.update(runs_ahead=q.ahead, runs_ahead_capped=q.capped, workers=q.workers)
    return "queued", text, facts


def _running(f: Facts) -> _Built:
    run = f.run
    host, pid = describe_owner(run.owner)
    text = f"running on pid {pid} at host {host}" if pid is not None else "running"
    if run.lease_expires_at is not None:
        text += f" (lease until {clock_text(run.lease_expires_at)})"
    facts: dict[str, Any] = {
        "owner_host": host or None,
        "owner_pid": pid,
        "lease_expires_at": run.lease_expires_at,
    }
    where, more = _where(f)
    facts.update(more)
    return "running", f"{text}, {where}", facts


BUDGET_EXCEEDED = "BudgetExceeded"


def _near_budget(spend: Spend | None) -> bool:
    share = None if spend is None else spend.fraction(spend.budget)
    return share is not None and share >= NEAR_FRACTION


def _spend_facts(spend: Spend | None) -> dict[str, Any]:
    if spend is None:
        return {}
    b = spend.budget
    return {
        "spent_tokens": spend.tokens,
        "spent_cost_usd": spend.cost_usd,
        "budget_tokens": None if b is None else b.tokens,
        "budget_cost_usd": None if b is None else b.cost_usd,
        "budget_used": spend.fraction(b),
    }


def _running_near_budget(f: Facts) -> _Built:
    _, text, facts = _running(f)
    spend = f.spend
    assert spend is not None  # chosen only with a spend near its budget
    facts.update(_spend_facts(spend))
    if spend.over(spend.budget) is not None:
        # The crossing was counted; the halt reaches the workflow at its next recording
        # call (the step in flight finishes and keeps its result).
        tail = (
            f"; over its budget: {spend.text()} — it stops with BudgetExceeded at its next"
            " recording call"
        )
        return "over_budget", text + tail, facts
    tail = f"; near its budget: {spend.text()}"
    return "near_budget", text + tail, facts


def _over_budget(f: Facts) -> _Built:
    run = f.run
    halt = next(
        (r for r in f.history if r.kind == HALT and r.name == "durably.budget"),
        None,
    )
    facts: dict[str, Any] = {
        "error_type": run.error_type,
        "error_message": run.error_message,
        **_spend_facts(f.spend),
    }
    spent = "" if f.spend is None else f": {f.spend.text()}"
    if halt is None:
        text = f"stopped by its budget{spent}"
        fork = f"`{cli_command('fork', run.run_id, options='--at N')}`"
    else:
        at = halt.position.split(".")[0]  # fork goes live from a top-level position
        facts["position"] = halt.position
        text = f"stopped by its budget at step {halt.position}{spent}"
        fork = f"`{cli_command('fork', run.run_id, options=f'--at {at}')}`"
    text += (
        f" — its recorded steps are kept: raise the budget (ctx.budget or budget=), then"
        f" {fork} goes on from there without paying for them again"
    )
    return "budget_exceeded", text, facts


def _where(f: Facts) -> tuple[str, dict[str, Any]]:
    """Which step a live run is at: the stream's step in flight (with its attempt), else
    the last record of its history."""
    act = f.activity
    if act is not None and not act.finished:
        text = f"step {act.position} {act.name}"
        if act.attempt > 1 or act.attempts_max is not None:
            text += f", attempt {act.attempt}"
            if act.attempts_max is not None:
                text += f" of {act.attempts_max}"
        if act.retry_error_type is not None:
            text += f" after {act.retry_error_type}"
            if act.retry_error_message:
                text += f": {quote(act.retry_error_message)}"
        facts = {
            "position": act.position,
            "step": act.name,
            "attempt": act.attempt,
            "attempts_max": act.attempts_max,
            "retry_error_type": act.retry_error_type,
        }
        return text, facts
    last = _last_record(f.history)
    if last is None:
        return "before its first step", {"position": None, "step": None}
    if last.status == INTENT:
        text = f"step {last.position} {last.name} in flight"
    else:
        text = f"after step {last.position} {last.name}, its last recorded step"
    return text, {"position": last.position, "step": last.name}


def _orphaned(f: Facts) -> _Built:
    run = f.run
    host, pid = describe_owner(run.owner)
    facts: dict[str, Any] = {
        "owner_host": host or None,
        "owner_pid": pid,
        "owner_gone": f.owner_gone,
        "lease_expires_at": run.lease_expires_at,
    }
    if run.owner is None or pid is None:
        who = "it has no owner" if run.owner is None else "its owner is not one durably wrote"
    elif f.owner_gone:
        who = f"owner pid {pid} on {host} is gone"
    else:
        who = f"owner pid {pid} on {host} shows no life"
    lease = run.lease_expires_at
    if lease is None:
        lease_text = "no lease"
    elif lease <= f.now:
        lease_text = f"lease expired {seconds(f.now - lease)} ago"
    else:
        lease_text = f"lease until {clock_text(lease)} (not waited for: the owner is gone)"
    text = (
        f"orphaned: {who}, {lease_text}; the next claim takes it over (or `durably recover`"
        " on that host)"
    )
    where, more = _where(f)
    facts.update(more)
    return "orphaned", f"{text}; it was at {where}", facts


def _in_doubt(f: Facts) -> _Built:
    run = f.run
    reason = run.park_reason or "no reason recorded"
    text = (
        f"in doubt: {quote(reason)} — inspect the target, then"
        f" `{cli_command('retry', run.run_id)}` or"
        f" `{cli_command('skip', run.run_id, options='--output JSON')}`"
    )
    return "in_doubt", text, {"reason": reason}


# How a blob or a run input whose bytes changed after they were written is refused
# (store.rules.blobs_from_rows, engine._decode_input).
_CHANGED_ROW = re.compile(r"does not match (its|the) sha256")


def _blocked(f: Facts) -> _Built:
    run = f.run
    reason = run.park_reason or "no reason recorded"
    m = _NONDETERMINISM.match(reason)
    if m is not None or f.blocked_type == "NonDeterminism":
        at = f" at step {m.group(1)}" if m is not None else ""
        text = (
            f"blocked: NonDeterminism{at}: {quote(reason)} — deploy the old"
            f" code, or patch it (`ctx.patched`), then {_run_again(run.run_id)}"
        )
        return "blocked", text, {"blocked_by": "NonDeterminism", "reason": reason}
    kind = f.blocked_type
    if kind == "SerializationError" and _CHANGED_ROW.search(reason):
        # A blob or a run input that no longer matches its sha256: the journal was changed.
        fix = "restore the changed row from a backup (the code is not at fault)"
    elif kind == "SerializationError":
        fix = "change the code to return and pass storable data"
    else:
        # A ConfigError (a naive datetime, a missing await, a bad argument, ...) or a run
        # blocked before the type was recorded: its reason says what to change.
        fix = "fix the code as the reason says"
    text = (
        f"blocked: {kind + ': ' if kind else ''}{quote(reason)} — {fix}, then"
        f" {_run_again(run.run_id)} (recorded steps replay)"
    )
    return "blocked", text, {"blocked_by": kind, "reason": reason}


def _run_again(run_id: str) -> str:
    """How a blocked run goes on once its code (or journal) is fixed: driving it again
    resumes it (a retry is only needed to hand it to a worker, which claims no blocked
    run)."""
    return (
        f"run it again (`engine.resume({run_id!r})`, or"
        f" `{cli_command('retry', run_id)}` for a worker to take it)"
    )


def _quarantined(f: Facts) -> _Built:
    run = f.run
    n = run.starts_without_progress
    text = f"quarantined after {n} start{'s' if n != 1 else ''} without progress"
    if f.last_error is not None:
        text += f"; last error {f.last_error[0]}: {quote(f.last_error[1])}"
    else:
        text += "; no error recorded (its process died each time: a crash, OOM or SIGKILL)"
    text += f" — fix the cause, then `{cli_command('retry', run.run_id)}`"
    facts: dict[str, Any] = {
        "starts": run.starts,
        "starts_without_progress": n,
        "last_error_type": None if f.last_error is None else f.last_error[0],
        "last_error_message": None if f.last_error is None else f.last_error[1],
    }
    return "quarantined", text, facts


def _failed(f: Facts) -> _Built:
    run = f.run
    error = f"{run.error_type}: {quote(run.error_message or '')}"
    frontier = failed_frontier(f.history)
    facts: dict[str, Any] = {"error_type": run.error_type, "error_message": run.error_message}
    undone = compensated_steps(f.history)
    if undone:
        # A retry is refused (reopen.check_not_compensated): the sentence names the fork.
        at = top_level(undone[0])
        listed = ", ".join(undone[:5]) + (", ..." if len(undone) > 5 else "")
        facts.update(compensated=undone, fork_at=at)
        text = (
            f"failed: {error}; a saga compensated it (undid the steps at {listed}) —"
            f" `{cli_command('fork', run.run_id, options=f'--at {at}')}` redoes the work under"
            " new keys"
        )
        return "failed", text, facts
    if frontier:
        pos = frontier[0]
        name = next(r.name for r in f.history if r.position == pos)
        facts.update(position=pos, step=name)
        text = (
            f"failed at step {pos} {name}: {error} — `{cli_command('retry', run.run_id)}`"
            " re-opens it"
            " at that step"
        )
        return "failed", text, facts
    last = _last_record(f.history)
    after = "before its first step" if last is None else f"after step {last.position}"
    text = (
        f"failed: the workflow raised {error} {after} — `{cli_command('retry', run.run_id)}`"
        " replays"
        " the recorded steps and runs its code from there again"
    )
    return "failed", text, facts


def _completed(f: Facts) -> _Built:
    run = f.run
    steps = sum(1 for r in f.history if r.kind == STEP and r.status == OK)
    took = "" if run.finished_at is None else f" in {seconds(run.finished_at - run.created_at)}"
    text = (
        f"completed at {clock_text(run.finished_at or run.updated_at)}{took} after {steps}"
        f" recorded step{'s' if steps != 1 else ''}; nothing left to do"
    )
    return "completed", text, {"steps": steps, "finished_at": run.finished_at}


def _cancel_requested(f: Facts) -> _Built:
    run = f.run
    said = f": {quote(run.cancel_reason)}" if run.cancel_reason else " (no reason given)"
    text = f"cancel requested at {clock_text(run.cancel_requested_at or run.updated_at)}{said}"
    facts: dict[str, Any] = {
        "cancel_requested_at": run.cancel_requested_at,
        "cancel_reason": run.cancel_reason,
    }
    if run.status == "running" and not (f.owner_gone or orphaned_row(run, f.now)):
        host, pid = describe_owner(run.owner)
        who = f"pid {pid} at host {host}" if pid is not None else "its owner"
        where, more = _where(f)
        facts.update(owner_host=host or None, owner_pid=pid, **more)
        text += (
            f"; unwinding: {who} stops it at its next step (now {where}), then it ends cancelled"
        )
    else:
        # Nobody drives it now: parked (woken for it), queued, or orphaned.
        text += (
            f"; it is {'orphaned' if run.status == 'running' else run.status} and unwinds"
            " when a worker (or its engine.run) takes it: recorded steps replay, its next"
            " step raises Cancelled, then it ends cancelled"
        )
        q = f.queue
        if q is not None:
            facts["workers"] = q.workers
            if not q.workers:
                # As for a due parked run: without a worker nothing ever takes it.
                text += (
                    f"; no live worker serves queue {run.queue!r} (start one:"
                    f" `{_worker_command(run.queue)}`, or"
                    f" `engine.resume({run.run_id!r})`)"
                )
    return "cancel_requested", text, facts


def _cancelled(f: Facts) -> _Built:
    run = f.run
    reason = run.cancel_reason if run.cancel_reason is not None else run.error_message
    said = f": {quote(reason)}" if reason else " (no reason given)"
    at = clock_text(run.finished_at or run.updated_at)
    unwound = any(r.kind == HALT for r in f.history)
    text = f"cancelled at {at}{said}"
    if unwound:
        halt = next(r for r in f.history if r.kind == HALT)
        text += f"; it unwound from step {halt.position}"
    elif run.park_reason:
        text += f"; {quote(run.park_reason)}"
    text += "; nothing left to do"
    facts: dict[str, Any] = {
        "cancel_reason": reason,
        "finished_at": run.finished_at,
        "unwound": unwound,
        "note": run.park_reason,
    }
    return "cancelled", text, facts


def _parked(f: Facts) -> _Built:
    """A parked run: what it waits for decides the sentence (``_PARKED_BY``)."""
    kind = f.park_kind or (f.run.park_reason or "").split(" ", 1)[0]
    return _PARKED_BY.get(kind, _other)(f)


def _parked_timer(f: Facts) -> _Built:
    run, q = f.run, f.queue
    wake = run.wake_at
    facts: dict[str, Any] = {"waiting_for": "timer", "wake_at": wake, "reason": run.park_reason}
    if q is not None:
        facts["workers"] = q.workers
    if wake is None:  # a hand-edited row: say what the row says
        return "parked", f"parked: {quote(run.park_reason or 'timer')} (no wake time)", facts
    if wake > f.now:
        text = (
            f"parked on a timer until {clock_text(wake)} (in {seconds(wake - f.now)}); it"
            " holds no lease or worker slot: an engine.run/resume waiting for it, or else a"
            " worker, resumes it when due"
        )
        facts["due"] = False
        return "parked", text, facts
    text = f"parked on a timer that was due at {clock_text(wake)} ({seconds(f.now - wake)} ago)"
    if q is not None and not q.workers:
        text += (
            f"; no live worker serves queue {run.queue!r} (start one:"
            f" `{_worker_command(run.queue)}`, or `engine.resume({run.run_id!r})`)"
        )
    else:
        text += "; the next claim resumes it"
    facts["due"] = True
    return "parked", text, facts


def _parked_signal(f: Facts) -> _Built:
    """A run parked on ``ctx.wait_for_signal``: the signal, since when, until when; once
    due (the signal came, or the timeout passed), who resumes it."""
    run, q = f.run, f.queue
    wait = _signal_wait(f.history)
    if wait is None:  # no signal wait in progress in its history: say what the row says
        return _other(f)
    name, since, deadline = wait
    facts: dict[str, Any] = {
        "waiting_for": "signal",
        "signal": name,
        "since": since,
        "deadline": deadline,
        "reason": run.park_reason,
        "due": run.wake_at is not None and run.wake_at <= f.now,
    }
    if q is not None:
        facts["workers"] = q.workers
    if not facts["due"]:
        until = "no timeout" if deadline is None else f"times out at {clock_text(deadline)}"
        command = cli_command("signal", run.run_id, name, options="--data JSON")
        text = (
            f"parked waiting for signal {quote(name)!r} since {clock_text(since)} ({until});"
            f" it holds no lease or worker slot — send it: `{command}`"
        )
        return "signal", text, facts
    # Woken at its deadline: the timeout; earlier: a signal made it due (send_signal).
    timed_out = deadline is not None and run.wake_at is not None and run.wake_at >= deadline
    cause = "its timeout passed" if timed_out else f"signal {quote(name)!r} arrived"
    text = f"parked on signal {quote(name)!r} since {clock_text(since)}: {cause}"
    if q is not None and not q.workers:
        text += (
            f"; no live worker serves queue {run.queue!r} (start one:"
            f" `{_worker_command(run.queue)}`, or `engine.resume({run.run_id!r})`)"
        )
    else:
        text += "; the next claim resumes it"
    return "signal", text, facts


def _signal_wait(history: Sequence[StepRecord]) -> tuple[str, float, float | None] | None:
    """``(name, since, deadline)`` of the signal wait in progress, if the last waiting
    record is one (its name is ``wait_for_signal:NAME``, its output the deadline)."""
    waits = [r for r in history if r.status == WAITING]
    last = max(waits, key=lambda r: position_key(r.position), default=None)
    if last is None or last.kind != SIGNAL:
        return None
    try:
        deadline = json.loads(last.output or "null")["deadline"]
    except (ValueError, TypeError, KeyError):
        deadline = None  # a damaged row: the run's replay blocks on it, not this sentence
    name = last.name.removeprefix("wait_for_signal:")
    return name, last.started_at, deadline if isinstance(deadline, (int, float)) else None


def _parked_approval(f: Facts) -> _Built:
    """A run parked on ``ctx.request_approval``: the action, the digest prefix, since and
    until when, and the exact command that approves it."""
    run = f.run
    wait = _approval_wait(f.history)
    if wait is None:  # no request waiting in its history: say what the row says
        return _other(f)
    request_id, action, digest, since, expires = wait
    prefix = digest[:12]
    command = cli_command("approve", run.run_id, request_id, options=f"--digest {prefix}")
    facts: dict[str, Any] = {
        "waiting_for": "approval",
        "request_id": request_id,
        "action": action,
        "digest": digest,
        "since": since,
        "expires_at": expires,
        "command": command,
        "reason": run.park_reason,
        "due": run.wake_at is not None and run.wake_at <= f.now,
    }
    q = f.queue
    if q is not None:
        facts["workers"] = q.workers
    if not facts["due"]:
        until = "no expiry" if expires is None else f"expires at {clock_text(expires)}"
        text = (
            f"parked waiting for approval of {quote(action)!r} (request {request_id}, digest"
            f" {prefix}) since {clock_text(since)} ({until}); it holds no lease or worker"
            f" slot — approve it: `{command}` (or `durably reject ... --reason TEXT`)"
        )
        return "approval", text, facts
    # Woken at its expiry: it expired; earlier: a person decided (decide_approval).
    expired = expires is not None and run.wake_at is not None and run.wake_at >= expires
    cause = "it expired" if expired else "it was decided"
    text = f"parked on approval of {quote(action)!r} (request {request_id}): {cause}"
    if q is not None and not q.workers:
        text += (
            f"; no live worker serves queue {run.queue!r} (start one:"
            f" `{_worker_command(run.queue)}`, or `engine.resume({run.run_id!r})`)"
        )
    else:
        text += "; the next claim resumes it"
    return "approval", text, facts


def _approval_wait(
    history: Sequence[StepRecord],
) -> tuple[str, str, str, float, float | None] | None:
    """``(request_id, action, digest, since, expires_at)`` of the approval request in
    progress, if the last waiting record is one (named ``request_approval:ACTION``)."""
    waits = [r for r in history if r.status == WAITING]
    last = max(waits, key=lambda r: position_key(r.position), default=None)
    if last is None or last.kind != APPROVAL:
        return None
    try:
        expires = json.loads(last.output or "null")["expires_at"]
    except (ValueError, TypeError, KeyError):
        expires = None  # a damaged row: the run's replay blocks on it, not this sentence
    action = last.name.removeprefix("request_approval:")
    ok = isinstance(expires, (int, float)) and not isinstance(expires, bool)
    return last.position, action, last.digest, last.started_at, expires if ok else None


def _parked_waits(f: Facts) -> _Built:
    """A run whose ``ctx.gather`` branches parked on several waits at once: the waits (its
    park reason), the earliest wake time, and the commands that satisfy each signal wait
    and approval request; any one of them wakes it."""
    run, q = f.run, f.queue
    wake = run.wake_at
    commands = _wait_commands(run.run_id, f.history)
    facts: dict[str, Any] = {
        "waiting_for": "waits",
        "wake_at": wake,
        "reason": run.park_reason,
        "commands": commands,
        "due": wake is not None and wake <= f.now,
    }
    if q is not None:
        facts["workers"] = q.workers
    what = quote(run.park_reason or "several waits")
    if not facts["due"]:
        until = "" if wake is None else f"; the first due at {clock_text(wake)}"
        text = (
            f"parked on several waits of ctx.gather branches at once ({what}){until}; any one"
            " of them wakes it (then waits not satisfied park again), and it holds no"
            " lease or worker slot"
        )
        if commands:
            text += " — " + ", ".join(f"`{c}`" for c in commands)
        return "waits", text, facts
    text = f"parked on several waits of ctx.gather branches at once ({what}): one is due"
    if q is not None and not q.workers:
        text += (
            f"; no live worker serves queue {run.queue!r} (start one:"
            f" `{_worker_command(run.queue)}`, or `engine.resume({run.run_id!r})`)"
        )
    else:
        text += "; the next claim resumes it"
    return "waits", text, facts


def _wait_commands(run_id: str, history: Sequence[StepRecord]) -> list[str]:
    """The command satisfying each signal wait and approval request in progress."""
    out: list[str] = []
    waits = [r for r in history if r.status == WAITING]
    for rec in sorted(waits, key=lambda r: position_key(r.position)):
        if rec.kind == SIGNAL:
            name = rec.name.removeprefix("wait_for_signal:")
            out.append(cli_command("signal", run_id, name, options="--data JSON"))
        elif rec.kind == APPROVAL:
            digest = f"--digest {rec.digest[:12]}"
            out.append(cli_command("approve", run_id, rec.position, options=digest))
    return out


def _other(f: Facts) -> _Built:
    # continued: their rows come with the issues that produce them.
    run = f.run
    reason = f": {quote(run.park_reason)}" if run.park_reason else ""
    text = f"{run.status}{reason} (since {clock_text(run.updated_at)})"
    return run.status, text, {"reason": run.park_reason}


STATES = (
    "queued",
    "running",
    "orphaned",
    "in_doubt",
    "blocked",
    "quarantined",
    "failed",
    "completed",
    "parked",
    "signal",
    "approval",
    "waits",
    "cancel_requested",
    "cancelled",
    "near_budget",
    "over_budget",
    "budget_exceeded",
)
"""Every state :func:`explain_facts` words a sentence of its own for (docs/why.md has a row for
each); other statuses get the status and its recorded reason."""

# What a parked run waits for (the run.parked event's kind) -> its sentence.
_PARKED_BY = {
    "timer": _parked_timer,
    "signal": _parked_signal,
    "approval": _parked_approval,
    "waits": _parked_waits,
}

_BUILDERS = {
    "queued": _queued,
    "parked": _parked,
    "running": _running,
    "in_doubt": _in_doubt,
    "blocked": _blocked,
    "quarantined": _quarantined,
    "failed": _failed,
    "completed": _completed,
    "cancelled": _cancelled,
}


def _last_record(history: Sequence[StepRecord]) -> StepRecord | None:
    return max(history, key=lambda r: position_key(r.position), default=None)


def clock_text(t: float) -> str:
    """A time of day for a sentence (UTC, with the date when it is not today's); a value
    that is no time (a hand-edited row: infinite, NaN, past year 9999) is said as such."""
    try:
        when = dt.datetime.fromtimestamp(t, dt.UTC)
    except (OverflowError, OSError, ValueError):
        return f"{t!r} (not a time: the row was edited)"
    today = dt.datetime.now(dt.UTC).date()
    fmt = "%H:%M:%S UTC" if when.date() == today else "%Y-%m-%d %H:%M:%S UTC"
    return when.strftime(fmt)


def seconds(s: float) -> str:
    """A duration for people: ``12 s``, ``4 min``, ``3.0 h``."""
    s = max(0.0, s)
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    hours = s / 3600
    # Short either way: an edited row's 1e300 s must not print 300 digits.
    return f"{hours:.1f} h" if hours < 1e6 else f"{hours:.3g} h"


def quote(text: str) -> str:
    """Journal text cut for a sentence (escaping is the printer's job)."""
    return text if len(text) <= QUOTE_CHARS_MAX else text[:QUOTE_CHARS_MAX] + "..."


# -- reading the facts -------------------------------------------------------------------


def gather(engine: Engine, run_id: str, now: float) -> Facts:
    """The facts :func:`explain_facts` needs about ``run_id``, read through ``engine``'s
    public methods (raises ``RunNotFound`` for an unknown run)."""
    run: RunRecord = engine.get_run(run_id)
    history = engine.history(run_id)
    gone = run.status == "running" and run.owner is not None and owner_dead(run.owner)
    queue = queue_view(engine, run) if run.status in ("queued", "parked") else None
    events = read_events(engine, run_id)
    spend = engine.spend(run_id) if run.status in ("running", "failed") else None
    return Facts(
        run,
        history,
        now,
        gone,
        step_activity(events),
        queue,
        last_error_of(events, history),
        blocked_type(events),
        spend,
        park_kind(events),
    )


def queue_view(engine: Engine, run: RunRecord) -> QueueView:
    """Runs of ``run``'s queue that a worker takes before it (queued earlier; workers take
    the oldest first; at most :data:`QUEUE_SCAN_MAX` queued runs of the queue are looked
    at), and the live workers serving that queue (their rows in the journal, less those
    whose pid is provably gone)."""
    me = (run.created_at, run.run_id)
    ahead = scanned = 0
    after: str | None = None
    while scanned < QUEUE_SCAN_MAX:
        limit = min(LIST_RUNS_LIMIT_MAX, QUEUE_SCAN_MAX - scanned)
        page = engine.list_runs(status="queued", queue=run.queue, after=after, limit=limit)
        scanned += len(page.runs)
        ahead += sum(1 for r in page.runs if (r.created_at, r.run_id) < me)
        if page.next is None:
            break
        after = page.next
    workers = engine.live_workers(run.queue)
    return QueueView(ahead, len(workers), capped=scanned >= QUEUE_SCAN_MAX)


def read_events(engine: Engine, run_id: str) -> list[Event]:
    """The run's events, oldest first (at most :data:`EVENTS_SCAN_MAX`)."""
    out: list[Event] = []
    cursor = 0
    while len(out) < EVENTS_SCAN_MAX:
        page = engine.events(run_id, after=cursor, limit=1000)
        out.extend(page.events)
        if not page.events or page.cursor == cursor:
            break
        cursor = page.cursor
    return out


def step_activity(events: Iterable[Event]) -> StepActivity | None:
    """The latest step the stream shows: started, retried (with the error that caused the
    retry) or finished."""
    act: StepActivity | None = None
    for ev in events:
        kind = ev.kind
        data = ev.data if isinstance(ev.data, dict) else {}
        if kind == ev_kinds.STEP_STARTED:
            act = StepActivity(
                str(ev.position),
                str(data.get("name", "?")),
                _int(data.get("attempt"), 1),
                _int_or_none(data.get("attempts_max")),
            )
        elif kind == ev_kinds.STEP_RETRIED:
            act = StepActivity(
                str(ev.position),
                str(data.get("name", act.name if act else "?")),
                _int(data.get("attempt"), 1) + 1,
                _int_or_none(data.get("attempts_max")),
                _str_or_none(data.get("error_type")),
                _str_or_none(data.get("error_message")),
            )
        elif kind in (ev_kinds.STEP_COMPLETED, ev_kinds.STEP_FAILED) and act is not None:
            act = StepActivity(act.position, act.name, act.attempt, act.attempts_max, finished=True)
    return act


def last_error_of(events: Iterable[Event], history: Sequence[StepRecord]) -> tuple[str, str] | None:
    """The last error type and message in the stream (a failed or retried step, a failed
    run); the history's last failed record when the stream has none."""
    found: tuple[str, str] | None = None
    for ev in events:
        data = ev.data if isinstance(ev.data, dict) else {}
        etype = data.get("error_type")
        if isinstance(etype, str):
            found = (etype, str(data.get("error_message") or ""))
    return found if found is not None else _failed_record_error(history)


def blocked_type(events: Iterable[Event]) -> str | None:
    """The error type of the run's last ``run.blocked`` event, if any."""
    found: str | None = None
    for ev in events:
        if ev.kind == ev_kinds.RUN_BLOCKED and isinstance(ev.data.get("error_type"), str):
            found = ev.data["error_type"]
    return found


def park_kind(events: Iterable[Event]) -> str | None:
    """What the run's last ``run.parked`` event says it waits for (timer, signal,
    approval), if any."""
    found: str | None = None
    for ev in events:
        if ev.kind == ev_kinds.RUN_PARKED:
            kind = ev.data.get("kind")
            found = kind if isinstance(kind, str) else None
    return found


def _failed_record_error(history: Sequence[StepRecord]) -> tuple[str, str] | None:
    failed = [r for r in history if r.status == FAILED and r.error_type]
    if not failed:
        return None
    last = max(failed, key=lambda r: position_key(r.position))
    return (last.error_type or "", last.error_message or "")


def _int(value: object, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _worker_command(queue: str) -> str:
    """``durably worker MODULE:ENGINE --queue NAME`` with the queue name (journal text)
    quoted for a shell: a name such as ``ops;touch${IFS}PWNED;#`` must not run anything
    when the printed command is pasted."""
    return cli_command("worker", "MODULE:ENGINE", options=cli_option("--queue", queue))
