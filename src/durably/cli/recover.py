"""``durably recover MODULE:ENGINE``: resume the runs this host's dead processes left."""

from __future__ import annotations

import json
from typing import Any

import click

from ..errors import DurablyError, RunParked
from ..journal.text import utc_text
from ..redact import redact
from .common import CommandError, inert, json_text, load_engine, module_db_option


@click.command("recover", short_help="Resume the runs this host's dead processes left behind.")
@click.argument("target", metavar="MODULE:ENGINE")
@module_db_option
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object per run id.")
def recover_cmd(target: str, db: str | None, as_json: bool) -> None:
    """Resume every run of MODULE:ENGINE's workflows whose owner was a process of this
    host that is gone (a crash, a SIGKILL, a reboot), and every parked run whose wake-up
    is due (a process that died waiting for its timer leaves it parked): run it at
    startup.

    Each run continues from its journal in this process (recorded steps replay; effects
    are retried under the same keys); one that parks on a wake-up due within 10 s
    (durably.limits.RECOVER_WAIT_S) is waited for, a later one is left parked and listed
    with its wake time. Runs owned by live processes, or by processes on other hosts,
    are left alone: workers take those when their leases expire.
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
        click.echo(
            "nothing to recover: no run was left running by a dead process of this host,"
            " and no parked run's wake-up is due"
        )
    for run_id, value in results.items():
        click.echo(inert(f"{run_id}: {_line(run_id, value)}"))  # journal text: inert


def _line(run_id: str, value: Any) -> str:
    """What became of one recovered run, in words: a run left parked says until when
    and what wakes it, not the RunParked advice meant for engine.run's caller."""
    if isinstance(value, RunParked):
        at = "" if value.wake_at is None else utc_text(value.wake_at)
        when = f" (wakes at {at})" if at and at not in value.reason else ""
        return (
            f"parked again: {value.reason}{when}; a worker (`durably worker MODULE:ENGINE`)"
            f" resumes it then, or `durably recover` again once it is due"
        )
    outcome = _outcome(value)
    error = f" ({redact(outcome['error'])})" if "error" in outcome else ""
    return f"{outcome['status']}{error}"


def _outcome(value: Any) -> dict[str, Any]:
    """One recovered run as JSON: completed with its result, parked again (its reason
    and wake time), or the error that stopped it."""
    if isinstance(value, RunParked):
        return {"status": "parked", "reason": value.reason, "wake_at": value.wake_at}
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
