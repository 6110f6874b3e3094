"""``durably cancel``: ask a run to stop, from any process or machine."""

from __future__ import annotations

import click

from ..errors import DurablyError
from ..history import CANCELLED
from ..shell import command
from .common import CommandError, db_option, inert, json_text, open_engine, run_json


@click.command("cancel", short_help="Cancel RUN_ID: a durable flag seen at its next step.")
@click.argument("run_id")
@click.option(
    "--reason",
    help="Why (recorded with the run, shown by runs show and runs why; at most 2,000 characters).",
)
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print the run as JSON.")
def cancel_cmd(run_id: str, reason: str | None, db: str, as_json: bool) -> None:
    """Cancel RUN_ID: a durable flag its workflow sees at its next step.

    A running run unwinds at its next step boundary: the workflow gets durably.Cancelled
    at its next recording call that would go live (except/finally blocks can clean up,
    never run another step) and the run ends cancelled, whatever the workflow does. A
    parked run is woken to unwind. A queued run that has not started, and a blocked,
    quarantined or in_doubt run, end cancelled at once (the latter without their
    cleanup: retry such a run first to let it clean up). Cancelling again changes
    nothing; the first reason stays. A run that already completed or failed is refused.
    A cancel that arrives after the workflow's last step lets it complete.
    """
    engine = open_engine(db, as_json)
    try:
        # Read first only to word the answer: a run cancelled already is not one this
        # command ended at once (cancelling it again changes nothing).
        before = engine.get_run(run_id)
        already = before.status == CANCELLED
        asked = before.cancel_requested_at is not None  # the first reason stays
        run = engine.cancel(run_id, reason=reason)
    except DurablyError as exc:
        raise CommandError(str(exc), as_json) from exc
    finally:
        engine.close()
    at_once = run.status == CANCELLED and not already
    if as_json:
        click.echo(
            json_text({**run_json(run), "ended_at_once": at_once, "already_cancelled": already})
        )
        return
    rid = inert(run.run_id)
    said = f": {inert(run.cancel_reason)}" if run.cancel_reason else ""
    if already:
        click.echo(f"run {rid} was already cancelled{said}; nothing changed")
    elif at_once:
        click.echo(f"run {rid} is cancelled{said} ({inert(run.park_reason or 'ended at once')})")
    elif asked and run.cancel_requested_at is not None:
        # Say so, or a second --reason looks lost: the first request and reason stand.
        click.echo(
            f"a cancel of run {rid} was already asked for{said}; nothing changed (the first"
            f" reason stays): it is {run.status} and unwinds at its next step;"
            f" `{command('runs show', rid)}` follows it"
        )
    else:
        click.echo(
            f"run {rid} will be cancelled{said}: it is {run.status} and unwinds at its next"
            " step (its workflow gets durably.Cancelled there, then the run ends cancelled);"
            f" `{command('runs show', rid)}` follows it"
        )
