"""``durably replay --check MODULE:ENGINE``: will today's code replay the recorded runs?

Run it in CI before a deploy: it replays the recorded history of every run that will
resume under the new code (running, parked, in doubt, blocked, quarantined) against the
workflows MODULE:ENGINE registers, executing no step, calling no tool and writing
nothing, and exits 1 when any run would diverge. Finished runs (completed, failed,
cancelled) never replay on their own, only when a person forks or retries one: an
intended change that they would not replay (a new prompt) must not fail the deploy, so
they are checked only with ``--finished`` (or a ``--status`` that names them), and the
summary says how many were left out.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from ..errors import DurablyError
from ..history import RUN_STATUSES, TERMINAL
from .common import (
    CommandError,
    inert,
    json_text,
    load_engine,
    module_db_option,
    since_arg,
)

RUNS_CHECKED_MAX = 10_000_000  # bounds --limit: a check reads one history per run


@click.command("replay", short_help="With --check: report every run today's code would diverge on.")
@click.argument("target", metavar="MODULE:ENGINE")
@click.option(
    "--check",
    is_flag=True,
    help="Replay recorded histories against today's code (required: the only mode).",
)
@click.option("--workflow", help="Only runs of this workflow.")
@click.option(
    "--status",
    type=click.Choice(sorted(RUN_STATUSES)),
    help="Only runs of this status (default: every unfinished run with a history).",
)
@click.option(
    "--finished",
    is_flag=True,
    help="Check finished runs (completed, failed, cancelled) too: they replay only when"
    " forked or retried, so by default a divergence there does not fail the check.",
)
@click.option(
    "--since",
    metavar="T",
    help="Only runs created since T: an ISO time (2026-11-30T06:00, UTC unless it says)"
    " or an age such as 90m, 24h, 7d.",
)
@click.option(
    "--limit",
    default=1_000_000,
    show_default=True,
    type=click.IntRange(1, RUNS_CHECKED_MAX),
    help="Check at most this many runs, newest first.",
)
@module_db_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def replay_cmd(
    target: str,
    check: bool,
    workflow: str | None,
    status: str | None,
    finished: bool,
    since: str | None,
    limit: int,
    db: str | None,
    as_json: bool,
) -> None:
    """Replay the recorded runs of MODULE:ENGINE's database against its code, and report
    every run that would diverge (NonDeterminism on resume) with the position and the
    reason; exit status 1 when any would.

    Each run is checked up to the end of its recorded history, by the version it
    recorded; a new ``ctx.patched`` marker ends it (True there). Runs of a version this
    code does not register are listed as not checked. Finished runs are checked only
    with --finished (or --status naming one): they replay only when forked or retried.
    A run that continued as new (``ctx.continue_as_new``) is checked in its current
    generation, with that generation's input: earlier generations never replay.
    """
    from ..inspect.replaycheck import check_runs, runs_to_check

    if not check:
        raise click.UsageError("say --check: durably replay --check MODULE:ENGINE")
    since_t, relative = since_arg(since, as_json)
    engine = load_engine(target, db, as_json)
    try:
        if since_t is not None and relative:
            since_t = engine.clock.time() - since_t
        chosen = runs_to_check(engine, workflow, status, since_t, limit, finished=finished)
        report = check_runs(engine, chosen)
        left_out = 0 if finished or status else _finished(engine, workflow, since_t)
    except DurablyError as exc:
        raise CommandError(str(exc), as_json) from exc
    finally:
        engine.close()
    rows = [_finding_json(f) for f in report.findings]
    diverging = [r for r in rows if r["kind"] == "diverges"]
    unserved = [r for r in rows if r["kind"] == "unserved"]
    if as_json:
        click.echo(
            json_text(
                {
                    "ok": not diverging,
                    "checked": report.checked,
                    "diverging": diverging,
                    "unserved": unserved,
                    "finished_not_checked": left_out,
                }
            )
        )
    else:
        _print(report.checked, diverging, unserved, left_out)
    if diverging:
        sys.exit(1)


def _finding_json(f: Any) -> dict[str, Any]:
    return {
        "run_id": f.run.run_id,
        "workflow": f.run.workflow,
        "version": f.run.version,
        "status": f.run.status,
        "kind": f.kind,
        "position": f.position,
        "reason": f.reason,
    }


def _finished(engine: Any, workflow: str | None, since: float | None) -> int:
    """How many finished runs the filters match (left out without --finished)."""
    counts = engine.count_runs(workflow=workflow, since=since)
    return sum(n for st, n in counts.items() if st in TERMINAL)


def _print(
    checked: int, diverging: list[dict[str, Any]], unserved: list[dict[str, Any]], left_out: int
) -> None:
    for row in diverging:
        # A mismatch's reason is several sentences on lines of their own: printed with
        # real line breaks (the other control characters still shown as escapes), each
        # continuation indented under its run.
        reason = "\n  ".join(inert(row["reason"], keep="\n").split("\n"))
        click.echo(
            # Plain text (click.echo): inert, not term, whose rich-markup escaping would
            # print "job\\[b]1" for the run "job[b]1".
            f"DIVERGES {inert(row['run_id'])} ({inert(row['workflow'])}"
            f" version={inert(row['version'] or '-')}, {row['status']}) at position"
            f" {row['position'] or '-'}: {reason}"
        )
    for row in unserved:
        click.echo(f"not checked {inert(row['run_id'])}: {inert(row['reason'])}")
    verdict = "FAIL" if diverging else "ok"
    tail = (
        f"; {left_out} finished run(s) not checked (--finished checks them too)" if left_out else ""
    )
    click.echo(
        f"{verdict}: {checked} run(s) checked, {len(diverging)} would diverge,"
        f" {len(unserved)} not checked (version not registered here){tail}"
    )
