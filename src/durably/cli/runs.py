"""``durably runs list|show|why``: inspect runs and their journals.

Everything these commands print from the journal (run ids, workflow and step names, error
messages, outcomes, park reasons) goes through :func:`.common.term`: error messages are
often model or tool output, and must neither crash rich's markup nor drive the terminal.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import click

from ..budget import Spend
from ..errors import DurablyError
from ..events import USER, Event
from ..history import RUN_STATUSES, RunRecord, StepRecord
from ..journal.text import utc_text
from ..redact import redact_url
from ..runlist import LIST_RUNS_LIMIT_MAX
from .common import (
    CommandError,
    db_option,
    duration,
    inert,
    json_text,
    lease_text,
    open_engine,
    owner_text,
    run_json,
    since_arg,
    status_text,
    step_json,
    stored_json,
    term,
    term_lines,
    ts,
)
from .tables import Column, console, print_table

if TYPE_CHECKING:
    from .. import Generation

DATA_CHARS_SHOWN = 200  # of one data value in a `runs tail` line
TAIL_WAIT_POLL_S = 0.2  # `runs tail --follow` polling for a journal or run not there yet
LIST_LIMIT_MAX = 100_000  # runs one `runs list` prints (read LIST_RUNS_LIMIT_MAX a page)


@click.group()
def runs() -> None:
    """Inspect runs and their journals."""


@runs.command("list", short_help="List runs, newest first, with counts per status.")
@db_option
@click.option("--status", type=click.Choice(sorted(RUN_STATUSES)), help="Only this status.")
@click.option("--workflow", help="Only runs of this workflow.")
@click.option("--version", "version", help="Only runs of this workflow version.")
@click.option("--queue", help="Only runs of this queue.")
@click.option(
    "--search",
    metavar="TEXT",
    help="Only runs whose id contains TEXT (case-sensitive; % and _ are plain characters).",
)
@click.option(
    "--by-version",
    is_flag=True,
    help="Count unfinished runs per workflow version instead (drain old workers first);"
    " --workflow, --version and --status filter the counts.",
)
@click.option(
    "--since",
    help="Only runs created in the last 30d, 12h, 15m or 90s, or since an ISO-8601 time"
    " (2026-11-30T10:00, UTC unless it names an offset).",
)
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, LIST_LIMIT_MAX))
@click.option(
    "--after",
    metavar="CURSOR",
    help="Start after the runs already shown: the cursor the page before printed (same filters).",
)
@click.option(
    "--pruned",
    is_flag=True,
    help="List the tombstones of pruned and deleted runs instead (newest first).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print a JSON array instead of a table (an {"error": ...} object on failure);'
    " the next page's cursor, when there is one, goes to stderr.",
)
def runs_list(
    db: str,
    status: str | None,
    workflow: str | None,
    version: str | None,
    queue: str | None,
    search: str | None,
    by_version: bool,
    since: str | None,
    limit: int,
    after: str | None,
    pruned: bool,
    as_json: bool,
) -> None:
    """List runs, newest first, with a count of runs per status under the table
    (``--by-version``: unfinished runs per version instead). When more runs match than
    --limit shows, the last line gives the cursor to pass as --after for the next page.

    Run ids are never cut: a terminal too narrow for the table, and any pipe, get plain
    aligned columns instead (--json for scripts). A run that continued as new
    (ctx.continue_as_new) shows its generation after its status (``running g3``; --json:
    ``generation``); `durably runs show RUN --generation N` prints an earlier one."""
    if by_version and (queue, search, after) != (None, None, None):
        raise CommandError(
            "--by-version counts per workflow version: it takes --workflow, --version and"
            " --status, not --queue, --search or --after",
            as_json,
        )
    if pruned:
        _list_tombstones(db, limit, as_json)
        return
    start = None if since is None else since_time(since, time.time(), as_json)
    engine = open_engine(db, as_json)
    try:
        if by_version:
            counts = engine.runs_by_version()
        else:
            filters: dict[str, Any] = {
                "workflow": workflow,
                "version": version,
                "queue": queue,
                "search": search,
                "since": start,
            }
            rows, cursor = _runs(engine, limit, after, status=status, **filters)
            per_status = {} if as_json else engine.count_runs(**filters)
    except DurablyError as exc:
        raise CommandError(str(exc), as_json) from exc
    finally:
        engine.close()
    if by_version:
        keep = (workflow, version, status)
        _print_by_version([c for c in counts if _matches(c, keep)], as_json)
        return
    if as_json:
        click.echo(json_text([run_json(run) for run in rows]))
        if cursor is not None:
            click.echo(f"next page: --after {cursor}", err=True)
        return
    where = term(redact_url(db))
    # A run id is what the next command takes: never cut or folded (cli/tables.py).
    cols = [Column("run_id", whole=True)]
    for col in ("workflow", "version", "status", "owner", "lease until", "starts"):
        cols.append(Column(col))
    cols += [Column("created"), Column("updated")]
    rows_shown = [
        [
            term(run.run_id),
            term(run.workflow),
            term(run.version or ""),
            term(status_text(run)),
            term(owner_text(run)),  # from the journal: never markup or control characters
            lease_text(run),
            str(run.starts),
            ts(run.created_at),
            ts(run.updated_at),
        ]
        for run in rows
    ]
    console = _console()
    print_table(console, cols, rows_shown, f"runs in {where}" if rows else f"no runs in {where}")
    shown = {k: n for k, n in per_status.items() if n}  # the line names statuses with runs
    console.print(count_line(shown, len(rows)))
    if cursor is not None:
        console.print(f"next page: --after {cursor}", soft_wrap=True)


def _list_tombstones(db: str, limit: int, as_json: bool) -> None:
    """``runs list --pruned``: what is left of pruned and deleted runs."""
    engine = open_engine(db, as_json)
    try:
        tombs = engine.list_tombstones(limit=limit)
    except DurablyError as exc:
        raise CommandError(str(exc), as_json) from exc
    finally:
        engine.close()
    if as_json:
        click.echo(json_text([t.as_json() for t in tombs]))
        return
    cols = [Column("run_id", whole=True)] + [
        Column(c) for c in ("workflow", "status", "finished", "removed", "how")
    ]
    rows = [
        [
            term(t.run_id),
            term(t.workflow),
            term(t.status),
            ts(t.finished_at) if t.finished_at is not None else "",
            ts(t.removed_at),
            t.how,
        ]
        for t in tombs
    ]
    where = term(redact_url(db))
    title = f"tombstones in {where}" if rows else f"no tombstones in {where}"
    print_table(_console(), cols, rows, title)


def _runs(
    engine: Any, limit: int, after: str | None, **filters: Any
) -> tuple[list[RunRecord], str | None]:
    """Up to ``limit`` runs from ``after`` on, read a page at a time
    (``engine.list_runs``), and the cursor of the page after them (None: no more)."""
    rows: list[RunRecord] = []
    cursor = after
    while True:
        page = engine.list_runs(
            after=cursor, limit=min(limit - len(rows), LIST_RUNS_LIMIT_MAX), **filters
        )
        rows.extend(page.runs)
        cursor = page.next
        if cursor is None or len(rows) >= limit:
            return rows, cursor


def count_line(counts: dict[str, int], shown: int) -> str:
    """``12 runs: 8 completed, 3 running, 1 failed (showing 10)``: the runs matching the
    filters other than --status and --limit, by status, most first."""
    total = sum(counts.values())
    parts = ", ".join(
        f"{n:,} {term(status)}" for status, n in sorted(counts.items(), key=lambda x: (-x[1], x[0]))
    )
    line = f"{total:,} run{'s' if total != 1 else ''}" + (f": {parts}" if parts else "")
    return line + (f" (showing {shown:,})" if shown < total else "")


def since_time(text: str, now: float, as_json: bool = False) -> float:
    """The epoch time ``--since`` names: an age (``30d``, ``12h``, ``15m``, ``90s``)
    before ``now``, or an ISO-8601 time (UTC unless it carries an offset)."""
    value, relative = since_arg(text, as_json)
    assert value is not None, "since_arg returns a value for any text"
    return now - value if relative else value


@runs.command("tail", short_help="Print a run's event stream, one line per event.")
@click.argument("run_id")
@db_option
@click.option(
    "--follow", "-f", is_flag=True, help="Keep printing new events until the run finishes."
)
@click.option(
    "--after",
    default=0,
    show_default=True,
    type=click.IntRange(0),
    help="Print only events after this cursor (the first column; resume where you left off).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print one JSON object per event and line (an {"error": ...} object on failure).',
)
def runs_tail(run_id: str, db: str, follow: bool, after: int, as_json: bool) -> None:
    """Print a run's event stream, one line per event: cursor, time (UTC), kind,
    position, data. With --follow, keep printing as the run goes on (Ctrl-C to stop);
    a journal or a run that does not exist yet is waited for (a note on stderr), so the
    tail can start before the agent does."""
    console = None if as_json else _console()
    try:
        engine = _open_when_there(db, run_id, as_json) if follow else open_engine(db, as_json)
    except KeyboardInterrupt:
        return  # stopped while waiting for the journal or the run: not an error
    try:
        events: Iterable[Event] = (
            engine.follow(run_id, after=after) if follow else _pages(engine, run_id, after)
        )
        for event in events:
            if console is None:
                click.echo(json_text(event_json(event)))
            else:
                console.print(event_line(event), soft_wrap=True)
    except DurablyError as exc:
        raise CommandError(str(exc), as_json) from exc
    except KeyboardInterrupt:
        pass  # a person stopped following: not an error
    finally:
        engine.close()


def _open_when_there(db: str, run_id: str, as_json: bool) -> Any:
    """An engine on ``db`` once its journal and ``run_id`` exist (``runs tail --follow``
    started before the agent): polled every :data:`TAIL_WAIT_POLL_S`, with one note on
    stderr for each thing waited for. It never creates the journal: opening one that
    is not there would make an empty file with this process's permissions."""
    from pathlib import Path

    from ..errors import RunNotFound

    said: set[str] = set()

    def note(what: str, text: str) -> None:
        if what not in said:
            said.add(what)
            click.echo(f"{text} (Ctrl-C to stop)", err=True)

    path = Path(db[len("sqlite:///") :]) if db.startswith("sqlite:///") else None
    while True:
        if path is not None and db != "sqlite:///:memory:" and not path.exists():
            note("journal", f"waiting for the journal {path} to be created")
        else:
            engine = open_engine(db, as_json)
            try:
                engine.get_run(run_id)
                return engine
            except RunNotFound:
                engine.close()
                note("run", f"waiting for run {inert(run_id)!r} to be created")
            except BaseException:
                engine.close()
                raise
        time.sleep(TAIL_WAIT_POLL_S)


