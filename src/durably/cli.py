"""The ``durably`` command.

Every command takes ``--db URL`` (or the ``DURABLY_URL`` environment variable) and
``--json`` where it prints data. Subcommands with heavy dependencies are imported only
when used, so ``durably --help`` and ``import durably`` stay fast.
"""

from __future__ import annotations

import datetime as dt
import importlib
import json
import sys
from collections.abc import Callable
from typing import Any

import click

from .engine import DEFAULT_URL
from .errors import DurablyError
from .history import RUN_STATUSES, RunRecord, StepRecord, idempotency_key

# name -> "module:attribute" of commands that live in other modules.
LAZY_COMMANDS: dict[str, str] = {
    "chaos": "durably.chaos.cli:chaos",
    "simulate": "durably.chaos.cli:simulate",
    "bench": "durably.chaos.cli:bench",
    "migrate": "durably.store.cli:migrate",
}


class _LazyGroup(click.Group):
    """A click group whose listed-but-heavy commands load on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = LAZY_COMMANDS.get(cmd_name)
        if target is None:
            return super().get_command(ctx, cmd_name)
        module, attr = target.split(":")
        cmd: click.Command = getattr(importlib.import_module(module), attr)
        return cmd


def db_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The ``--db URL`` option shared by every command."""
    return click.option(
        "--db",
        "db",
        envvar="DURABLY_URL",
        default=DEFAULT_URL,
        show_default=True,
        help="Journal database URL (sqlite:///path or postgresql://...); env DURABLY_URL.",
    )(fn)


def open_engine(db: str) -> Any:
    """An Engine on ``db`` for inspection, with errors turned into clean CLI messages."""
    from .engine import Engine

    if db.startswith("sqlite:///") and db != "sqlite:///:memory:":
        from pathlib import Path

        path = Path(db[len("sqlite:///") :])
        if not path.exists():
            raise click.ClickException(
                f"no journal at {path} (from --db {db}); pass --db or set DURABLY_URL"
            )
    try:
        return Engine(db)
    except DurablyError as exc:
        raise click.ClickException(str(exc)) from exc


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="durably")
def main() -> None:
    """durably: agent runs that survive crashes without redoing their real-world work."""


@main.group()
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
            _status(run),
            str(run.starts),
            _ts(run.created_at),
            _ts(run.updated_at),
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
        f"  status={_status(run)}  starts={run.starts} token={run.fencing_token}"
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
            _duration(s),
            idempotency_key(run.run_id, s.position) if s.kind == "step" else "",
            str(s.attempts),
            "" if s.usage_tokens is None else f"{s.usage_tokens:,}",
        )
    console.print(table)
    if run.outcome is not None:
        console.print(f"outcome: {run.outcome[:500]}")


@main.command("retry")
@click.argument("run_id")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print the run as JSON.")
def retry_cmd(run_id: str, db: str, as_json: bool) -> None:
    """Try a stuck run again (in_doubt, quarantined or blocked).

    Steps in doubt run again with the same idempotency keys, so check the receiving system
    first. The run continues the next time it is driven (engine.run with the same run_id,
    engine.resume, or a worker).
    """
    _requeue(db, as_json, lambda engine: engine.retry(run_id))


@main.command("skip")
@click.argument("run_id")
@click.option(
    "--output",
    "output",
    required=True,
    help='The step\'s result as JSON, e.g. \'{"ticket": "T-7"}\'.',
)
@click.option("--position", help="Which step, when several are in doubt.")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print the run as JSON.")
def skip_cmd(run_id: str, output: str, position: str | None, db: str, as_json: bool) -> None:
    """Record what an in-doubt step returned, without running it again."""
    try:
        value = json.loads(output)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(
            f"not JSON ({exc}); quote it, e.g. --output '\"T-7\"'", param_hint="--output"
        ) from exc
    _requeue(db, as_json, lambda engine: engine.skip(run_id, value, position))


def _requeue(db: str, as_json: bool, action: Callable[[Any], RunRecord]) -> None:
    engine = open_engine(db)
    try:
        run = action(engine)
    except DurablyError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        engine.close()
    if as_json:
        click.echo(json.dumps(run_json(run), sort_keys=True))
    else:
        click.echo(
            f"run {run.run_id} is queued again; it continues the next time it is"
            " driven (engine.run with the same run_id, engine.resume, or a worker)"
        )


