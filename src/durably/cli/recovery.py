"""``durably retry`` and ``durably skip``: a person's decisions on stuck runs."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click

from ..errors import DurablyError
from ..history import RunRecord
from .common import db_option, open_engine, run_json


@click.command("retry")
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


@click.command("skip")
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
