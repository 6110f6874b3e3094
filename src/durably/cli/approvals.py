"""``durably approvals list``, ``durably approve`` and ``durably reject``: a person's side of
``ctx.request_approval``.

Nothing is approved blind: ``approve``/``reject`` print the action and arguments they
decide on, and take ``--digest PREFIX`` (at least 4 hex characters of the digest that
``approvals list`` shows), checked against the request's full digest before anything is
written. They never prompt (they run in scripts and chat bots as well as terminals).
Everything printed from the journal (actions and arguments come from workflow code and
its inputs) goes through :func:`~durably.cli.common.inert`/``term``
(:func:`durably.visible.visible`), so it cannot drive the terminal and no character is
hidden from the person deciding: a zero-width space or a tag character is printed as
``<U+200B>``, and a request holding any is flagged ("contains invisible characters:
U+200B ..."; the ``invisible`` field under ``--json``), since two accounts that differ only
in such a character look identical.
"""

from __future__ import annotations

import json
import re
from typing import Any

import click

from ..approvals import APPROVED, DIGEST_PREFIX_MIN, REJECTED, ApprovalRow
from ..errors import ApprovalMismatch, ApprovalNotFound, DurablyError
from ..redact import redact_url
from ..visible import flag, invisible_chars
from .common import CommandError, db_option, inert, json_text, open_engine, term, ts
from .tables import Column, console, print_table

ARGS_SHOWN_CHARS_MAX = 80
"""How much of a request's arguments one row of ``approvals list`` shows."""

_HEX = re.compile(r"^[0-9a-f]+$")


@click.group("approvals", short_help="List approval requests, then approve or reject one.")
def approvals() -> None:
    """Approval requests of ctx.request_approval: list them, then `durably approve` or
    `durably reject` one."""


@approvals.command("list", short_help="List the requests waiting for a decision, with digests.")
@click.option("--run", "run_id", default=None, metavar="RUN", help="Only this run's requests.")
@db_option
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print a JSON list of {run_id, request_id, action, args, digest, requested_at,"
    " expires_at, invisible} (times in seconds since the epoch; invisible lists the"
    " U+XXXX code points of invisible characters the request holds).",
)
def approvals_list(run_id: str | None, db: str, as_json: bool) -> None:
    """List the approval requests waiting for a decision, oldest first, with the digest
    prefix `durably approve RUN REQUEST --digest PREFIX` takes.

    Invisible characters (zero-width, bidi, tag characters, ...) are shown as <U+200B>,
    and a request holding any is flagged under the table."""
    engine = open_engine(db, as_json)
    try:
        rows = engine.pending_approval_rows(run_id)
    except DurablyError as exc:
        raise CommandError(str(exc), as_json) from exc
    finally:
        engine.close()
    if as_json:
        click.echo(json_text([_row_json(r) for r in rows]))
        return
    where = term(redact_url(db))
    title = f"approval requests waiting in {where}" if rows else f"no approval waits in {where}"
    # The ids, the action and the digest prefix are what `durably approve` takes and what
    # a person decides on: never cut or folded; the times and arguments fold.
    cols = [Column(c, whole=True) for c in ("run_id", "request", "digest", "action")]
    cols += [Column("requested"), Column("expires"), Column("args")]
    shown = [
        [
            term(r.run_id),
            term(r.request_id),
            r.digest[:12],
            term(r.action),
            ts(r.requested_at),
            ts(r.expires_at) or "never",
            term(
                r.args
                if len(r.args) <= ARGS_SHOWN_CHARS_MAX
                else r.args[:ARGS_SHOWN_CHARS_MAX] + "…"
            ),
        ]
        for r in rows
    ]
    out = console()
    print_table(out, cols, shown, title)
    for r in rows:
        warning = flag(_shown_text(r), keep="\n")
        if warning:
            out.print(
                f"WARNING: run {term(r.run_id)} request {term(r.request_id)} {warning}"
                " (shown as <U+XXXX>): read its action and arguments before deciding"
            )


def _shown_text(r: ApprovalRow) -> str:
    """Every journal text of the request a person reads, for :func:`flag`: the ids, the
    action, and the arguments both as stored and as decoded (a ``\\u200b`` escape in the
    stored JSON is a real U+200B in the value)."""
    return "\n".join((r.run_id, r.request_id, r.action, r.args, _args_text(r)))


def _args_text(r: ApprovalRow) -> str:
    try:
        return json.dumps(json.loads(r.args), indent=2, sort_keys=True, ensure_ascii=False)
    except ValueError:
        return r.args


def _row_json(r: ApprovalRow) -> dict[str, Any]:
    return {
        "run_id": r.run_id,
        "request_id": r.request_id,
        "action": r.action,
        "args": _args(r),
        "digest": r.digest,
        "requested_at": r.requested_at,
        "expires_at": r.expires_at,
        "invisible": invisible_chars(_shown_text(r), keep="\n"),
    }


def _args(r: ApprovalRow) -> Any:
    try:
        return json.loads(r.args)
    except ValueError:
        return r.args  # a hand-edited row: shown as the text it holds