def _pages(engine: Any, run_id: str, after: int) -> Iterator[Event]:
    """Every event committed so far after ``after``, page by page."""
    while True:
        page = engine.events(run_id, after=after)
        yield from page.events
        if not page.events:
            return
        after = page.cursor


def event_json(event: Event) -> dict[str, Any]:
    """One event as the JSON object ``runs tail --json`` prints."""
    return {
        "run_id": event.run_id,
        "cursor": event.cursor,
        "kind": event.kind,
        "position": event.position,
        "at": event.at,
        "data": event.data,
    }


def event_line(event: Event) -> str:
    """One event as a rich line: every piece of journal text goes through term()."""
    clock = dt.datetime.fromtimestamp(event.at, dt.UTC).strftime("%H:%M:%S.%f")[:-3]
    data = dict(event.data)
    if event.kind == USER:
        kind = f"user:{data.pop('kind', '')}"
        data = {"data": data.get("data")}
    else:
        kind = event.kind
    body = " ".join(f"{term(k)}={term(_short(_time_as_text(k, v)))}" for k, v in data.items())
    return (
        f"[dim]{event.cursor:>6}  {clock}[/]  [bold]{term(kind):<16}[/]"
        f" {term(event.position or '-'):>6}  {body}"
    )


def _time_as_text(key: str, value: Any) -> Any:
    """A time in an event's data (``wake_at``, ``expires_at``, ...: seconds since the
    epoch) as the reasons on the same line write it, ``2026-11-30T10:00:00Z``; ``--json``
    keeps the number."""
    timed = key.endswith("_at") or key == "deadline"
    if timed and isinstance(value, int | float) and not isinstance(value, bool):
        with contextlib.suppress(OverflowError, OSError, ValueError):  # a hand-edited row
            return utc_text(value)
    return value


