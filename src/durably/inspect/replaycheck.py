"""``durably replay --check``: replay recorded histories against today's code.

Each run is replayed by the registration that would drive it (its recorded version)
with a core in check mode: recorded positions are matched exactly as on a resume, and
the first call that would go live (a step with nothing recorded, an effect in doubt, a
``now``/``random``/``uuid`` not yet recorded, a new ``patched`` marker) ends that run's
check, because its recorded history ends there. Nothing is executed, no tool is called
and nothing is written: the executor refuses any write, and the core stops before any
call. A run whose replay raises ``NonDeterminism`` (or cannot decode what it recorded)
would block on resume: it is reported with the position and the reason.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Coroutine, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn, cast

from ..context import AsyncContext, Context, workflow_body
from ..errors import (
    DurablyError,
    ReplayEnd,
    RunRedacted,
    StepFailed,
    Unwind,
    WorkflowNotRegistered,
)
from ..history import CANCELLED, FAILED_RUN, RunRecord
from ..journal.records import REDACTED_DIGEST
from ..journal.text import utc_text
from ..replay.kernel import Charge, ReadSpend, RunCore, SetBudget, Write, type_name
from ..replay.setup import RunSetup
from ..runtime.drive import Executor

if TYPE_CHECKING:
    import asyncio

    from ..engine import Engine, Workflow
    from ..store.base import Store

DIVERGES = "diverges"
UNSERVED = "unserved"

_POSITION = re.compile(r"(?:step|position) ([0-9]+(?:\.[0-9]+)*)")
_BLOCKED = re.compile(r"\b([Tt])he run is blocked")


def _would_block(run: RunRecord) -> Callable[[re.Match[str]], str]:
    # A finished run (checked with --finished) never resumes on its own: only a fork or a
    # retry a person asks for replays it, so "a resume would block" would send them to
    # look for a resume that never comes.
    what = "fork or retry of this finished run would block it" if run.terminal else None

    def sub(m: re.Match[str]) -> str:
        article = "A" if m.group(1) == "T" else "a"
        return f"{article} {what or 'resume would block the run'}"

    return sub


@dataclass(frozen=True, slots=True)
class Finding:
    """A run the check could not replay cleanly: ``kind`` is ``diverges`` (a resume
    would block or fail on today's code) or ``unserved`` (its version is not registered
    in this process, so it was not checked)."""

    run: RunRecord
    kind: str
    position: str | None
    reason: str


@dataclass
class Report:
    """What one check found: runs checked and the findings, in the order runs came."""

    checked: int = 0
    findings: list[Finding] = field(default_factory=list)

    @property
    def diverging(self) -> list[Finding]:
        """The runs that would diverge (the check fails when there is any)."""
        return [f for f in self.findings if f.kind == DIVERGES]


class _NoWrites(Executor):
    """An executor that records nothing: a write means the replay went live, which the
    check core never lets happen; should one come anyway, the run's check ends there."""

    def write(self, op: Write, cancel: bool | None = None) -> Generator[float, None, None]:
        raise self.core.latch(ReplayEnd(op.records[0].position if op.records else "?"))
        yield  # pragma: no cover - makes this a generator like Executor.write

    def ledger(self, op: Charge | ReadSpend | SetBudget) -> Generator[float, None, Any]:
        """No ledger or budget I/O either: the check core never goes live, and a budget
        it is given stays in memory."""
        raise self.core.latch(ReplayEnd("?"))
        yield  # pragma: no cover - makes this a generator like Executor.ledger


class _NoStore:
    """The store of the check's executor: there is none. The check core ends a run's
    check before any call would go live, and only a live call reaches a store, so any
    call here ends the check at once (latched, like a write)."""

    def __init__(self, core: RunCore) -> None:
        self._core = core

    def __getattr__(self, name: str) -> Any:
        def refuse(*_: Any, **__: Any) -> NoReturn:
            raise self._core.latch(ReplayEnd("?"))

        return refuse


def check_runs(engine: Engine, runs: Iterable[RunRecord]) -> Report:
    """Replay each run's recorded history against the engine's registered code."""
    report = Report()
    runner = _Runner()
    try:
        for run in runs:
            report.checked += 1
            found = check_run(engine, run, runner)
            if found is not None:
                report.findings.append(found)
    finally:
        runner.close()
    return report


def refuse_redacted(engine: Engine, run: RunRecord) -> None:
    """Raise ``RunRedacted`` for a redacted run (its digest is the marker: others cost
    no query)."""
    if run.input_digest != REDACTED_DIGEST:
        return
    red = engine.redaction(run.run_id)
    if red is not None:
        raise RunRedacted(
            f"run {run.run_id!r} was redacted {utc_text(red.redacted_at)} by"
            f" {red.redacted_by}: its values are gone, so it cannot be replayed"
        )


