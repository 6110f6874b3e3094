"""``durably runs list|show|why``: inspect runs and their journals.

Everything these commands print from the journal (run ids, workflow and step names, error
messages, outcomes, park reasons) goes through :func:`.common.term`: error messages are
often model or tool output, and must neither crash rich's markup nor drive the terminal.
"""

from __future__ import annotations

from typing import Any

import click

from ..errors import DurablyError
from ..history import RUN_STATUSES, RunRecord, StepRecord
from ..redact import redact_url
from .common import (
    CommandError,
    db_option,
    duration,
    json_text,
    lease_text,
    open_engine,
    owner_text,
    run_json,
    status_text,
    step_json,
    term,
    ts,
)


@click.group()
def runs() -> None:
    """Inspect runs and their journals."""


@runs.command("list")
@db_option
@click.option("--status", type=click.Choice(sorted(RUN_STATUSES)), help="Only this status.")
@click.option("--workflow", help="Only runs of this workflow.")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 100_000))
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print a JSON array instead of a table (an {"error": ...} object on failure).',
)
def runs_list(db: str, status: str | None, workflow: str | None, limit: int, as_json: bool) -> None:
    """List runs, newest first."""
    engine = open_engine(db, as_json)
    try:
        rows = engine.store.list_runs(status=status, workflow=workflow, limit=limit)
    except DurablyError as exc:
        raise CommandError(str(exc), as_json) from exc
    finally:
        engine.close()
    if as_json:
        click.echo(json_text([run_json(run) for run in rows]))
        return
    from rich.table import Table

    where = term(redact_url(db))
    table = Table(title=f"runs in {where}" if rows else f"no runs in {where}")
    cols = ("run_id", "workflow", "version", "status", "owner", "lease until", "starts")
    for col in (*cols, "created", "updated"):
        table.add_column(col)
    for run in rows:
        table.add_row(
            term(run.run_id),
            term(run.workflow),
            term(run.version or ""),
            term(status_text(run)),
            term(owner_text(run)),  # from the journal: never markup or control characters
            lease_text(run),
            str(run.starts),
            ts(run.created_at),
            ts(run.updated_at),
        )
    _console().print(table)


@runs.command("show")
@click.argument("run_id")
@db_option
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print JSON instead of tables (an {"error": ...} object on failure).',
)
def runs_show(run_id: str, db: str, as_json: bool) -> None:
    """Show one run and its journal: position, name, status, duration, key, attempts,
    tokens and cost."""
    engine = open_engine(db, as_json)
    try:
        run = engine.get_run(run_id)
        steps = engine.history(run_id)
    except DurablyError as exc:
        raise CommandError(str(exc), as_json) from exc
    finally:
        engine.close()
    if as_json:
        click.echo(json_text({"run": run_json(run), "steps": [step_json(run, s) for s in steps]}))
        return
    _print_run(run, steps)


def _print_run(run: RunRecord, steps: list[StepRecord]) -> None:
    from rich.table import Table

    console = _console()
    console.print(
        f"[bold]{term(run.run_id)}[/]  workflow={term(run.workflow)}"
        f" version={term(run.version or '-')}  status={term(status_text(run))}"
        f"  starts={run.starts} token={run.fencing_token}"
        f"  incarnation={term(run.incarnation or '-')}"
    )
    if run.owner is not None:
        console.print(f"owner: {term(owner_text(run))}  lease until: {lease_text(run)}")
    if run.error_type:
        console.print(f"error: {term(run.error_type)}: {term(run.error_message)}")
    if run.park_reason:
        console.print(f"why: {term(run.park_reason)}")
    table = Table()
    for col in ("seq", "name", "status", "duration", "key", "attempts", "tokens", "cost"):
        table.add_column(col)
    for s in steps:
        table.add_row(
            term(s.position),
            term(s.name),
            term(s.status),
            duration(s),
            term(run.key(s.position)) if s.kind == "step" else "",
            str(s.attempts),
            "" if s.usage_tokens is None else f"{s.usage_tokens:,}",
            "" if s.usage_cost_usd is None else f"${s.usage_cost_usd:,.4f}",
        )
    console.print(table)
    for s in steps:
        if s.error_message is not None:
            console.print(
                f"step {term(s.position)} error: {term(s.error_type)}: {term(s.error_message)}"
            )
    if run.outcome is not None:
        console.print(f"outcome: {term(run.outcome[:500])}")


def _console() -> Any:
    """A console that prints text as given: no ``:emoji:`` codes, no guessed highlighting."""
    from rich.console import Console

    return Console(emoji=False, highlight=False)


# -- durably runs why ----------------------------------------------------------------------


@runs.command("why")
@click.argument("run_id")
@db_option
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print {"state", "sentence", ...facts} as JSON (an {"error": ...} object on failure).',
)
def runs_why(run_id: str, db: str, as_json: bool) -> None:
    """Say in one sentence why RUN is where it is: queued behind whom, running which step
    and attempt, orphaned, in doubt, blocked, quarantined, failed where, completed. The
    states and their sentences are listed in docs/why.md."""
    import time

    from ..why import explain, gather

    engine = open_engine(db, as_json)
    try:
        why = explain(gather(engine, run_id, time.time()))
    except DurablyError as exc:
        raise CommandError(str(exc), as_json) from exc
    finally:
        engine.close()
    if as_json:
        click.echo(json_text(why.as_json()))
        return
    _console().print(f"{term(run_id)}: {term(why.sentence)}", soft_wrap=True)