def _check_prefix(prefix: str) -> str:
    p = prefix.strip().lower()
    if len(p) < DIGEST_PREFIX_MIN or len(p) > 64 or not _HEX.match(p):
        raise click.BadParameter(
            f"give at least {DIGEST_PREFIX_MIN} (and at most 64) hex characters of the"
            " request's digest, as `durably approvals list` shows it",
            param_hint="--digest",
        )
    return p


def _decide(
    run_id: str,
    request_id: str,
    prefix: str,
    outcome: str,
    by: str | None,
    note: str | None,
    db: str,
    as_json: bool,
) -> None:
    """Show the request, check the digest prefix against it, then decide with the full
    digest (the engine checks that again, under the run's lock)."""
    prefix = _check_prefix(prefix)
    engine = open_engine(db, as_json)
    try:
        row = engine.approval_row(run_id, request_id)
        if row is None:
            engine.get_run(run_id)  # RunNotFound names an unknown run first
            raise ApprovalNotFound(
                f"run {run_id!r} has no approval request {request_id!r} (a request id is"
                " the request's position); `durably approvals list` shows the requests"
                " waiting. Nothing was decided"
            )
        if not as_json:
            _show(row)
        if not row.digest.startswith(prefix):
            raise ApprovalMismatch(
                f"--digest {prefix} does not match request {request_id} of run {run_id!r}"
                f" (its digest starts {row.digest[:12]}): the request is not the one you"
                " meant to decide. Nothing was decided; read it again with `durably"
                " approvals list`"
            )
        if outcome == APPROVED:
            decision = engine.approve(run_id, request_id, digest=row.digest, by=by, note=note)
        else:
            decision = engine.reject(run_id, request_id, digest=row.digest, by=by, reason=note)
    except DurablyError as exc:
        raise CommandError(str(exc), as_json) from exc
    finally:
        engine.close()
    if as_json:
        out = {**_row_json(row), "outcome": decision.outcome, "by": decision.by}
        out.update(note=decision.note, decided_at=decision.decided_at.timestamp())
        click.echo(json_text(out))
        return
    who = f" by {inert(by)}" if by else ""
    click.echo(f"{decision.outcome} run {inert(run_id)} request {inert(request_id)}{who}")


def _show(row: ApprovalRow) -> None:
    """The action and arguments being decided on, escaped (journal text is untrusted)."""
    args = _args_text(row)
    click.echo(f"run:     {inert(row.run_id)}")
    click.echo(f"request: {inert(row.request_id)}")
    click.echo(f"action:  {inert(row.action)}")
    click.echo(f"digest:  {row.digest}")
    click.echo("args:    " + inert(args, keep="\n").replace("\n", "\n         "))
    warning = flag(_shown_text(row), keep="\n")
    if warning:
        click.echo(
            f"WARNING: this request {warning} (shown as <U+XXXX>): two texts that differ"
            " only in them look identical; check the action and arguments before deciding"
        )


@click.command("approve", short_help="Approve request REQUEST of run RUN, checked by --digest.")
@click.argument("run_id", metavar="RUN")
@click.argument("request_id", metavar="REQUEST")
@click.option(
    "--digest",
    "prefix",
    required=True,
    metavar="PREFIX",
    help=f"At least {DIGEST_PREFIX_MIN} hex characters of the request's digest (from"
    " `durably approvals list`); checked against the full digest.",
)
@click.option("--by", default=None, metavar="NAME", help="Who approves (kept with the decision).")
@click.option("--note", default=None, metavar="TEXT", help="A note kept with the decision.")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print the decided request as JSON.")
def approve_cmd(
    run_id: str,
    request_id: str,
    prefix: str,
    by: str | None,
    note: str | None,
    db: str,
    as_json: bool,
) -> None:
    """Approve request REQUEST (its position, from `durably approvals list`) of run RUN.

    Prints the action and arguments, checks --digest against the request's digest, and
    only then records the approval and wakes the run. Never prompts. Exits 1, deciding
    nothing, when the digest does not match, the request was already decided or expired,
    the run finished or is being cancelled, or the run or request is unknown.
    """
    _decide(run_id, request_id, prefix, APPROVED, by, note, db, as_json)


@click.command("reject")
@click.argument("run_id", metavar="RUN")
@click.argument("request_id", metavar="REQUEST")
@click.option(
    "--digest",
    "prefix",
    required=True,
    metavar="PREFIX",
    help=f"At least {DIGEST_PREFIX_MIN} hex characters of the request's digest (from"
    " `durably approvals list`); checked against the full digest.",
)
@click.option(
    "--reason", required=True, metavar="TEXT", help="Why (the workflow gets it as the note)."
)
@click.option("--by", default=None, metavar="NAME", help="Who rejects (kept with the decision).")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print the decided request as JSON.")
def reject_cmd(
    run_id: str, request_id: str, prefix: str, reason: str, by: str | None, db: str, as_json: bool
) -> None:
    """Reject request REQUEST of run RUN with --reason.

    Prints the action and arguments, checks --digest against the request's digest, and
    only then records the rejection and wakes the run (its request_approval returns a
    Decision with outcome "rejected"). Never prompts. Exits 1, deciding nothing, on a
    digest mismatch, a request already decided or expired, a run finished or being
    cancelled, or an unknown run or request.
    """
    _decide(run_id, request_id, prefix, REJECTED, by, reason, db, as_json)