def _short(value: Any) -> str:
    """A data value as one bounded line of text."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= DATA_CHARS_SHOWN else text[: DATA_CHARS_SHOWN - 1] + "…"


def _matches(
    count: tuple[str, str | None, str, int], keep: tuple[str | None, str | None, str | None]
) -> bool:
    """Whether a (workflow, version, status, n) count passes the ``--workflow``,
    ``--version`` and ``--status`` filters (None: any)."""
    return all(want is None or have == want for have, want in zip(count[:3], keep, strict=True))


def _print_by_version(counts: list[tuple[str, str | None, str, int]], as_json: bool) -> None:
    """Unfinished runs per (workflow, version): a version with none left can lose its
    workers."""
    table: dict[tuple[str, str | None], dict[str, int]] = {}
    for wf, version, status, n in counts:
        table.setdefault((wf, version), {})[status] = n
    rows: list[dict[str, Any]] = [
        {"workflow": wf, "version": v, "in_flight": sum(by.values()), "by_status": by}
        for (wf, v), by in table.items()
    ]
    if as_json:
        click.echo(json_text(rows))
        return
    cols = [Column("workflow", whole=True), Column("version", whole=True)]
    cols += [Column("in flight"), Column("by status")]
    shown = [
        [
            term(row["workflow"]),
            term(row["version"] or "-"),
            str(row["in_flight"]),
            ", ".join(f"{k} {n}" for k, n in sorted(row["by_status"].items())),
        ]
        for row in rows
    ]
    title = "unfinished runs per version" if rows else "no unfinished runs"
    print_table(_console(), cols, shown, title)


@runs.command("show", short_help="Show one run: its status, spend and journal.")
@click.argument("run_id")
@db_option
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print JSON instead of tables (an {"error": ...} object on failure).',
)
@click.option(
    "--inputs",
    "with_inputs",
    is_flag=True,
    help="Also show what each step was called with (its recorded arguments).",
)
@click.option(
    "--generation",
    type=click.IntRange(min=0),
    default=None,
    help="Show this generation's journal (a run that called ctx.continue_as_new has"
    " several; default: the current one). Earlier ones stay readable, never replayed.",
)
def runs_show(
    run_id: str, db: str, as_json: bool, with_inputs: bool, generation: int | None
) -> None:
    """Show one run, its spend against its budget (the spend ledger's sums: every call
    that reported usage, calls repeated after a crash included), and its journal:
    position, name, status, duration, key, attempts, tokens and cost (and with --inputs,
    each step's arguments).

    A run that continued as new (``ctx.continue_as_new``) is in generation N: positions
    start at 0 in each, and keys carry ``g<N>.``. The journal shown is the current
    generation's, or ``--generation N``'s; the finished generations are listed (their
    input and size; their status is ``continued``)."""
    engine = open_engine(db, as_json)
    try:
        run = engine.get_run(run_id)
        steps = engine.history(run_id, generation)  # one of the run's (else ConfigError)
        spend = engine.spend(run_id)
        gens = engine.generations(run_id) if run.generation > 0 else []
        redaction = engine.redaction(run_id)
        args = _step_inputs(engine, steps) if with_inputs and redaction is None else {}
    except DurablyError as exc:
        raise CommandError(str(exc), as_json) from exc
    finally:
        engine.close()
    shown_gen = run.generation if generation is None else generation
    # The keys of the generation shown (its positions carry g<N>. for N >= 1).
    keyed = run if shown_gen == run.generation else dataclasses.replace(run, generation=shown_gen)
    if as_json:
        shown = [step_json(keyed, s) for s in steps]
        if with_inputs:
            for row, s in zip(shown, steps, strict=True):
                row["inputs"] = args.get(s.position)
        out: dict[str, Any] = {"run": run_json(run), "spend": spend_json(spend), "steps": shown}
        if run.generation > 0:
            out["generation"] = shown_gen
            out["generations"] = [generation_json(g) for g in gens]
        if redaction is not None:  # the key only then: older readers see what they knew
            out["redacted"] = _redaction_json(redaction)
        click.echo(json_text(out))
        return
    _print_run(run, steps, spend, keyed)
    if run.generation > 0:
        _print_generations(run, gens, shown_gen)
    if redaction is not None:
        _console().print(_redaction_line(redaction), soft_wrap=True)
    _print_inputs(steps, args)


def generation_json(g: Generation) -> dict[str, Any]:
    """A finished generation as ``runs show --json`` prints it."""
    return {
        "generation": g.generation,
        "status": g.status,
        "records": g.records,
        "finished_at": g.finished_at,
        "input": stored_json(g.input),
    }


def _print_generations(run: RunRecord, gens: list[Generation], shown: int) -> None:
    console = _console()
    console.print(
        f"generation {run.generation} (current); journal shown: generation {shown}"
        f" ({len(gens)} finished: `--generation N` shows one)"
    )
    for g in gens[-5:]:  # the latest few: a long-lived run has thousands
        console.print(
            f"  generation {g.generation}: {g.status} at {ts(g.finished_at)},"
            f" {g.records:,} records, input {term(g.input[:200])}",
            soft_wrap=True,
        )


def _redaction_json(red: Any) -> dict[str, Any]:
    return {"at": red.redacted_at, "by": red.redacted_by}


def _redaction_line(red: Any) -> str:
    """What ``runs show`` and ``runs why`` say of a redacted run."""
    return (
        f"redacted at {ts(red.redacted_at)} by {term(red.redacted_by)}: the shape is kept,"
        " every value is a marker; it cannot run, retry, fork or replay"
    )


# -- runs show --inputs ------------------------------------------------------------------


def _step_inputs(engine: Any, steps: list[StepRecord]) -> dict[str, Any]:
    """The recorded arguments of each step that kept them, by position."""
    from .. import inputs

    out: dict[str, Any] = {}
    for s in steps:
        if s.inputs is None:
            continue
        try:
            out[s.position] = inputs.load(s.inputs, engine.blobs)
        except (ValueError, KeyError, TypeError, LookupError, AttributeError, DurablyError) as exc:
            # A hand-edited row, a deleted or changed blob (SerializationError): say so for
            # this step, show the others.
            out[s.position] = {"error": f"recorded inputs unreadable: {type(exc).__name__}: {exc}"}
    return out


def _print_inputs(steps: list[StepRecord], args: dict[str, Any]) -> None:
    import json

    console = _console()
    for s in steps:
        if s.position in args:
            text = json.dumps(args[s.position], indent=1, ensure_ascii=False, sort_keys=True)
            console.print(f"step {term(s.position)} {term(s.name)} inputs:", soft_wrap=True)
            for line in text.splitlines():  # term() escapes newlines: one line at a time
                console.print(term(line), soft_wrap=True)


def spend_json(spend: Spend) -> dict[str, Any]:
    """The run's spend and budget as ``runs show --json`` prints them (``budget``: None
    when none was stored; a limit of None is no limit on that measure)."""
    budget = spend.budget
    return {
        "tokens": spend.tokens,
        "input_tokens": spend.input_tokens,
        "output_tokens": spend.output_tokens,
        "cost_usd": spend.cost_usd,
        "ledger_entries": spend.entries,
        "budget": None
        if budget is None
        else {"tokens": budget.tokens, "cost_usd": budget.cost_usd},
        "budget_used": spend.fraction(budget),
    }


def _print_run(
    run: RunRecord, steps: list[StepRecord], spend: Spend, keyed: RunRecord | None = None
) -> None:
    keyed = run if keyed is None else keyed  # whose generation the keys are of
    console = _console()
    console.print(
        f"[bold]{term(run.run_id)}[/]  workflow={term(run.workflow)}"
        f" version={term(run.version or '-')}"
        f" prompt_version={term(run.prompt_version or '-')}  status={term(status_text(run))}"
        f"  starts={run.starts} token={run.fencing_token}"
        f"  incarnation={term(run.incarnation or '-')}"
    )
    if run.owner is not None:
        console.print(f"owner: {term(owner_text(run))}  lease until: {lease_text(run)}")
    if run.status == "cancelled":
        said = run.cancel_reason if run.cancel_reason is not None else run.error_message
        console.print(f"cancelled: {term(said or 'no reason given')}")
    elif run.error_type:
        console.print(f"error: {term(run.error_type)}: {term(run.error_message)}")
    if run.cancel_requested_at is not None and not run.terminal:
        said = f": {term(run.cancel_reason)}" if run.cancel_reason else " (no reason given)"
        console.print(
            f"cancel requested at {ts(run.cancel_requested_at)}{said}; unwinding at its next step"
        )
    if run.park_reason:
        console.print(f"why: {term_lines(run.park_reason)}")
    if spend.entries or spend.budget is not None:
        # The ledger's sums: every call that reported usage, repeated calls included.
        console.print(f"spend: {spend.text()}")
    # The key is what a receiving service is asked about: never cut or folded.
    cols = [Column("seq", whole=True), Column("name"), Column("status"), Column("duration")]
    cols += [Column("key", whole=True), Column("attempts"), Column("tokens"), Column("cost")]
    rows = [
        [
            term(s.position),
            term(s.name),
            term(s.status),
            duration(s),
            term(keyed.key(s.position)) if s.kind == "step" else "",
            str(s.attempts),
            "" if s.usage_tokens is None else f"{s.usage_tokens:,}",
            "" if s.usage_cost_usd is None else f"${s.usage_cost_usd:,.4f}",
        ]
        for s in steps
    ]
    print_table(console, cols, rows, "" if rows else "journal: no step recorded yet")
    for s in steps:
        if s.error_message is not None:
            console.print(
                f"step {term(s.position)} error: {term(s.error_type)}: {term(s.error_message)}"
            )
    if run.outcome is not None:
        console.print(f"outcome: {term(run.outcome[:500])}")


def _console() -> Any:
    """The console of these commands (:func:`.tables.console`)."""
    return console()


# -- durably runs why ----------------------------------------------------------------------


@runs.command("why", short_help="Say in one sentence why RUN is where it is.")
@click.argument("run_id")
@db_option
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print {"state", "sentence", ...facts} as JSON (an {"error": ...} object on failure;'
    ' with --show-values, a "values" text too).',
)
@click.option(
    "--show-values",
    "show_values",
    is_flag=True,
    help="Also print the values behind a replay mismatch (the blocked step's recorded"
    " arguments, in full): only on the journal's host; events, traces and replay --check"
    " never carry them.",
)
def runs_why(run_id: str, db: str, as_json: bool, show_values: bool) -> None:
    """Say in one sentence why RUN is where it is: queued behind whom, running which step
    and attempt (and near or over its budget), orphaned, parked on what (a timer, a
    signal, an approval, several gather waits) with the command that wakes it, being
    cancelled, in doubt, blocked, quarantined, failed where (or stopped by its budget),
    cancelled, completed. The states and their sentences are listed in docs/why.md.

    A replay mismatch names the argument, message and field that differ, with lengths
    and sha256 prefixes, never the values; --show-values prints the recorded values
    (what the journal has) for a person on this host."""
    import time

    from ..inspect.why import explain

    engine = open_engine(db, as_json)
    values = None
    try:
        why = explain(engine, run_id, now=time.time())
        redaction = engine.redaction(run_id)
        if show_values:
            from .values import show_values as values_of

            values = values_of(engine, run_id)
    except DurablyError as exc:
        raise CommandError(str(exc), as_json) from exc
    finally:
        engine.close()
    if as_json:
        out = why.to_json() if values is None else {**why.to_json(), "values": values}
        if redaction is not None:
            out = {**out, "redacted": _redaction_json(redaction)}
        click.echo(json_text(out))
        return
    _console().print(f"{term(run_id)}: {term_lines(why.sentence)}", soft_wrap=True)
    if redaction is not None:
        _console().print(_redaction_line(redaction), soft_wrap=True)
    if values is not None:
        click.echo(values)  # inert already, line breaks kept; not through rich markup


def _add_delete() -> None:
    # `runs delete` lives with prune (cli/retention.py): the two share the retention room.
    from .retention import runs_delete

    runs.add_command(runs_delete)


_add_delete()