def check_run(engine: Engine, run: RunRecord, runner: _Runner | None = None) -> Finding | None:
    """Replay one run; a :class:`Finding` when it would not replay cleanly. A redacted
    run raises ``RunRedacted``: its values are gone, there is nothing to replay."""
    refuse_redacted(engine, run)
    try:
        w = engine.registration_for(run)
    except WorkflowNotRegistered as exc:
        return Finding(run, UNSERVED, None, str(exc))
    history = engine.history(run.run_id, run.generation)
    setup = RunSetup.for_run(
        run,
        history,
        engine.clock,
        prompt_version=w.prompt_version,
        fetch_blobs=engine.blobs,
        checking=True,
    )
    core = RunCore(setup)
    ex = _NoWrites(core, cast("Store", _NoStore(core)), engine.clock)
    try:
        args, kwargs = engine.recorded_input(run)
    except DurablyError as exc:
        return _diverges(run, exc)
    own = None
    if runner is None:  # one run checked alone: its event loop is closed here
        runner = own = _Runner()
    try:
        _replay(w, core, ex, args, kwargs, runner)
    except ReplayEnd:
        pass
    except Unwind:
        pass  # another stop signal of the core: the history ends here too
    except Exception as exc:
        # A latched stop outranks what the workflow made of it (as in the engine): code
        # that caught the end of history and raised something else still ended there.
        # A failed run raised live too: a step failure it recorded (in a gather, the
        # one replayed first may be another than the one that ended it live), or the
        # error type it recorded (another one is new code that would end it
        # differently); a cancelled one raised at its recorded halt (and its cleanup,
        # saga compensations included, replayed up to the same end).
        failed_again = isinstance(exc, StepFailed) or _failure_type(exc) == run.error_type
        ended = (run.status == FAILED_RUN and failed_again) or (
            run.status == CANCELLED and core.halted is not None
        )
        if core.poisoned is None and core.stopped is None and not ended:
            return _diverges(run, exc, f"the workflow raised {type(exc).__name__}: ")
    else:
        # A workflow that swallowed the end of history (``gather(...,
        # return_exceptions=True)``, a bare ``except:``) and returned was stopped there:
        # positions its other branches never reached are not unused.
        if core.poisoned is None and core.stopped is None:
            try:
                core.unconsumed_check()
            except DurablyError:
                pass  # poisoned: reported below
    finally:
        if own is not None:
            own.close()
    if core.poisoned is not None:
        return _diverges(run, core.poisoned)
    return None


def _replay(
    w: Workflow,
    core: RunCore,
    ex: Executor,
    args: list[Any],
    kwargs: dict[str, Any],
    runner: _Runner,
) -> None:
    if w.is_async:
        actx = AsyncContext(core, ex)
        runner.run(_body(actx, w.fn(actx, *args, **kwargs)))
    else:
        ctx = Context(core, ex)
        with workflow_body(ctx):
            w.fn(ctx, *args, **kwargs)


async def _body(ctx: AsyncContext, body: Any) -> Any:
    """An async workflow's body seeing ``ctx`` as ``durably.current_context()`` (a
    wrapped model call in it replays its step rather than calling the model)."""
    with workflow_body(ctx):
        return await body


def _failure_type(exc: BaseException) -> str:
    """The error type a run that ended with ``exc`` records (as the engine records it)."""
    return exc.type_name if isinstance(exc, StepFailed) else type_name(exc)


def _diverges(run: RunRecord, exc: BaseException, prefix: str = "") -> Finding:
    # The core's messages are written for a resume, which blocks the run; the check
    # writes nothing, so it says what a resume (or, for a finished run, a fork or retry)
    # would do instead of "the run is blocked".
    reason = _BLOCKED.sub(_would_block(run), f"{prefix}{exc}")
    found = _POSITION.search(str(exc))
    return Finding(run, DIVERGES, found.group(1) if found else None, reason)


class _Runner:
    """Runs async workflows on one event loop for the whole check (a loop per run costs
    more than the replay), created when the first async workflow needs it."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        if self.loop is None:
            import asyncio

            self.loop = asyncio.new_event_loop()
        return self.loop.run_until_complete(coro)

    def close(self) -> None:
        if self.loop is not None:
            self.loop.close()


def runs_to_check(
    engine: Engine,
    workflow: str | None,
    status: str | None,
    since: float | None,
    limit: int,
    *,
    finished: bool,
) -> Iterator[RunRecord]:
    """The runs a check covers: every run with a history (``queued`` ones have none),
    of ``workflow``/``status`` when given, created at or after ``since``. Finished runs
    (completed, failed, cancelled) only with ``finished`` or when ``status`` names
    one: they never replay on their own, only when a person forks or retries them."""
    from ..history import QUEUED
    from ..runlist import LIST_RUNS_LIMIT_MAX

    # The newest ``limit`` runs of the filters (queued ones counted, as they always
    # were), read a page at a time; ``since`` in the query keeps a prefix of that order.
    after: str | None = None
    left = limit
    while left > 0:
        page = engine.list_runs(
            status=status,
            workflow=workflow,
            since=since,
            after=after,
            limit=min(left, LIST_RUNS_LIMIT_MAX),
        )
        left -= len(page.runs)
        for run in page.runs:
            if status is None and (run.status == QUEUED or (run.terminal and not finished)):
                continue
            if run.input_digest == REDACTED_DIGEST and engine.redaction(run.run_id):
                continue  # nothing to replay (check_run refuses it with RunRedacted)
            yield run
        if page.next is None:
            return
        after = page.next
