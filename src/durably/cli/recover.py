"""``durably recover MODULE:ENGINE``: resume the runs this host's dead processes left."""

from __future__ import annotations

import json
from typing import Any

import click

from ..errors import DurablyError
from ..redact import redact
from .common import CommandError, inert, json_text, load_engine, module_db_option


@click.command("recover", short_help="Resume the runs this host's dead processes left behind.")
@click.argument("target", metavar="MODULE:ENGINE")
@module_db_option
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object per run id.")
def recover_cmd(target: str, db: str | None, as_json: bool) -> None:
    """Resume every run of MODULE:ENGINE's workflows whose owner was a process of this
    host that is gone (a crash, a SIGKILL, a reboot): run it at startup.

    Each run continues from its journal in this process (recorded steps replay; effects
    are retried under the same keys). Runs owned by live processes, or by processes on
    other hosts, are left alone: workers take those when their leases expire.
    """
    engine = load_engine(target, db, as_json)
    try:
        results = engine.recover()
    except DurablyError as exc:
        raise CommandError(str(exc), as_json) from exc
    finally:
        engine.close()
    if as_json:
        click.echo(json_text({k: _outcome(v) for k, v in results.items()}))
        return
    if not results:
        click.echo("no run of this host's dead processes to recover")
    for run_id, value in results.items():
        outcome = _outcome(value)
        error = f" ({redact(outcome['error'])})" if "error" in outcome else ""
        click.echo(inert(f"{run_id}: {outcome['status']}{error}"))  # journal text: inert


def _outcome(value: Any) -> dict[str, Any]:
    """One recovered run as JSON: completed with its result, or the error that stopped it."""
    if isinstance(value, DurablyError):
        return {
            "status": "stopped",
            "error_type": type(value).__name__,
            "error": redact(str(value)),
        }
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        value = repr(value)
    return {"status": "completed", "result": value}