@main.command("worker")
@click.argument("target", metavar="MODULE:ENGINE")
@click.option(
    "--concurrency",
    default=4,
    show_default=True,
    type=click.IntRange(1, 256),
    help="Runs driven at once by this process.",
)
@click.option(
    "--queue",
    "queues",
    multiple=True,
    default=("default",),
    show_default=True,
    help="Queue to serve (repeat for several).",
)
@click.option(
    "--poll-interval-s",
    default=0.2,
    show_default=True,
    type=click.FloatRange(0.01),
    help="Longest idle wait between claims (PostgreSQL also wakes on NOTIFY).",
)
@click.option(
    "--drain-s",
    default=30.0,
    show_default=True,
    type=click.FloatRange(0),
    help="On SIGTERM, how long current runs may finish before they are released.",
)
@click.option(
    "--db",
    "db",
    envvar="DURABLY_URL",
    default=None,
    help="Journal URL; set as DURABLY_URL before MODULE is imported, so an"
    " Engine() without a URL uses it. Env DURABLY_URL.",
)
def worker_cmd(
    target: str,
    concurrency: int,
    queues: tuple[str, ...],
    poll_interval_s: float,
    drain_s: float,
    db: str | None,
) -> None:
    """Claim and drive runs of the workflows registered on MODULE:ENGINE.

    Runs are claimed under a lease with a fencing token; SIGTERM stops claiming, lets
    current runs finish for up to --drain-s, then releases the rest for other workers.
    """
    import logging
    import os

    from .engine import Engine
    from .worker import Worker

    if db:
        os.environ["DURABLY_URL"] = db
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise click.BadParameter(
            "write MODULE:ENGINE, e.g. myapp.agents:engine", param_hint="MODULE:ENGINE"
        )
    sys.path.insert(0, os.getcwd())
    try:
        engine = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise click.ClickException(f"cannot load {target}: {exc}") from exc
    if not isinstance(engine, Engine):
        raise click.ClickException(f"{target} is a {type(engine).__name__}, not a durably.Engine")
    if db and engine.url != db:
        raise click.ClickException(
            f"{target} is bound to {engine.url} but --db/DURABLY_URL says {db}; build the"
            " engine with durably.Engine() (no URL) to take it from DURABLY_URL"
        )
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    w = Worker(
        engine,
        concurrency=concurrency,
        queues=queues,
        poll_interval_s=poll_interval_s,
        drain_s=drain_s,
    )
    w.install_signal_handlers()
    click.echo(
        f"durably worker pid {os.getpid()} serving {', '.join(queues)} on"
        f" {engine.url} with {concurrency} slot(s)",
        err=True,
    )
    stats = w.run()
    click.echo(
        f"durably worker stopped: {stats.claimed} claimed, {stats.completed} completed,"
        f" {stats.failed} failed, {stats.stale} lost to other workers",
        err=True,
    )
    sys.stdout.flush()
    sys.stderr.flush()
    # Threads still inside a step after the drain deadline were given back; do not wait.
    os._exit(0)


def run_json(run: RunRecord) -> dict[str, Any]:
    """A run as plain JSON data for ``--json``."""
    return {
        "run_id": run.run_id,
        "workflow": run.workflow,
        "version": run.version,
        "prompt_version": run.prompt_version,
        "queue": run.queue,
        "status": run.status,
        "starts": run.starts,
        "fencing_token": run.fencing_token,
        "owner": run.owner,
        "input": json.loads(run.input),
        "outcome": None if run.outcome is None else json.loads(run.outcome),
        "error_type": run.error_type,
        "error_message": run.error_message,
        "reason": run.park_reason,
        "created_at": run.created_at,
        "updated_at": run.updated_at,
        "finished_at": run.finished_at,
    }


def step_json(run: RunRecord, s: StepRecord) -> dict[str, Any]:
    """A history record as plain JSON data for ``--json``."""
    return {
        "seq": s.position,
        "kind": s.kind,
        "name": s.name,
        "status": s.status,
        "digest": s.digest,
        "key": idempotency_key(run.run_id, s.position),
        "attempts": s.attempts,
        "duration_s": None if s.finished_at is None else round(s.finished_at - s.started_at, 6),
        "output": None if s.output is None else json.loads(s.output),
        "error_type": s.error_type,
        "error_message": s.error_message,
        "usage_tokens": s.usage_tokens,
        "usage_cost_usd": s.usage_cost_usd,
    }


def _status(run: RunRecord) -> str:
    return (
        run.status
        if run.park_reason is None or run.status != "parked"
        else (f"parked({run.park_reason})")
    )


def _ts(t: float | None) -> str:
    if t is None:
        return ""
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _duration(s: StepRecord) -> str:
    if s.finished_at is None:
        return "in flight"
    ms = (s.finished_at - s.started_at) * 1000
    return f"{ms:.1f} ms" if ms < 10_000 else f"{ms / 1000:.1f} s"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
