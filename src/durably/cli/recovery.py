"""``durably retry``, ``durably skip`` and ``durably fork``: a person's decisions on stuck
and failed runs."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click

from ..errors import DurablyError
from ..history import OK, SIGNAL, RunRecord, StepRecord, top_level
from ..reopen import first_decision, top_level_at
from .common import CommandError, db_option, inert, json_text, open_engine, run_json


@click.command("retry")
@click.argument("run_id")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print the run as JSON.")
def retry_cmd(run_id: str, db: str, as_json: bool) -> None:
    """Try a failed or stuck run again (failed, in_doubt, quarantined or blocked).

    A failed run re-opens at its failed step: recorded steps replay (model calls already
    paid for are not paid again) and the failed step runs again with the same key (when
    the workflow recorded more after that failure, in a finally or except block, the
    retry is refused and names the `durably fork` that runs the step again). A step
    in doubt runs again with the same idempotency key, so check the receiving system
    first. A quarantined or blocked run keeps its effects in doubt: they still park
    in_doubt rather than run twice. A cancel asked for before the run stopped, which
    it never unwound for, is cleared (cancel again to stop it). The run continues the
    next time it is driven (engine.run with the same run_id, engine.resume, or a
    worker).
    """
    _requeue(db, as_json, lambda engine: engine.retry(run_id))


@click.command("skip")
@click.argument("run_id")
@click.option(
    "--output",
    "output",
    required=True,
    help='The step\'s result as JSON, e.g. \'{"ticket": "T-7"}\'.',
)
@click.option(
    "--position",
    help="Which step (default: the one the run is in doubt about, as runs show names it).",
)
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print the run as JSON.")
def skip_cmd(run_id: str, output: str, position: str | None, db: str, as_json: bool) -> None:
    """Record what an in-doubt step returned, without running it again."""
    try:
        value = json.loads(output)
    except (ValueError, RecursionError) as exc:  # bad JSON, an int past the digit limit, depth
        raise click.BadParameter(
            f"not JSON ({exc}); quote it, e.g. --output '\"T-7\"'", param_hint="--output"
        ) from None
    _requeue(db, as_json, lambda engine: engine.skip(run_id, value, position))


def _requeue(db: str, as_json: bool, action: Callable[[Any], RunRecord]) -> None:
    engine = open_engine(db, as_json)
    try:
        run = action(engine)
    except DurablyError as exc:
        raise CommandError(str(exc), as_json) from exc
    finally:
        engine.close()
    if as_json:
        click.echo(json_text(run_json(run)))
    else:
        click.echo(
            f"run {inert(run.run_id)} is queued again; it continues the next time it is"
            " driven (engine.run with the same run_id, engine.resume, or a worker)"
        )


@click.command("fork")
@click.argument("run_id")
@click.option(
    "--at",
    "at",
    required=True,
    help="The top-level position from which the new run goes live (runs show lists them);"
    " a position inside a gather (4.1.0) is refused with the gather's position to use.",
)
@click.option("--run-id", "new_run_id", help="The new run's id (default: a fresh UUID).")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print the new run as JSON.")
def fork_cmd(run_id: str, at: str, new_run_id: str | None, db: str, as_json: bool) -> None:
    """Start a new run replaying RUN_ID up to position --at, live from there on.

    The new run has the same workflow and input and a copy of RUN_ID's recorded results
    below --at, so those steps are not run (or paid for) again. It has a new incarnation,
    so new idempotency keys: EVERY EFFECT FROM --at ON HAPPENS AGAIN, and a receiving
    side cannot tell it from the original's. The new run is queued for workers (or
    engine.resume(NEW_RUN_ID)); RUN_ID is not changed.

    A fork never carries a decision: when an approval request below --at was decided,
    the fork copies only the positions below that request and goes live there, so the
    request waits for a new decision (durably approvals list). A signal the original
    took below that point is copied like a step's result (the fork does not wait for it
    again): the fork's message names each one.
    """
    engine = open_engine(db, as_json)
    try:
        n = top_level_at(at)  # as typed: a gather's position (4.1.0) gets its own advice
        history = engine.history(run_id)
        decided = first_decision(history)
        handle = engine.fork(run_id, at=n, new_run_id=new_run_id)
        run = engine.get_run(handle.run_id)
    except DurablyError as exc:
        raise CommandError(str(exc), as_json) from exc
    finally:
        engine.close()
    live = n if decided is None else min(n, decided)
    signals = _copied_signals(history, live)
    if as_json:
        data = {
            **run_json(run),
            "forked_from": run_id,
            "at": n,
            "live_from": live,
            "signals_copied": [{"position": p, "name": name} for p, name in signals],
        }
        click.echo(json_text(data))
        return
    new, old = inert(run.run_id), inert(run_id)
    asked = ""
    if live < n:
        asked = (
            f" Position {live} holds a decided approval request, and a fork never carries a"
            f" decision: it goes live there, and the request waits for a new one"
            " (durably approvals list)."
        )
    if signals:
        listed = ", ".join(f"{inert(repr(name))} at {p}" for p, name in signals)
        asked += (
            f" It copies what the signal wait(s) {listed} took, as it copies a step's"
            " result: the fork does not wait for them again (a person's decision that a"
            " fork must ask again belongs in ctx.request_approval)."
        )
    copied = f"positions 0..{live - 1} replay from {old}'s journal; " if live else ""
    click.echo(
        f"run {new} forked from {old} at position {n}: {copied}from {live} on it runs"
        f" live, and its effects from there happen again, under new idempotency keys.{asked}"
        f" It is queued: a worker runs it, or engine.resume({inert(repr(run.run_id))})."
    )


def _copied_signals(history: list[StepRecord], live: int) -> list[tuple[str, str]]:
    """The signal waits a fork live from ``live`` copies (position, signal name)."""
    return [
        (r.position, r.name.removeprefix("wait_for_signal:"))
        for r in history
        if r.kind == SIGNAL and r.status == OK and top_level(r.position) < live
    ]
