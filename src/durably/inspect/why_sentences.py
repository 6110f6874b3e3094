"""The words of ``durably runs why``: one plain sentence per state, from facts alone.

:func:`explain_facts` is pure: it builds the sentence and its JSON facts from a
:class:`~durably.inspect.why_facts.Facts` (read by :mod:`.why_facts`), so every row of
the table in ``docs/why.md`` is a unit of its own. The sentence quotes journal text
(names, error messages, park reasons) as it is: a terminal printer escapes it
(``durably.cli.common.term``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..budget import NEAR_FRACTION, Spend
from ..history import (
    APPROVAL,
    HALT,
    INTENT,
    OK,
    SIGNAL,
    STEP,
    WAITING,
    StepRecord,
    position_key,
    top_level,
)
from ..journal.text import clock_text as clock_text
from ..ownership import describe_owner
from ..reopen import compensated_steps, failed_frontier
from ..shell import command as cli_command
from ..shell import option as cli_option
from .why_facts import Facts, approval_wait, last_record, orphaned_row, signal_wait

QUOTE_CHARS_MAX = 300
"""Longest piece of journal text (an error message) quoted in a sentence."""


# A NonDeterminism always starts so (core.py); every other blocking reason is a value the
# journal cannot store or read back (SerializationError).
_NONDETERMINISM = re.compile(r"^step ([0-9.]+): history has ")


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
    if run.generation > 0:
        # A run that continued as new: what is said is of its current generation.
        base["generation"] = run.generation
        sentence = f"{sentence} (generation {run.generation}: continued as new {run.generation}x)"
    return Why(state, sentence, {**base, **facts})


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
    last = last_record(f.history)
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
    # "after step 0 plan" and "before its first step" carry their own preposition
    # ("it was at after step 0" read wrong); a step in flight is where it was at.
    at = "" if where.startswith(("after ", "before ")) else "at "
    return "orphaned", f"{text}; it was {at}{where}", facts


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
# (store.history.blobs_from_rows, engine._decode_input).
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
    elif kind == "HistoryTooLarge":
        fix = (
            "carry the workflow's state into a fresh history (catch durably.HistoryTooLarge"
            " and `return ctx.continue_as_new(state)`), or raise Engine(history_max=...)"
        )
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
    last = last_record(f.history)
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
    text += _who_resumes(f)
    facts["due"] = True
    return "parked", text, facts


def _parked_signal(f: Facts) -> _Built:
    """A run parked on ``ctx.wait_for_signal``: the signal, since when, until when; once
    due (the signal came, or the timeout passed), who resumes it."""
    run, q = f.run, f.queue
    wait = signal_wait(f.history)
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
    text += _who_resumes(f)
    return "signal", text, facts


def _parked_approval(f: Facts) -> _Built:
    """A run parked on ``ctx.request_approval``: the action, the digest prefix, since and
    until when, and the exact command that approves it."""
    run = f.run
    wait = approval_wait(f.history)
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
    text += _who_resumes(f)
    return "approval", text, facts


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
    text += _who_resumes(f)
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


def _who_resumes(f: Facts) -> str:
    """The tail of a due parked run's sentence: who resumes it (nobody, without a worker
    serving its queue: then the command that starts one)."""
    run, q = f.run, f.queue
    if q is not None and not q.workers:
        return (
            f"; no live worker serves queue {run.queue!r} (start one:"
            f" `{_worker_command(run.queue)}`, or `engine.resume({run.run_id!r})`)"
        )
    return "; the next claim resumes it"


def _worker_command(queue: str) -> str:
    """``durably worker MODULE:ENGINE --queue NAME`` with the queue name (journal text)
    quoted for a shell: a name such as ``ops;touch${IFS}PWNED;#`` must not run anything
    when the printed command is pasted."""
    return cli_command("worker", "MODULE:ENGINE", options=cli_option("--queue", queue))
