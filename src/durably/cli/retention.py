"""``durably prune`` and ``durably runs delete``: retention, and forgetting one run."""

from __future__ import annotations

import time

import click

from ..errors import DurablyError
from .common import CommandError, db_option, inert, json_text, open_engine, since_arg

_STATUSES = ("completed", "failed", "cancelled")


@click.command("prune", short_help="Delete finished runs older than an age, and their blobs.")
@click.option(
    "--finished-before",
    "finished_before",
    metavar="AGE|TIME",
    help="Prune runs that finished before this: an age (30d, 12h, 15m, 90s) or an ISO-8601"
    " time (UTC unless it names an offset).",
)
@click.option(
    "--status",
    "status",
    default=",".join(_STATUSES),
    show_default=True,
    help="Only runs that finished with these statuses (comma-separated). A run that is"
    " not finished is never pruned.",
)
@click.option(
    "--tombstones-before",
    "tombstones_before",
    metavar="AGE|TIME",
    help="Also remove the tombstones of runs removed before this (their ids can then"
    " start fresh runs).",
)
@click.option("--dry-run", is_flag=True, help="Say what would go; change nothing.")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print what was freed as JSON.")
def prune_cmd(
    finished_before: str | None,
    status: str,
    tombstones_before: str | None,
    dry_run: bool,
    db: str,
    as_json: bool,
) -> None:
    """Delete runs that finished before --finished-before (every generation's records,
    events, signals, approvals and spend rows), in bounded batches, then the blobs no
    remaining run cites. A queued, running, parked, blocked, in-doubt or quarantined run
    is never touched. Each pruned run leaves a tombstone, so running its id again raises
    RunPruned instead of repeating its effects (`durably runs list --pruned`). On SQLite
    the file does not shrink by itself: see docs/retention.md (incremental_vacuum)."""
    if finished_before is None and tombstones_before is None:
        raise CommandError(
            "say what to prune: --finished-before 30d (runs), --tombstones-before 365d"
            " (tombstones), or both",
            as_json,
        )
    statuses = [s.strip() for s in status.split(",") if s.strip()]
    bad = [s for s in statuses if s not in _STATUSES]
    if bad or not statuses:
        raise CommandError(
            f"--status {status!r}: prune takes only finished runs; choose among"
            f" {','.join(_STATUSES)}",
            as_json,
        )
    before = _time(finished_before, as_json, "--finished-before")
    t_before = _time(tombstones_before, as_json, "--tombstones-before")
    engine = open_engine(db, as_json)
    try:
        out: dict[str, object] = {"dry_run": dry_run}
        if before is not None:
            out.update(engine.prune(before, statuses, dry_run=dry_run).as_json())
        if t_before is not None:
            # Counted, not listed: a dry run says how many would go, however many.
            out["tombstones"] = engine.prune_tombstones(t_before, dry_run=dry_run)
    except DurablyError as exc:
        raise CommandError(str(exc), as_json) from exc
    finally:
        engine.close()
    if as_json:
        click.echo(json_text(out))
        return
    verb = "would prune" if dry_run else "pruned"
    if before is not None:
        by = out.get("by_status") or {}
        parts = ", ".join(f"{n} {s}" for s, n in sorted(by.items()))  # type: ignore[attr-defined]
        click.echo(
            f"{verb} {out['runs']} run(s){f' ({parts})' if parts else ''} and"
            f" {out['blobs']} blob(s) ({out['blob_bytes']:,} bytes)"
        )
    if t_before is not None:
        click.echo(f"{'would remove' if dry_run else 'removed'} {out['tombstones']} tombstone(s)")


@click.command("delete", short_help="Delete (or redact) one finished run now.")
@click.argument("run_id")
@click.option(
    "--redact",
    is_flag=True,
    help="Keep the run's shape (ids, steps, statuses, timings, spend) and replace every"
    " value with a marker, instead of deleting it.",
)
@click.option("--by", "by", help="Who asks (recorded with a redaction).")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print what was freed as JSON.")
def runs_delete(run_id: str, redact: bool, by: str | None, db: str, as_json: bool) -> None:
    """Forget RUN_ID, a finished run (completed, failed or cancelled; cancel a live run
    and let it reach cancelled first). Without --redact it is deleted now, every
    generation, leaving its tombstone. With --redact it stays listed with its shape and
    every value (inputs and their digests, outputs, error messages, reasons, events'
    data, signal data, approval actions, arguments and names, blobs no other run cites)
    is replaced by a marker; it can then never run, retry, fork or replay. Old row
    versions stay in the database files until vacuumed: see docs/retention.md."""
    import getpass

    if by is None:
        try:
            by = getpass.getuser()
        except (OSError, KeyError):  # no login name (a container without a passwd entry)
            by = "unknown"
    who = by
    engine = open_engine(db, as_json)
    try:
        report = engine.delete_run(run_id, redact=redact, by=who)
    except DurablyError as exc:
        raise CommandError(str(exc), as_json) from exc
    finally:
        engine.close()
    if as_json:
        click.echo(json_text({"run_id": run_id, "redacted": redact, **report.as_json()}))
        return
    rid = inert(run_id)
    if redact:
        click.echo(f"run {rid} is redacted (by {inert(who)}); {report.blobs} blob(s) deleted")
    else:
        click.echo(f"run {rid} is deleted, its tombstone kept; {report.blobs} blob(s) deleted")


def _time(text: str | None, as_json: bool, option: str) -> float | None:
    """The ``AGE|TIME`` ``option`` as seconds since the epoch (an age back from now)."""
    value, relative = since_arg(text, as_json, option)
    if value is None:
        return None
    return time.time() - value if relative else value
