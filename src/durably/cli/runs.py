"""``durably runs list|show``: inspect runs and their journals."""

from __future__ import annotations

import json

import click

from ..errors import DurablyError
from ..history import RUN_STATUSES
from .common import db_option, duration, open_engine, run_json, status_text, step_json, ts


@click.group()
def runs() -> None:
    """Inspect runs and their journals."""


@runs.command("list")
@db_option
@click.option("--status", type=click.Choice(sorted(RUN_STATUSES)), help="Only this status.")
@click.option("--workflow", help="Only runs of this workflow.")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 100_000))
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array instead of a table.")
def runs_list(db: str, status: str | None, workflow: str | None, limit: int, as_json: bool) -> None:
    """List runs, newest first."""
    engine = open_engine(db)
    try:
        rows = engine.store.list_runs(status=status, workflow=workflow, limit=limit)
    except DurablyError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        engine.close()
    if as_json:
        click.echo(json.dumps([run_json(run) for run in rows], sort_keys=True))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"runs in {db}" if rows else f"no runs in {db}")
    for col in ("run_id", "workflow", "version", "status", "starts", "created", "updated"):
        table.add_column(col)
    for run in rows:
        table.add_row(
            run.run_id,
            run.workflow,
            run.version or "",
            status_text(run),
            str(run.starts),
            ts(run.created_at),
            ts(run.updated_at),
        )
    Console().print(table)


@runs.command("show")
@click.argument("run_id")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def runs_show(run_id: str, db: str, as_json: bool) -> None:
    """Show one run and its journal: position, name, status, duration, key, attempts."""
    engine = open_engine(db)
    try:
        run = engine.get_run(run_id)
        steps = engine.history(run_id)
    except DurablyError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        engine.close()
    if as_json:
        click.echo(
            json.dumps(
                {"run": run_json(run), "steps": [step_json(run, s) for s in steps]}, sort_keys=True
            )
        )
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(
        f"[bold]{run.run_id}[/]  workflow={run.workflow} version={run.version or '-'}"
        f"  status={status_text(run)}  starts={run.starts} token={run.fencing_token}"
        f"  incarnation={run.incarnation or '-'}"
    )
    if run.error_type:
        console.print(f"error: {run.error_type}: {run.error_message}")
    if run.park_reason:
        console.print(f"why: {run.park_reason}")
    table = Table()
    for col in ("seq", "name", "status", "duration", "key", "attempts", "tokens"):
        table.add_column(col)
    for s in steps:
        table.add_row(
            s.position,
            s.name,
            s.status,
            duration(s),
            run.key(s.position) if s.kind == "step" else "",
            str(s.attempts),
            "" if s.usage_tokens is None else f"{s.usage_tokens:,}",
        )
    console.print(table)
    if run.outcome is not None:
        console.print(f"outcome: {run.outcome[:500]}")
