"""``durably signal RUN NAME [--data JSON]``: send a signal to a run from a shell."""

from __future__ import annotations

import json
from typing import Any

import click

from ..errors import DurablyError
from .common import CommandError, db_option, inert, json_text, open_engine


@click.command("signal", short_help="Send signal NAME (with --data) to run RUN.")
@click.argument("run_id", metavar="RUN")
@click.argument("name")
@click.option(
    "--data",
    "data",
    default=None,
    help='The signal\'s data as JSON, e.g. \'{"by": "ana"}\' (default: null); at most 64 KiB.',
)
@db_option
@click.option("--json", "as_json", is_flag=True, help='Print {"run_id", "name", "seq"}.')
def signal_cmd(run_id: str, name: str, data: str | None, db: str, as_json: bool) -> None:
    """Send signal NAME (with --data) to run RUN and print its per-run number.

    The signal is durable once this returns: the run's ctx.wait_for_signal(NAME) takes
    the signals of that name oldest first, each once, and one sent before the wait is
    reached is kept for it. A run parked on the wait wakes at once (PostgreSQL) or at a
    worker's next poll (SQLite). Sending to an unknown or finished run fails and sends
    nothing.
    """
    value: Any = None
    if data is not None:
        try:
            value = json.loads(data)
        except (ValueError, RecursionError) as exc:  # bad JSON, an int past the digit limit
            raise click.BadParameter(
                f'not JSON ({exc}); quote it for the shell, e.g. --data \'{{"by": "ana"}}\''
                " or --data '\"yes\"' for a string",
                param_hint="--data",
            ) from None
    engine = open_engine(db, as_json)
    try:
        seq = engine.signal(run_id, name, value)
    except DurablyError as exc:
        raise CommandError(str(exc), as_json) from exc
    finally:
        engine.close()
    if as_json:
        click.echo(json_text({"run_id": run_id, "name": name, "seq": seq}))
    else:
        click.echo(f"signal {inert(name)} #{seq} sent to {inert(run_id)}")
