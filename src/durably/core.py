"""The replay core: positions, matching against history, and the records to write.

The core does no I/O. Each recording call is a generator that yields operations
(:class:`Call` a function, :class:`Write` records, :class:`Wait` a delay) to a driver and
receives their results; ``durably.context`` holds the one sync and the one async driver
(``drive_sync``, ``drive_async``) beside the thin ``Context``/``AsyncContext`` facades.
So there is a single implementation of replay semantics for sync and async workflows.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import datetime as dt
import hashlib
import inspect
import math
import random as _random
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from . import codec, inputs
from .approvals import (
    APPROVAL_NAME_PREFIX,
    EXPIRED,
    ApprovalRequest,
    Decision,
    approval_park_reason,
    args_json,
    canonical_args,
    check_action,
    check_on_timeout,
    decision_json,
    recorded_decision,
    waiting_json,
    waiting_times,
)
from .budget import Budget, Spend, SpendEntry, exceeded_message
from .clock import Clock
from .current import StepInfo as CurrentStep
from .errors import (
    BudgetExceeded,
    Cancelled,
    ConfigError,
    DurablyError,
    LeaseLost,
    NonDeterminism,
    Parked,
    ReplayEnd,
    SerializationError,
    StepFailed,
    Unwind,
)
from .events import (
    EVENT_DATA_BYTES_MAX,
    STEP_COMPLETED,
    STEP_FAILED,
    STEP_RETRIED,
    STEP_STARTED,
    USER,
    NewEvent,
    new_event,
)
from .history import (
    APPROVAL,
    COMPENSATE,
    ERROR_MESSAGE_CHARS_MAX,
    FAILED,
    GATHER,
    GATHER_DEPTH_MAX,
    HALT,
    INTENT,
    NOW,
    OK,
    OUTPUT_INLINE_BYTES_MAX,
    PATCHED,
    RANDOM,
    SCOPE_POSITIONS_MAX,
    SIGNAL,
    SLEEP,
    STEP,
    STEP_OUTPUT_BYTES_MAX,
    UUID,
    WAITING,
    StepRecord,
    check_name,
    describe_error,
    idempotency_key,
    storable_text,
)
from .limits import EVENTS_BUFFERED_MAX as EVENTS_BUFFERED_MAX
from .limits import SIGNAL_TIMEOUT_S_MAX as SIGNAL_TIMEOUT_S_MAX
from .limits import TIMER_S_MAX as TIMER_S_MAX
from .shell import command
from .steps import StepSignature, Usage, fn_text, signature_of, warn_untyped_result
from .streamops import (
    END,
    STOP,
    STREAM_CHUNKS_MAX,
    Begun,
    Deliver,
    Owner,
    aclose_chunks,
    anext_chunk,
    close_chunks,
    next_chunk,
)

if TYPE_CHECKING:
    import uuid as _uuid

T_ = TypeVar("T_")

FaultHook = Callable[[str, str, str, str], None]
"""``hook(run_id, position, step_name, window)`` with window ``before``, ``effect`` or
``recorded``; called only for live (not replayed) steps, and only when set."""

# Inputs that differ with no change of code: a value the workflow body computed from the
# wall clock, a random draw or the environment (`durably lint` finds these statically).
_INPUTS_ADVICE = (
    "If the code did not change, an input was computed in the workflow body from the wall"
    " clock, a random number or the environment, which differ on every run: take it from"
    " ctx.now(), ctx.random() or ctx.uuid() (recorded), or compute it inside a step"
    " (`durably lint` finds such lines)."
)

NOT_DONE: Any = type("NotDone", (), {"__repr__": lambda self: "durably.NOT_DONE"})()
"""Returned by a ``reconcile`` function when the effect did not happen: the step runs."""


@dataclass(slots=True)
class Call:
    """Operation: call ``fn(*args, **kwargs)`` with an optional per-attempt timeout."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    timeout_s: float | None
    is_async: bool
    # What ``durably.current_step()`` returns while ``fn`` runs.
    info: CurrentStep | None = None


@dataclass(slots=True)
class Write:
    """Operation: append ``records`` to the journal in one fenced transaction, with the
    ``events`` that describe them (and any stream-only events buffered since the last
    write, which so cost no commit of their own)."""

    records: list[StepRecord]
    events: list[NewEvent] = field(default_factory=list)


@dataclass(slots=True)
class Wait:
    """Operation: wait ``seconds`` on the engine's clock (retry backoff)."""

    seconds: float


@dataclass(slots=True)
class ReadDecision:
    """Operation: read the decision of the run's approval request at ``request_id``
    (fenced; the store takes the expiry first when the request is past it, so an expiry
    and a person's decision are never both taken). The reply is the request's
    :class:`~durably.approvals.ApprovalRow`, or None when the store has none."""

    request_id: str


@dataclass(slots=True)
class TakeSignal:
    """Operation: consume the oldest unconsumed signal ``name`` of the run for the wait at
    position ``consumer`` (fenced; asking again for the same consumer returns the same
    signal). The reply is ``(seq, data JSON)`` or None."""

    name: str
    consumer: str


@dataclass(slots=True)
class Charge:
    """Operation: add one call's reported usage to the run's spend ledger (its own
    commit, before the step's result); the driver replies with the run's :class:`Spend`."""

    entry: SpendEntry


@dataclass(slots=True)
class ReadSpend:
    """Operation: read the run's spend and stored budget; the reply is a :class:`Spend`."""


@dataclass(slots=True)
class SetBudget:
    """Operation: store the run's budget (fenced), for ``runs show`` and later claims."""

    budget: Budget


Op = Call | Write | Wait | TakeSignal | Charge | ReadSpend | SetBudget | ReadDecision


@dataclass(slots=True)
class Outcome:
    """What a :class:`Call` produced: a value or an exception, and the spend reported."""

    value: Any = None
    error: Exception | None = None
    usage: Usage = field(default_factory=Usage)


@dataclass(frozen=True, slots=True)
class FaultStepInfo:
    """What a fault hook may want to know about the step it was called for (see
    :func:`fault_step`; exported as ``durably.FaultStepInfo``)."""

    key: str
    takes_key: bool
    effect: bool
    has_reconcile: bool


StepInfo = FaultStepInfo
"""The fault hook's type under its old name (``durably.StepInfo`` is another type: what
``durably.current_step()`` returns)."""

_FAULT_STEP: contextvars.ContextVar[FaultStepInfo | None] = contextvars.ContextVar(
    "durably_fault_step", default=None
)


def fault_step() -> FaultStepInfo | None:
    """Inside a fault hook: the facts of the step it was called for (else None)."""
    return _FAULT_STEP.get()


class Scope:
    """Hands out positions: ``0, 1, 2`` at the top, ``4.1.0, 4.1.1`` in gather branch 1
    of the gather at position 4.

    A scope serves one thread of program order. ``busy`` names the live step or gather
    of this scope still in flight: a position asked for meanwhile comes from code running
    concurrently on the same scope (``asyncio.gather``/``create_task`` around
    ``ctx.step``), whose positions would depend on timing, so :meth:`take` refuses it.
    """

    __slots__ = ("busy", "core", "next", "prefix", "stream")

    def __init__(self, core: RunCore, prefix: str) -> None:
        # Bounded nesting and bounded numbers keep every key within KEY_CHARS_MAX.
        numbers = prefix.split(".")[:-1]
        if len(numbers) > 2 * GATHER_DEPTH_MAX:
            raise core.poison(
                ConfigError(
                    f"ctx.gather nested {len(numbers) // 2} deep (at {prefix[:-1]}): at most"
                    f" {GATHER_DEPTH_MAX} levels keep idempotency keys within the receiving"
                    " side's 255 characters; flatten the inner gathers"
                )
            )
        if any(int(n) >= SCOPE_POSITIONS_MAX for n in numbers):
            raise core.poison(_too_many(prefix[:-1]))
        self.core = core
        self.prefix = prefix
        self.next = 0
        self.busy: str | None = None
        # The streamed step of this scope still open (ctx.step_stream): the next
        # recording call of the scope ends it first, recording what was consumed.
        self.stream: Owner | None = None

    def peek(self) -> str:
        """The position :meth:`take` would hand out next, without consuming it."""
        return f"{self.prefix}{self.next}"

    def take(self) -> str:
        """The next position of this scope (ending an open streamed step first)."""
        if self.stream is not None:
            self.stream.finish(f"{self.prefix}{self.next}")
        if self.busy is not None:
            raise self.core.poison(ConfigError(_concurrent_use(self, self.busy)))
        if self.next >= SCOPE_POSITIONS_MAX:
            raise self.core.poison(_too_many(f"{self.prefix}{self.next}"))
        pos = f"{self.prefix}{self.next}"
        self.next += 1
        rec = self.core.history.get(pos)
        if rec is not None and rec.kind == HALT:
            raise self.core.replay_halt(rec)
        return pos


def _too_many(position: str) -> ConfigError:
    return ConfigError(
        f"position {position}: more than {SCOPE_POSITIONS_MAX:,} recording calls (or gather"
        " branches) in one scope; split the work into several runs, or use fewer branches"
    )


SCOPE: contextvars.ContextVar[Scope | None] = contextvars.ContextVar("durably_scope", default=None)

# The run whose saga compensation the code running now is (set by ``RunCore.compensation``
# for the thread or asyncio task that compensates): only that code passes a delivered halt.
# A per-run counter alone would let a sibling gather branch record live work under the
# cancel latch while another branch compensates.
_COMPENSATING: contextvars.ContextVar[RunCore | None] = contextvars.ContextVar(
    "durably_compensating", default=None
)


def type_name(exc: BaseException) -> str:
    """``ValueError`` for builtins, ``module.Qualname`` otherwise."""
    cls = type(exc)
    name = (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )
    # Class names are the program's, but a generated one may hold anything: it is stored.
    return storable_text(name, ERROR_MESSAGE_CHARS_MAX)


class RunCore:
    """Replay state of one attempt at driving a run."""

    def __init__(
        self,
        run_id: str,
        history: list[StepRecord],
        clock: Clock,
        fault_hook: FaultHook | None = None,
    ) -> None:
        self.run_id = run_id
        self.clock = clock
        self.history = {rec.position: rec for rec in history}
        self.consumed: set[str] = set()
        self.pending: list[StepRecord] = []
        self.root = Scope(self, "")
        self.fault_hook = fault_hook
        self.poisoned: DurablyError | None = None
        self.stopped: Unwind | None = None
        self.lease_deadline: float | None = None
        self.token = 0
        # The run's incarnation, part of every key (None for runs from before keys had one).
        self.incarnation: str | None = None
        self.in_doubt: str | None = None
        # Prefixes (``"4."``) of gathers that ended in failure in this attempt: their
        # branches may stop earlier on replay than live, so what they recorded and this
        # attempt did not ask for again is not a sign of changed code.
        self.failed_gathers: list[str] = []
        # The first recording call an async workflow created and dropped without awaiting
        # it; it blocks the run at the next recording call or when the workflow returns.
        self.dropped: str | None = None
        self._legacy_gathers: frozenset[str] | None = None
        # Set by ``durably replay --check``: the first live action stops the replay.
        self.checking = False
        # Stream-only events waiting to ride with the next durable write, and how many
        # emits each position has had (an emit's identity: replay dedupes by it).
        self.events: list[NewEvent] = []
        self.emits: dict[str, int] = {}
        # Reads recorded input blobs (the store's get_blobs), only to explain a mismatch.
        self.fetch_blobs: inputs.Fetch | None = None
        # Blobs this attempt has written (or sent to be written): not sent again.
        self.known_blobs: set[str] = set()
        # The run's recorded prompt version and the code's, when the workflow declares one.
        self.prompt_versions: tuple[str | None, str | None] = (None, None)
        # The digest rule of the run (codec.CODEC_VERSION when it was created) and the
        # hashes of the list items (messages) its steps were passed, computed once each.
        self.codec_version = codec.CODEC_VERSION
        self.item_hashes = codec.ItemHashes()
        # Step outputs longer than this go to the blob table (see OUTPUT_INLINE_BYTES_MAX).
        self.output_inline_max = OUTPUT_INLINE_BYTES_MAX
        # The manifest of the step going live at each position (its records carry it).
        self.manifests: dict[str, inputs.Manifest] = {}
        # A run-wide stop that must reach the workflow as an ordinary exception (a cancel,
        # a crossed budget): requested by the driver or the ledger, delivered at the next
        # position that would go live (``live``), then latched in ``halted``. Inside a
        # saga's compensation (``compensation()``: ``compensating`` counts them, and the
        # code running in one is marked) it neither is delivered nor stops recording calls.
        self.halt_requested: DurablyError | None = None
        self.halted: DurablyError | None = None
        self.compensating = 0
        # Budgets: the run's generation (part of each ledger entry's name), the limit this
        # claim was given (ctx.budget / the workflow option; else the stored one applies),
        # and the run's spend as the ledger last said (None: not read in this claim).
        self.generation = 0
        self.budget: Budget | None = None
        self.spend: Spend | None = None
        # Waits of gather branches that parked in this attempt, by branch prefix
        # (``"4.0."``): not latched run-wide, so sibling branches go on live; a later
        # recording call of the parked branch (its code caught the Parked) raises it
        # again. The gather then raises one park combining its branches' (``park``).
        self.branch_parks: dict[str, Parked] = {}
        # The tasks of this attempt's gather branches, by branch prefix, and the scope
        # prefixes whose code has gone live (``live``): a wait that parked in an earlier
        # attempt lets its sibling branches replay first (context.py ``_settle``).
        self.branch_tasks: dict[str, Any] = {}
        self.went_live: set[str] = set()
        self.settling: set[str] = set()

    # -- positions and matching ----------------------------------------------------------

    def scope(self) -> Scope:
        """The scope of the code running now: a gather branch's, or the run's root."""
        scope = SCOPE.get()
        if scope is None or scope.core is not self:
            return self.root
        return scope

    def take(self) -> str:
        """Consume the next position of the current scope."""
        return self.scope().take()

    def live(self, pos: str) -> None:
        """Called where the run would go on live (nothing recorded at ``pos``, or only a
        wait in progress): under ``replay --check`` the run's recorded history ends here,
        so the replay stops; a requested halt (cancel, budget) is delivered here."""
        if self.branch_tasks:
            self.went_live.add(self.scope().prefix)
        if self.checking:
            raise self.latch(ReplayEnd(pos))
        if self.halt_requested is not None and self.halted is None and not self.compensating_here():
            raise self._deliver_halt(pos, self.halt_requested)

    @contextlib.contextmanager
    def compensation(self) -> Iterator[None]:
        """Around a saga's compensations: the code running inside (this thread, or this
        asyncio task) records despite a delivered halt (cancel, budget), and no halt is
        delivered to it; everything else the run does stays under the latch."""
        self.compensating += 1
        token = _COMPENSATING.set(self)
        try:
            yield
        finally:
            _COMPENSATING.reset(token)
            self.compensating -= 1

    def compensating_here(self) -> bool:
        """Whether the code running now is one of this run's saga compensations."""
        return self.compensating > 0 and _COMPENSATING.get() is self

    def request_halt(self, exc: Cancelled | BudgetExceeded) -> None:
        """Ask for ``exc`` to stop the workflow at its next position that goes live (the
        first request wins, except that a cancel replaces a crossed budget not delivered
        yet: a person's decision outranks the budget). Replayed positions are not
        affected: they return what they recorded, so the workflow reaches the same point
        it reached before."""
        pending = self.halt_requested
        if pending is None or (
            self.halted is None
            and isinstance(exc, Cancelled)
            and isinstance(pending, BudgetExceeded)
        ):
            self.halt_requested = exc

    def _deliver_halt(self, pos: str, exc: DurablyError) -> DurablyError:
        """Record a halt marker at ``pos`` (riding with the next write: the outcome, or a
        compensation's record), latch ``exc`` and return it for ``raise``."""
        name = HALT_NAMES[Cancelled if isinstance(exc, Cancelled) else BudgetExceeded]
        reason = getattr(exc, "reason", None)
        text = codec.dumps({"message": str(exc), "reason": reason}, f"halt at {pos}")
        now = self.clock.time()
        self.pending.append(
            StepRecord(
                pos, HALT, name, _halt_digest(name), OK, text, started_at=now, finished_at=now
            )
        )
        self.consumed.add(pos)
        self.halted = exc
        return exc

    def replay_halt(self, rec: StepRecord) -> DurablyError:
        """The halt recorded at ``rec.position`` (a replay reached it): latch it again and
        return it for ``raise``."""
        self.consumed.add(rec.position)
        if self.halted is None:
            cls = _HALT_TYPES.get(rec.name)
            try:
                data = codec.loads(rec.output or "null")
                message, reason = str(data["message"]), data.get("reason")
            except (SerializationError, KeyError, TypeError, AttributeError):
                message, reason = f"run {self.run_id!r}: halted at {rec.position}", None
            if cls is None:
                raise self.poison(
                    NonDeterminism(
                        f"step {rec.position}: history has an unknown halt {rec.name!r};"
                        " the run is blocked (a newer durably wrote it, or the row was edited)"
                    )
                )
            self.halted = (
                Cancelled(message, reason if isinstance(reason, str) else None)
                if cls is Cancelled
                else BudgetExceeded(message)
            )
        return self.halted

    def poison(self, exc: DurablyError) -> DurablyError:
        """Remember a determinism or encoding error: the run ends ``blocked`` even if the
        workflow catches it, and every later call raises it again."""
        if self.poisoned is None:
            self.poisoned = exc
        return exc

    def latch(self, signal: Unwind) -> Unwind:
        """Latch a stop signal (lease lost, parked, in doubt, store failure, cancelled):
        every later recording call raises it again, so nothing the workflow catches (a
        bare ``except:``, ``gather(..., return_exceptions=True)``) can go on with live
        work. The first signal latched wins; it is returned for ``raise``."""
        if self.stopped is None:
            self.stopped = signal
        return self.stopped

    def park(self, parked: Parked) -> Unwind:
        """Park at a wait that is not satisfied yet; returned for ``raise``.

        At the top level of the workflow the park is latched, as every stop signal is.
        Inside a ``ctx.gather`` branch it ends only that branch: the siblings go on live
        (their steps run and are recorded) until each finishes or parks too, and the
        gather then raises one park combining them (:func:`combine_parks`), so waits in
        parallel branches run at the same time instead of one after another.
        """
        scope = self.scope()
        if scope is self.root:
            stop = self.latch(parked)
            if stop is parked:
                # Now the park is the attempt's end: records held for it (new approval
                # requests of gather branches) go with its write, with their rows.
                self.pending.extend(r for r in parked.records if isinstance(r, StepRecord))
            return stop
        self.branch_parks.setdefault(scope.prefix, parked)
        return parked

    def branch_parked(self) -> Parked | None:
        """The park of the gather branch the running code belongs to, if it parked."""
        prefix = self.scope().prefix
        for branch, parked in self.branch_parks.items():
            if prefix.startswith(branch):
                return parked
        return None

    @property
    def lease_lost(self) -> bool:
        """True once the run's lease is known lost (a refused renewal or append, a passed
        deadline, or the engine giving the run back)."""
        return isinstance(self.stopped, LeaseLost)

    @lease_lost.setter
    def lease_lost(self, lost: bool) -> None:
        if lost:
            self.latch(LeaseLost(self.run_id, self.token))

    def guard(self, halt: bool = True) -> None:
        """Refuse to go on after poisoning, after a stop signal, past the lease deadline,
        or (``halt``, unless compensating) after a delivered halt (cancel, budget).

        The deadline check is local (no I/O): a process stopped past its lease (SIGSTOP, a
        long pause) may have been replaced by another owner, so it never starts another
        step on its own say-so.
        """
        if self.poisoned is not None:
            raise self.poisoned
        if self.stopped is None and self.lease_deadline is not None:
            now = self.clock.time()
            if now >= self.lease_deadline:
                late = f"was past its lease deadline by {now - self.lease_deadline:.1f} s"
                self.latch(LeaseLost(self.run_id, self.token, late))
        if self.stopped is not None:
            # A fresh traceback each time: the same signal may be raised many times.
            raise self.stopped.with_traceback(None)
        if self.branch_parks and (parked := self.branch_parked()) is not None:
            raise parked.with_traceback(None)
        if halt and self.halted is not None and not self.compensating_here():
            raise self.halted.with_traceback(None)

    def guard_replay(self) -> None:
        """:meth:`guard` for a call that may replay a finished record at its position.

        After a delivered halt, a record that is there was made by a sibling gather
        branch whose call was in flight when the halt came (the gather lets it finish):
        a replay returns it as the live run did, so a saga around the gather undoes
        the same steps. Anything else stays under the latch."""
        self.guard(halt=False)
        if self.halted is not None and not self.compensating_here():
            rec = self.history.get(self.scope().peek())
            if rec is None or rec.kind == HALT or rec.status not in (OK, FAILED):
                raise self.halted.with_traceback(None)

    def recorded(
        self, pos: str, kind: str, name: str, digest: str, call: Any = None
    ) -> StepRecord | None:
        """The record at ``pos`` after checking it matches what the code asks for
        (``call``: the step's ``(fn, args, kwargs)``, to explain differing inputs)."""
        rec = self.history.get(pos)
        if rec is None:
            return None
        self.consumed.add(pos)
        if rec.kind != kind or rec.name != name or rec.digest != digest:
            same = rec.name == name and rec.kind == kind
            what = "inputs differ" if same else "steps differ"
            detail = self._inputs_diff(rec, call) if same else ""
            parts = [
                # No digest: an unsalted sha256 of the arguments gives a short value
                # back to anyone trying the candidates (see HASH_SHOWN_CHARS_MIN).
                f"step {pos}: history has {rec.name!r}, code asked for {name!r} ({what}).",
                detail,
                self._prompt_note(),
                _INPUTS_ADVICE if same else "",
                "The code no longer matches this run's history: revert the change, or let"
                " old runs finish on workers that serve their version first. The run is"
                " blocked; nothing recorded was lost, and it resumes once the code matches.",
            ]
            # A diff takes lines of its own; without one the message stays one line.
            sep = "\n" if detail else " "
            raise self.poison(NonDeterminism(sep.join(p for p in parts if p)))
        return rec

    def check_dropped(self) -> None:
        """Raise (and poison) if the workflow dropped a recording call without awaiting it."""
        if self.dropped is not None:
            raise self.poison(ConfigError(self.dropped))

    def _inputs_diff(self, rec: StepRecord, call: Any) -> str:
        """How the recorded inputs differ from ``call``'s ("" when they were not kept)."""
        if call is None or rec.inputs is None or self.fetch_blobs is None:
            return ""
        fn, args, kwargs = call
        try:
            now = inputs.build(args, kwargs, set())
            return inputs.diff(rec.inputs, now, fn, self.fetch_blobs)
        except Exception as exc:  # an explanation must never hide the NonDeterminism
            return f"(the recorded inputs cannot be shown: {type_name(exc)}: {exc})"

    def _prompt_note(self) -> str:
        """What to do when the prompt version changed under this run."""
        old, new = self.prompt_versions
        if old == new or new is None:
            return ""
        return (
            f"The prompt changed under this run: it recorded prompt version {old!r}, the"
            f" code has {new!r}. Finish the run on the old version (a worker serving it),"
            " put the new prompt behind ctx.patched(...), or fork the run to start it on"
            " the new prompt."
        )

    def unconsumed_check(self) -> None:
        """After the workflow returned: nothing it created was left unawaited, and every
        recorded position was asked for (except under a gather that ended in failure).
        A streamed step left open ends here (what its caller consumed is recorded)."""
        if self.root.stream is not None:
            self.root.stream.finish("the end of the workflow")
        self.check_dropped()
        left = sorted(set(self.history) - self.consumed, key=_pos_key)
        if left and self.failed_gathers:
            exempt = tuple(self.failed_gathers)
            left = [pos for pos in left if not pos.startswith(exempt)]
        if left:
            rec = self.history[left[0]]
            raise self.poison(
                NonDeterminism(
                    f"step {rec.position}: history has {rec.name!r}, code"
                    f" asked for nothing (the workflow returned with {len(left)} recorded"
                    " position(s) unused). The code no longer matches this run's history; the"
                    " run is blocked and nothing recorded was lost."
                )
            )

    def fault(self, pos: str, name: str, window: str, sig: StepSignature) -> None:
        """Call the fault-injection hook, if one is set; :func:`fault_step` tells the hook
        the facts of the step it was called for."""
        if self.fault_hook is not None:
            info = FaultStepInfo(
                idempotency_key(self.run_id, self.incarnation, pos),
                sig.takes_key,
                sig.options.effect,
                sig.options.reconcile is not None,
            )
            token = _FAULT_STEP.set(info)
            try:
                self.fault_hook(self.run_id, pos, name, window)
            finally:
                _FAULT_STEP.reset(token)

    def take_pending(self) -> list[StepRecord]:
        """Buffered clock/random records, to ride with the next durable write."""
        out, self.pending = self.pending, []
        return out

    # -- the event stream ----------------------------------------------------------------

    def take_events(self) -> list[NewEvent]:
        """Buffered stream-only events, to ride with the next durable write."""
        out, self.events = self.events, []
        return out

    def step_event(self, kind: str, pos: str, data: dict[str, Any], tail: str = "") -> NewEvent:
        """A step event of this claim (its dedupe carries the fencing token: a write
        retried after an unknown outcome stores it once; a later claim's is another)."""
        # The position before the kind: a step's started and completed events sit side by
        # side in the dedupe index, so its write touches one index page, not two.
        dedupe = f"t{self.token}:{pos}:{kind}{tail}"
        return new_event(kind, pos, data, self.clock.time(), dedupe)

    def emit(self, kind: Any, data: Any = None) -> None:
        """Buffer a user event at the current position (the one the next recording call
        takes). It consumes no position; its identity is (position, index among the
        position's emits), so a replay that emits it again stores nothing new. Allowed
        after a cancel (cleanup code may say what it does); not after a stop."""
        self.guard(halt=False)
        if not isinstance(kind, str) or not kind:
            raise ConfigError(f"ctx.emit: kind must be a non-empty str, got {_given(kind)}")
        check_name(kind, "ctx.emit: the kind")
        if len(self.events) >= EVENTS_BUFFERED_MAX:
            raise ConfigError(
                f"ctx.emit: {EVENTS_BUFFERED_MAX:,} events buffered without a step in between;"
                " events ride with the next recorded step, so record one (or emit less)"
            )
        scope = SCOPE.get()
        if scope is None or scope.core is not self:
            scope = self.root
        pos = f"{scope.prefix}{scope.next}"
        index = self.emits.get(pos, 0)
        text = codec.dumps(
            {"kind": kind, "data": data}, f"ctx.emit({kind!r})", EVENT_DATA_BYTES_MAX
        )
        self.emits[pos] = index + 1
        self.events.append(NewEvent(USER, pos, text, self.clock.time(), f"emit:{pos}:{index}"))

    # -- budgets and the spend ledger ----------------------------------------------------

    def set_budget(self, budget: Budget) -> Generator[Op, Any, None]:
        """``ctx.budget`` / the workflow's ``budget=``: this claim's limit (the latest call
        wins), stored when it differs from the stored one (so a replay that sets the same
        budget again writes nothing), then checked against the run's spend. It consumes
        no position and may be called after a halt (it records nothing in the history)."""
        self.guard(halt=False)
        if not isinstance(budget, Budget):
            raise ConfigError(f"a budget is a durably.Budget, got {_given(budget)}")
        self.budget = budget
        if self.checking:
            return  # replay --check writes nothing and never goes live
        if self.spend is None:
            self.spend = yield ReadSpend()
        if self.spend.budget != budget:
            yield SetBudget(budget)
            self.spend = dataclasses.replace(self.spend, budget=budget)
        self.check_budget()

    def charge(self, pos: str, call: str, attempt: int, usage: Usage) -> Generator[Op, Any, None]:
        """Put one call's reported usage in the ledger (nothing when it reported none), then
        check the budget: a crossing asks for a halt, which reaches the workflow at its
        next position that goes live (this step's result is still recorded)."""
        if not usage.reported:
            return
        entry = SpendEntry(
            f"g{self.generation}:{pos}:t{self.token}:{call}",
            self.generation,
            pos,
            attempt,
            self.token,
            usage.tokens,
            usage.input_tokens if usage.split else None,
            usage.output_tokens if usage.split else None,
            usage.cost_usd,
        )
        self.spend = yield Charge(entry)
        self.check_budget()

    def check_budget(self) -> None:
        """Ask for a ``BudgetExceeded`` halt when the known spend is more than the limit
        (this claim's, else the stored one)."""
        if self.spend is None:
            return
        budget = self.budget if self.budget is not None else self.spend.budget
        how = self.spend.over(budget)
        if how is not None:
            self.request_halt(BudgetExceeded(exceeded_message(self.run_id, how)))

    # -- deterministic values ------------------------------------------------------------

    def value(self, kind: str, produce: Callable[[], Any]) -> Any:
        """``now``/``random``/``uuid``: recorded once, replayed after."""
        self.guard()
        pos = self.take()
        name = f"durably.{kind}"
        digest = _KIND_DIGESTS[kind]
        rec = self.recorded(pos, kind, name, digest)
        try:
            if rec is not None and rec.output is not None:
                return codec.loads(rec.output)
            self.live(pos)
            text = codec.dumps(produce(), name, STEP_OUTPUT_BYTES_MAX)
            value = codec.loads(text)
        except SerializationError as exc:
            raise self.poison(
                SerializationError(f"position {pos} {name}: {exc}; the run is blocked")
            ) from None
        now = self.clock.time()
        self.pending.append(
            StepRecord(pos, kind, name, digest, OK, text, started_at=now, finished_at=now)
        )
        return value

    def now(self) -> dt.datetime:
        """The recorded current time, UTC."""
        value: dt.datetime = self.value(
            NOW, lambda: dt.datetime.fromtimestamp(self.clock.time(), dt.UTC)
        )
        return value

    def random(self) -> float:
        """A recorded float in [0, 1)."""
        return float(self.value(RANDOM, _random.random))

    def uuid(self) -> _uuid.UUID:
        """A recorded random UUID."""
        import uuid as _uuid  # imported on first use: it pulls in platform (slow)

        value: _uuid.UUID = self.value(UUID, _uuid.uuid4)
        return value

    # -- sagas ---------------------------------------------------------------------------

    def compensate_begin(self, positions: list[str], error: str) -> None:
        """A saga starts compensating the steps at ``positions`` (in the order it will
        undo them) because of ``error``: take the next position and check or record a
        ``compensate`` marker there. Its digest covers the positions, so a replay that
        would undo other steps, or in another order, is caught before any compensation
        runs; the error text is kept for people (it may differ on replay: a message the
        workflow built live). The marker rides with the first compensation's write."""
        self.guard()
        pos = self.take()
        digest = codec.digest(COMPENSATE_NAME, [positions], {})
        rec = self.history.get(pos)
        if rec is not None:
            self.consumed.add(pos)
            if rec.kind != COMPENSATE or rec.digest != digest:
                raise self.poison(
                    NonDeterminism(
                        f"step {pos}: history has {rec.name!r}, code asked"
                        f" for a saga compensating the steps at {', '.join(positions)}"
                        f" ({COMPENSATE_NAME}). The code no longer matches this"
                        " run's history: revert the change, or let old runs finish on workers"
                        " that serve their version first. The run is blocked; nothing recorded"
                        " was lost, and it resumes once the code matches."
                    )
                )
            return
        self.live(pos)
        text = codec.dumps(
            {"steps": positions, "error": storable_text(error, ERROR_MESSAGE_CHARS_MAX)},
            f"compensate {pos}",
        )
        now = self.clock.time()
        self.pending.append(
            StepRecord(
                pos, COMPENSATE, COMPENSATE_NAME, digest, OK, text, started_at=now, finished_at=now
            )
        )

    # -- timers --------------------------------------------------------------------------

    def sleep(self, seconds: Any) -> None:
        """``ctx.sleep(seconds)``: a durable timer at the next position (see
        :meth:`_timer`)."""
        self.guard()
        if not self._timer_reached() and (
            isinstance(seconds, bool)
            or not isinstance(seconds, (int, float))
            # The range first: it also refuses NaN and infinities, and compares an int too
            # large for a float (10**400) exactly, where math.isfinite would raise.
            or not 0 <= seconds <= TIMER_S_MAX
        ):
            raise self.poison(
                ConfigError(
                    f"ctx.sleep({seconds!r:.100}): seconds must be a finite number from 0 to"
                    f" {TIMER_S_MAX:,.0f} (100 years), e.g. ctx.sleep(3600) for an hour; for a"
                    " point in time use ctx.sleep_until(datetime). The run is blocked; fix"
                    " the code, then resume it."
                )
            )
        self._timer(lambda now: now + float(seconds))

    def sleep_until(self, when: Any) -> None:
        """``ctx.sleep_until(when)``: a durable timer until a timezone-aware datetime."""
        self.guard()
        if not isinstance(when, dt.datetime):
            raise self.poison(
                ConfigError(
                    f"ctx.sleep_until({when!r:.100}): pass a timezone-aware datetime, e.g."
                    " datetime(2026, 12, 1, 9, 0, tzinfo=datetime.UTC); for a duration use"
                    " ctx.sleep(seconds). The run is blocked; fix the code, then resume it."
                )
            )
        if when.tzinfo is None or when.utcoffset() is None:
            raise self.poison(
                ConfigError(
                    f"ctx.sleep_until({when.isoformat()}): the datetime is naive (no timezone),"
                    " so it names no fixed instant (the process's local zone would decide);"
                    " give it one: when.replace(tzinfo=datetime.UTC) or a zoneinfo.ZoneInfo."
                    " The run is blocked; fix the code, then resume it."
                )
            )
        at = when.timestamp()
        if at - self.clock.time() > TIMER_S_MAX:
            raise self.poison(
                ConfigError(
                    f"ctx.sleep_until({when.isoformat()}): more than 100 years ahead; a timer"
                    " that far out is a bug. The run is blocked; fix the code, then resume it."
                )
            )
        self._timer(lambda now: at)

    def _timer_reached(self) -> bool:
        """Whether the timer about to take the next position was reached before (its
        record is there): then its recorded wake time wins and its argument is not looked
        at, so one computed from the wall clock (``reset_at - time.time()``, negative on the
        replay after the wake) does not block the run."""
        rec = self.history.get(self.scope().peek())
        return rec is not None and rec.kind == SLEEP

    def _timer(self, wake: Callable[[float], float]) -> None:
        """A durable timer at the next position; ``wake(now)`` gives the wake time when the
        timer is first reached (on the recorded clock).

        The digest does not cover the duration: once reached, the recorded wake time wins
        (a deploy that changes the duration applies to timers not yet reached). Recorded
        ``ok``: the timer is over, return. Otherwise (nothing recorded, or ``waiting``) the
        timer goes live: due, an ``ok`` record rides with the next write and the call
        returns; not due, a ``waiting`` record holding the wake time (written once: a
        replay parks again at the same recorded time, never a fresh one) and the run
        parks, latched, until then.
        """
        pos = self.take()
        rec = self.recorded(pos, SLEEP, SLEEP_NAME, _SLEEP_DIGEST)
        if rec is not None and rec.status == OK:
            return
        self.live(pos)  # nothing recorded, or a wait in progress: the timer is live here
        now = self.clock.time()
        wake_at = wake(now) if rec is None else self._recorded_wake(pos, rec)
        text = codec.dumps({"wake_at": wake_at})
        started = now if rec is None else rec.started_at
        if wake_at <= now:
            self.pending.append(
                StepRecord(
                    pos,
                    SLEEP,
                    SLEEP_NAME,
                    _SLEEP_DIGEST,
                    OK,
                    text,
                    started_at=started,
                    finished_at=now,
                )
            )
            return
        if rec is None:
            self.pending.append(
                StepRecord(pos, SLEEP, SLEEP_NAME, _SLEEP_DIGEST, WAITING, text, started_at=now)
            )
        raise self.park(Parked(TIMER, wake_at))

    def _recorded_wake(self, pos: str, rec: StepRecord) -> float:
        """The wake time a ``waiting`` timer record holds (a damaged row blocks the run)."""
        try:
            if rec.status != WAITING:
                raise ValueError(f"status {rec.status!r}")
            at = codec.loads(rec.output or "null")["wake_at"]
            if isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at):
                raise ValueError(f"wake_at {at!r}")
            if at - self.clock.time() > TIMER_S_MAX:
                # No timer durably records ends that far out, and the park reason could
                # not print it (past year 9999): a damaged row, not a wait.
                raise ValueError(f"wake_at {at!r} is more than 100 years ahead")
            return float(at)
        except (SerializationError, TypeError, KeyError, ValueError) as exc:
            raise self.poison(
                SerializationError(
                    f"position {pos} {SLEEP_NAME}: the recorded timer cannot be read ({exc});"
                    " the run is blocked until the row is repaired"
                )
            ) from None

    # -- gathers -------------------------------------------------------------------------

    def gather_begin(self, labels: list[str]) -> tuple[Scope, str]:
        """Take a gather's position, check or record its ``gather`` record, and mark the
        scope busy; the driver then runs branch ``i`` in a child scope ``"{pos}.{i}."``.

        The record's digest covers ``[arity, labels]``, so a deploy that shifts or changes
        the gather is caught here, before any branch runs. The record rides with the next
        durable write (any branch's first write, an effect's intent included), so it is in
        the journal before any branch's effect. A journal written before gathers were
        recorded has its branches' records under ``pos`` and none at ``pos``: accepted
        without the check.
        """
        self.guard_replay()
        self.check_dropped()
        scope = self.scope()
        pos = scope.take()
        shape = [len(labels), labels]
        digest = codec.digest(GATHER_NAME, shape, {})
        rec = self.history.get(pos)
        if rec is not None:
            self.consumed.add(pos)
            if rec.kind != GATHER or rec.digest != digest:
                raise self.poison(NonDeterminism(_gather_mismatch(pos, rec, shape)))
        elif pos not in self._legacy():
            self.live(pos)  # a new gather marker: under replay --check, history ends here
            text = codec.dumps(shape, f"gather {pos}")
            now = self.clock.time()
            self.pending.append(
                StepRecord(
                    pos, GATHER, GATHER_NAME, digest, OK, text, started_at=now, finished_at=now
                )
            )
        scope.busy = f"gather {pos}"
        return scope, pos

    def gather_end(self, scope: Scope, pos: str, failed: bool) -> None:
        """The gather at ``pos`` is over; ``failed`` when it ended by raising."""
        scope.busy = None
        if failed:
            self.failed_gathers.append(f"{pos}.")

    def _legacy(self) -> frozenset[str]:
        """Positions of gathers whose branches are recorded but which have no record of
        their own (journals from before gathers were recorded)."""
        if self._legacy_gathers is None:
            parents: set[str] = set()
            for p in self.history:
                parts = p.split(".")
                parents.update(".".join(parts[:i]) for i in range(1, len(parts), 2))
            self._legacy_gathers = frozenset(parents - set(self.history))
        return self._legacy_gathers

    # -- patch markers ------------------------------------------------------------------

    def patched(self, change_id: str) -> bool:
        """``ctx.patched(change_id)`` at the next position p: a marker for this id recorded
        at p is consumed (True); anything else recorded at p or later in this scope or an
        enclosing one means the run started before the change (False, nothing consumed);
        nothing recorded: the marker is recorded (True), riding with the next write."""
        self.guard()
        self._check_change_id(change_id, "ctx.patched")
        scope = self.scope()
        pos = scope.peek()
        rec = self.history.get(pos)
        if rec is not None and rec.kind == PATCHED and rec.name == change_id:
            self.consumed.add(scope.take())
            return True
        if rec is not None and rec.kind == HALT:
            scope.take()  # raises the recorded halt
        if rec is not None or self._recorded_after(pos):
            return False
        pos = scope.take()
        self.live(pos)
        now = self.clock.time()
        digest = _patch_digest(change_id)
        self.pending.append(
            StepRecord(pos, PATCHED, change_id, digest, OK, "true", started_at=now, finished_at=now)
        )
        return True

    def deprecate_patch(self, change_id: str) -> None:
        """``ctx.deprecate_patch(change_id)``: consume a marker for this id recorded at the
        next position, if one is there (a run that took the patched path); never record."""
        self.guard()
        self._check_change_id(change_id, "ctx.deprecate_patch")
        scope = self.scope()
        rec = self.history.get(scope.peek())
        if rec is not None and rec.kind == PATCHED and rec.name == change_id:
            self.consumed.add(scope.take())

    def _check_change_id(self, change_id: object, where: str) -> None:
        if not isinstance(change_id, str) or not change_id:
            raise self.poison(
                ConfigError(
                    f"{where}: the change id must be a non-empty str, got {_given(change_id)}"
                )
            )
        try:
            check_name(change_id, f"{where}: the change id")
        except ConfigError as exc:
            raise self.poison(exc) from None

    def _recorded_after(self, pos: str) -> bool:
        """Whether anything is recorded at a position after ``pos`` in its scope or in an
        enclosing one (positions of sibling gather branches do not count)."""
        here = _pos_key(pos)
        return any(_later(_pos_key(q), here) for q in self.history)

    # -- signals -------------------------------------------------------------------------

    def wait_for_signal(self, name: Any, timeout_s: Any, default: Any) -> Generator[Op, Any, Any]:
        """``ctx.wait_for_signal(name, timeout_s, default)`` at the next position p.

        Recorded ``ok`` at p: its signal's data (or ``default`` after a recorded timeout),
        with no I/O. Otherwise the oldest unconsumed signal of ``name`` is taken (a
        :class:`TakeSignal`, idempotent per position) and recorded ``ok`` at p; with none,
        past the deadline (recorded at p by the first arrival: now + ``timeout_s``) a
        timeout is recorded and ``default`` returned; else a ``waiting`` record (the
        first time) goes with the park, and the run parks until a signal of ``name`` or
        the deadline wakes it.
        """
        self.guard_replay()
        self.check_dropped()
        if not isinstance(name, str) or not name:
            raise self.poison(
                ConfigError(
                    f"ctx.wait_for_signal: the signal name must be a non-empty str, got"
                    f" {name!r:.300}"
                )
            )
        try:
            check_name(name, "ctx.wait_for_signal: the signal name")
        except ConfigError as exc:
            raise self.poison(exc) from None
        # A wait reached before keeps its recorded deadline: its timeout_s is not looked
        # at, so one computed from the wall clock (negative after the deadline) is fine.
        reached = self.history.get(self.scope().peek())
        if (
            (reached is None or reached.kind != SIGNAL or reached.status not in (OK, WAITING))
            and timeout_s is not None
            and (
                isinstance(timeout_s, bool)
                or not isinstance(timeout_s, (int, float))
                or not 0 <= timeout_s < SIGNAL_TIMEOUT_S_MAX
            )
        ):
            raise self.poison(
                ConfigError(
                    f"ctx.wait_for_signal({name!r}): timeout_s must be None (wait for ever)"
                    f" or a number of seconds from 0 to {SIGNAL_TIMEOUT_S_MAX:,.0f}, got"
                    f" {timeout_s!r:.100}, e.g. timeout_s=86400 for a day. The run is blocked;"
                    " fix the code, then resume it."
                )
            )
        scope = self.scope()
        pos = scope.take()
        rname, digest = _signal_wait_name(name), _signal_digest(name)
        rec = self.recorded(pos, SIGNAL, rname, digest)
        if rec is not None and rec.status == OK:
            return _signal_value(self, rec, default)
        self.live(pos)  # nothing recorded, or a wait in progress: it goes on live
        deadline: float | None
        if rec is not None and rec.status == WAITING:
            deadline, since = _waiting_deadline(self, rec), rec.started_at
        else:
            since = self.clock.time()
            deadline = None if timeout_s is None else since + float(timeout_s)
        # The take may wait out a failing store: other code on this scope meanwhile would
        # be concurrent use outside ctx.gather (see Scope), as for a live step.
        scope.busy = f"wait_for_signal {pos} {name!r}"
        try:
            found: tuple[int, str] | None = yield TakeSignal(name, pos)
        finally:
            scope.busy = None
        now = self.clock.time()
        if found is not None:
            seq, data = found
            try:
                value = codec.loads(data)
                text = codec.dumps({"seq": seq, "data": value}, f"signal {name!r}")
            except SerializationError as exc:
                raise self.poison(
                    SerializationError(
                        f"position {pos}: signal {name!r} #{seq} cannot be decoded ({exc});"
                        " the run is blocked until the signals row is repaired"
                    )
                ) from None
            self.pending.append(
                StepRecord(pos, SIGNAL, rname, digest, OK, text, started_at=since, finished_at=now)
            )
            return codec.loads(text)["data"]
        if deadline is not None and now >= deadline:
            self.pending.append(
                StepRecord(
                    pos,
                    SIGNAL,
                    rname,
                    digest,
                    OK,
                    _TIMED_OUT,
                    started_at=since,
                    finished_at=now,
                )
            )
            return default
        if rec is None:  # the first arrival records what it waits for, and until when
            text = codec.dumps({"deadline": deadline}, f"signal {name!r} wait")
            self.pending.append(
                StepRecord(pos, SIGNAL, rname, digest, WAITING, text, started_at=since)
            )
        why = signal_park_reason(name, since, deadline)
        raise self.park(Parked(SIGNAL, deadline, wait_signal=name, detail=why))

    # -- approvals -----------------------------------------------------------------------

    def request_approval(
        self, action: Any, args: Any, timeout_s: Any, on_timeout: Any
    ) -> Generator[Op, Any, Decision]:
        """``ctx.request_approval(action, args, timeout_s=, on_timeout=)`` at the next
        position p (see ``Context.request_approval``).

        Recorded ``ok`` at p: the recorded decision, with no I/O. Nothing recorded: a
        ``waiting`` record (requested_at, expires_at) goes with the park, which writes the
        request's ``approvals`` row, and the run parks. ``waiting``: the store is asked
        for the decision (a :class:`ReadDecision`; it takes the expiry itself when due),
        recorded ``ok`` at p when there is one, else the run parks again. An expiry then
        takes the ``on_timeout`` branch, the same on every replay.
        """
        self.guard()
        self.check_dropped()
        try:
            action = check_action(action)
            check_on_timeout(action, timeout_s, on_timeout)
            args_text = canonical_args(action, args)
        except ConfigError as exc:
            raise self.poison(exc) from None
        digest = hashlib.sha256(args_text.encode("utf-8")).hexdigest()
        pos = self.take()
        rname = f"{APPROVAL_NAME_PREFIX}{action}"
        rec = self.recorded(pos, APPROVAL, rname, digest)
        if rec is not None and rec.status == OK:
            decision = _read_record(self, rec, recorded_decision)
        else:
            self.live(pos)  # nothing recorded, or a wait in progress: it goes on live
            decision = yield from self._await_decision(pos, rec, action, args, digest, timeout_s)
        if decision.outcome != EXPIRED or on_timeout == "reject":
            return decision
        if on_timeout == "cancel":
            self._cancel_on_expiry(pos, action)
            return decision  # only inside a saga's compensation: the halt waits
        value = yield from self.step(f"on_timeout:{action}", on_timeout, (), {})
        expired: Decision = dataclasses.replace(decision, value=value)
        return expired

    def _await_decision(
        self,
        pos: str,
        rec: StepRecord | None,
        action: str,
        args: Any,
        digest: str,
        timeout_s: float | None,
    ) -> Generator[Op, Any, Decision]:
        """The live part of a request: park on it, or record the decision it got."""
        rname = f"{APPROVAL_NAME_PREFIX}{action}"
        held: tuple[StepRecord, ...] = ()
        if rec is None:
            requested = self.clock.time()
            expires = None if timeout_s is None else requested + float(timeout_s)
            text = waiting_json(requested, expires)
            # Held for the park (see ``park``), never in ``pending``: in a gather branch
            # the siblings go on writing, and this record riding with one of their writes
            # (the park then never coming: a crash, a sibling's failure caught by the
            # workflow) would leave a request with no approvals row, blocking the replay.
            held = (StepRecord(pos, APPROVAL, rname, digest, WAITING, text, started_at=requested),)
        else:
            requested, expires = _read_record(self, rec, waiting_times)
        req = ApprovalRequest(pos, action, args_json(args), digest, requested, expires)
        if rec is not None:
            # The driver may run other code while the store answers (an async retry's
            # pause): the scope is busy, so concurrent use of it is caught as for a step.
            scope = self.scope()
            scope.busy = f"approval request {pos} {rname!r}"
            try:
                row = yield ReadDecision(pos)
            finally:
                scope.busy = None
            if row is None:
                # Written with the request's park, in one transaction: only a hand-edited
                # journal lacks it. Nobody could decide the request, so the run is blocked.
                raise self.poison(
                    SerializationError(
                        f"position {pos} {rname!r}: the run waits on approval request {pos},"
                        " but the approvals table has no row for it (deleted by hand?); the"
                        " run is blocked until the row is restored from a backup"
                    )
                )
            if row.digest != digest:
                # Written with this record's digest, in one transaction: only a hand edit
                # makes them differ, and a decision taken on the row's action and
                # arguments must not be carried over to this one.
                raise self.poison(
                    SerializationError(
                        f"position {pos} {rname!r}: the run waits on approval request {pos}"
                        f" with digest {digest[:12]}..., but its approvals row holds digest"
                        f" {row.digest[:12]}... (action {row.action!r:.80}); the row was"
                        " edited by hand, so no decision on it is taken and the run is"
                        " blocked until the row is restored from a backup"
                    )
                )
            if row.outcome is not None:
                decision: Decision = row.decision()
                self.pending.append(
                    StepRecord(
                        pos,
                        APPROVAL,
                        rname,
                        digest,
                        OK,
                        decision_json(row),
                        started_at=requested,
                        finished_at=self.clock.time(),
                    )
                )
                return decision
        why = approval_park_reason(action, digest, requested, expires)
        parked = Parked(APPROVAL, expires, detail=why, approval=req)
        parked.records = held
        raise self.park(parked)

    def _cancel_on_expiry(self, pos: str, action: str) -> None:
        """``on_timeout="cancel"``: the run is cancelled at the next position (a halt
        marker recorded there, or replayed from there), so the cancel latch applies."""
        self.request_halt(
            Cancelled(
                f"run {self.run_id!r}: approval request {pos} ({action!r}) expired and its"
                " on_timeout is 'cancel', so the run is cancelled",
                f"approval {action!r} expired",
            )
        )
        nxt = self.take()  # a halt recorded there is raised by take
        if nxt in self.history:
            raise self.poison(
                NonDeterminism(
                    f"step {nxt}: history has {self.history[nxt].name!r} after approval"
                    f" request {pos} expired, where on_timeout='cancel' cancels the run; the"
                    " code no longer matches this run's history and the run is blocked"
                )
            )
        self.live(nxt)

    # -- steps ---------------------------------------------------------------------------

    def step(
        self, name: Any, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Generator[Op, Any, Any]:
        """Replay or execute one step (see ``Context.step``)."""
        self.guard_replay()
        if not isinstance(name, str) or not name:
            raise self.poison(
                ConfigError(
                    f"ctx.step: the step name must be a non-empty str, got {_given(name)}; call"
                    " ctx.step('name', fn, *args)"
                )
            )
        if not callable(fn):
            raise self.poison(
                ConfigError(f"ctx.step({name!r}, ...): {fn_text(fn)} is not callable")
            )
        try:
            check_name(name, "ctx.step: the step name")
        except ConfigError as exc:
            raise self.poison(exc) from None
        sig = signature_of(fn)
        scope = self.scope()
        pos = scope.take()
        try:
            digest = codec.digest(name, args, kwargs, self.codec_version, self.item_hashes)
        except SerializationError as exc:
            raise self.poison(exc) from None
        rec = self.recorded(pos, STEP, name, digest, (fn, args, kwargs))
        if rec is not None and rec.status == OK:
            return _decode(self, rec.output, sig, pos, name)
        if rec is not None and rec.status == FAILED:
            raise StepFailed(name, pos, rec.error_type or "Exception", rec.error_message or "")
        if rec is None:
            self.live(pos)  # nothing recorded: the step would go live (a halt lands here)
        elif self.checking:
            # An intent: the step would run (or reconcile) with its key. A halt waits for
            # the next position: the effect in flight completes under its key first.
            raise self.latch(ReplayEnd(pos))
        # Its inputs are kept with its records (built only here: replay never pays for it).
        self.manifests[pos] = inputs.build(args, kwargs, self.known_blobs, self.item_hashes)
        # Live from here on, and the driver may run other code meanwhile: the scope is
        # busy until this step is recorded (a replayed step never yields, so it never is).
        scope.busy = f"step {pos} {name!r}"
        try:
            return (yield from self._live(pos, name, digest, fn, args, kwargs, sig, rec))
        finally:
            scope.busy = None

    def _live(
        self,
        pos: str,
        name: str,
        digest: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        sig: StepSignature,
        rec: StepRecord | None,
        attempts: Callable[..., Generator[Any, Any, Any]] | None = None,
    ) -> Generator[Op, Any, Any]:
        """Execute a step that has no result recorded (``rec`` is its intent, if any);
        ``attempts`` makes its calls (``_attempts``, or a streamed step's)."""
        key = idempotency_key(self.run_id, self.incarnation, pos)
        call_kwargs = dict(kwargs)
        if sig.takes_key:
            call_kwargs["idempotency_key"] = key
        if sig.takes_token:
            call_kwargs["fencing_token"] = self.token
        started = self.clock.time()
        # Executions started before a crash (counted by the intent): they are attempts too.
        crashed = 0 if rec is None else rec.attempts
        if rec is not None:  # an intent without a result: the effect is in doubt
            reconciled = yield from self._doubt(pos, name, digest, key, sig, started, rec)
            if reconciled is not NOT_DONE:
                return reconciled
        self.fault(pos, name, "before", sig)
        pending = self.take_pending()
        started_data = {"name": name, "attempt": crashed + 1, "key": key}
        self.events.append(self.step_event(STEP_STARTED, pos, started_data))
        if sig.options.effect:
            # A re-execution rewrites the intent with one more execution started.
            intent = StepRecord(pos, STEP, name, digest, INTENT, attempts=crashed + 1)
            pending.append(self._with_inputs(intent.replace(started_at=started)))
        if pending:
            # step.started rides with the intent: no commit of its own.
            yield Write(pending, self.take_events())
        run = self._attempts if attempts is None else attempts
        return (
            yield from run(pos, name, digest, key, fn, args, call_kwargs, sig, started, crashed)
        )

    def _doubt(
        self,
        pos: str,
        name: str,
        digest: str,
        key: str,
        sig: StepSignature,
        started: float,
        intent: StepRecord,
    ) -> Generator[Op, Any, Any]:
        opts = sig.options
        if opts.reconcile is not None:
            info = CurrentStep(self.run_id, pos, key, intent.attempts, self.token)
            out: Outcome = yield Call(
                opts.reconcile,
                (key,),
                {},
                opts.timeout_s,
                signature_of(opts.reconcile).is_async,
                info,
            )
            # A reconcile that reported usage (it asked a model) spent it for real.
            yield from self.charge(pos, f"r{intent.attempts}", intent.attempts, out.usage)
            if out.error is not None:
                self.in_doubt = (
                    f"step {pos} {name!r}: reconcile({key!r}) raised"
                    f" {type_name(out.error)}: {out.error}"
                )
                raise self.latch(Parked("in_doubt", None))
            if out.value is not NOT_DONE:
                return (
                    yield from self._record_ok(
                        pos, name, digest, out.value, sig, intent.attempts, started, out.usage
                    )
                )
            return NOT_DONE
        age_s = started - intent.started_at
        if sig.takes_key and opts.dedupe_window_s is not None and age_s > opts.dedupe_window_s:
            # The receiver has forgotten the key by now: a retry with it is not safe.
            self.in_doubt = (
                f"step {pos} {name!r} was in flight {age_s:,.0f} s ago, longer than the"
                f" receiver remembers keys (dedupe_window_s={opts.dedupe_window_s:g}), so a"
                f" retry with key {key!r} could repeat the effect. Check the receiving"
                f" system, then `{command('retry', self.run_id)}` or"
                f" `{command('skip', self.run_id, options='--output JSON')}`."
            )
            raise self.latch(Parked("in_doubt", None))
        if sig.takes_key or opts.on_doubt == "retry":
            return NOT_DONE
        self.in_doubt = (
            f"step {pos} {name!r} was in flight when its process died: its effect may or"
            " may not have happened, and it takes no idempotency_key and has no reconcile."
            f" Check the receiving system for key {key!r}, then"
            f" `{command('retry', self.run_id)}` to run it again or"
            f" `{command('skip', self.run_id, options='--output JSON')}` to record what it"
            " returned."
        )
        raise self.latch(Parked("in_doubt", None))

    def _attempts(
        self,
        pos: str,
        name: str,
        digest: str,
        key: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        sig: StepSignature,
        started: float,
        crashed: int = 0,
    ) -> Generator[Op, Any, Any]:
        opts = sig.options
        attempt = 0
        spent = Usage()  # failed attempts' spend is real spend: it adds up
        while True:
            attempt += 1
            self.guard()
            if attempt > 1 and self.halt_requested is not None:
                # A retry is a new call: a cancel asked for while the failed attempt ran or
                # during the backoff, or a budget that attempt crossed, lands here
                # (recorded at this position, over its intent), not after the remaining
                # attempts, which would run live work under the cancel, spend past the
                # budget, and let the step's failure end the run ``failed`` for the wrong
                # reason. A saga's compensation (not delivered to) keeps its retries.
                self.live(pos)
            info = CurrentStep(self.run_id, pos, key, crashed + attempt, self.token)
            out: Outcome = yield Call(fn, args, kwargs, opts.timeout_s, sig.is_async, info)
            _add_usage(spent, out.usage)
            # Real spend reaches the ledger now, before the "effect" window: a crash before
            # the result is recorded re-runs the call, and both calls are counted.
            yield from self.charge(pos, f"a{crashed + attempt}", crashed + attempt, out.usage)
            if out.error is None:
                if sig.return_hint is None:
                    warn_untyped_result(name, fn, out.value)
                return (
                    yield from self._record_ok(
                        pos, name, digest, out.value, sig, crashed + attempt, started, spent
                    )
                )
            exc = out.error
            if opts.retryable(exc, attempt):
                yield from self._retry(pos, name, key, exc, sig, attempt, crashed)
                continue
            yield from self._record_failed(
                pos, name, digest, key, exc, sig, crashed + attempt, started, spent
            )

    def _retry(
        self,
        pos: str,
        name: str,
        key: str,
        exc: Exception,
        sig: StepSignature,
        attempt: int,
        crashed: int,
    ) -> Generator[Op, Any, None]:
        """Record that attempt ``attempt`` failed and will be retried, then back off."""
        opts = sig.options
        delay_s = opts.delay_s(key, attempt)
        retried = {
            "name": name,
            "attempt": crashed + attempt,
            "error_type": type_name(exc),
            "error_message": storable_text(describe_error(exc), ERROR_MESSAGE_CHARS_MAX),
            "delay_s": delay_s,
            # The last attempt this execution may make, counted like ``attempt``.
            "attempts_max": crashed + opts.retries + 1,
        }
        event = self.step_event(STEP_RETRIED, pos, retried, f":{crashed + attempt}")
        # Committed now, before the backoff, so a reader sees the retry while it
        # waits and runs (`runs why`: "attempt 2 of 5 after ..."). The failure path
        # only: a step that succeeds first time pays no commit for its events.
        yield Write(self.take_pending(), [*self.take_events(), event])
        yield Wait(delay_s)

    def _record_failed(
        self,
        pos: str,
        name: str,
        digest: str,
        key: str,
        exc: Exception,
        sig: StepSignature,
        attempts: int,
        started: float,
        spent: Usage,
    ) -> Generator[Op, Any, NoReturn]:
        """Record the step's final failure and raise it as ``StepFailed``."""
        now = self.clock.time()
        rec = StepRecord(
            pos,
            STEP,
            name,
            digest,
            FAILED,
            None,
            type_name(exc),
            storable_text(describe_error(exc), ERROR_MESSAGE_CHARS_MAX),
            attempts,
            started,
            now,
            *_usage_cols(spent),
        )
        self.fault(pos, name, "effect", sig)
        failed = {
            "name": name,
            "attempt": rec.attempts,
            "duration_ms": _ms(now - started),
            "key": key,
            "error_type": rec.error_type,
            "error_message": rec.error_message,
        }
        events = [*self.take_events(), self.step_event(STEP_FAILED, pos, failed)]
        yield Write([*self.take_pending(), self._with_inputs(rec)], events)
        self.fault(pos, name, "recorded", sig)
        raise StepFailed(name, pos, rec.error_type or "", rec.error_message or "") from exc

    def _record_ok(
        self,
        pos: str,
        name: str,
        digest: str,
        value: Any,
        sig: StepSignature,
        attempts: int,
        started: float,
        usage: Usage,
    ) -> Generator[Op, Any, Any]:
        try:
            text = codec.dumps(value, f"step {pos} {name!r} output", STEP_OUTPUT_BYTES_MAX)
        except SerializationError as exc:
            raise self.poison(
                SerializationError(
                    f"{exc}. The run is blocked: change the step to return storable data,"
                    " then resume it"
                )
            ) from None
        self.fault(pos, name, "effect", sig)
        stored, blob = inputs.output_ref(text, self.output_inline_max)
        rec = StepRecord(
            pos,
            STEP,
            name,
            digest,
            OK,
            stored,
            None,
            None,
            attempts,
            started,
            self.clock.time(),
            *_usage_cols(usage),
        )
        done = {
            "name": name,
            "attempt": attempts,
            "duration_ms": _ms((rec.finished_at or started) - started),
            "key": idempotency_key(self.run_id, self.incarnation, pos),
            "tokens": rec.usage_tokens,
            "cost_usd": rec.usage_cost_usd,
        }
        if usage.split:
            done.update(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens)
        events = [*self.take_events(), self.step_event(STEP_COMPLETED, pos, done)]
        rec = self._with_inputs(rec)
        if blob is not None:
            rec = rec.replace(blobs=(*rec.blobs, blob))
        yield Write([*self.take_pending(), rec], events)
        self.fault(pos, name, "recorded", sig)
        return _decode(self, text, sig, pos, name)

    def _with_inputs(self, rec: StepRecord) -> StepRecord:
        """``rec`` with its step's inputs manifest, and the blobs not yet sent (the first
        record of a position carries them; a later one, e.g. the result after its
        intent, only the manifest)."""
        # A result or failure is the position's last record: its manifest can go.
        m = (
            self.manifests.get(rec.position)
            if rec.status == INTENT
            else self.manifests.pop(rec.position, None)
        )
        if m is None:
            return rec
        blobs, m.blobs = tuple(m.blobs), []
        return rec.replace(inputs=m.text, blobs=blobs)

    # -- streamed steps ------------------------------------------------------------------

    def step_stream(
        self,
        name: Any,
        fn: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        assemble: Callable[[list[Any]], Any] | None,
        replay: Callable[[Any], Any] | None,
        owner: Owner,
        in_async: bool,
    ) -> Generator[Op | Begun | Deliver, Any, Any]:
        """Replay or execute one streamed step (see ``Context.step_stream``): it yields
        :class:`Begun` once its position is taken, then a :class:`Deliver` per chunk (the
        reply :data:`STOP` ends it early), and returns the recorded value."""
        self.guard_replay()
        if not isinstance(name, str) or not name:
            raise self.poison(
                ConfigError(
                    f"ctx.step_stream: the step name must be a non-empty str, got {_given(name)}"
                )
            )
        for what, f in (("fn", fn), ("assemble", assemble), ("replay", replay)):
            if f is not None and not callable(f):
                raise self.poison(
                    ConfigError(f"ctx.step_stream({name!r}, ...): {what}={f!r} is not callable")
                )
        try:
            check_name(name, "ctx.step_stream: the step name")
        except ConfigError as exc:
            raise self.poison(exc) from None
        sig = dataclasses.replace(signature_of(fn), return_hint=None)
        if not in_async and (sig.is_async or _is_asyncgen(fn)):
            raise self.poison(
                ConfigError(
                    f"ctx.step_stream({name!r}, ...): {fn!r} is async: stream it from an async"
                    " workflow (async def, `async for chunk in ctx.step_stream(...)`), or pass"
                    " a sync generator function"
                )
            )
        scope = self.scope()
        pos = scope.take()
        try:
            digest = codec.digest(name, args, kwargs, self.codec_version, self.item_hashes)
        except SerializationError as exc:
            raise self.poison(exc) from None
        rec = self.recorded(pos, STEP, name, digest, (fn, args, kwargs))
        if rec is None:
            self.live(pos)
        elif rec.status not in (OK, FAILED) and self.checking:
            raise self.latch(ReplayEnd(pos))
        if rec is None or rec.status not in (OK, FAILED):
            # Its inputs are kept with its records (built only here: replay never pays).
            self.manifests[pos] = inputs.build(args, kwargs, self.known_blobs, self.item_hashes)
        # Open from here until the stream ends: a recording call of this scope meanwhile
        # ends it first (Scope.take), so positions never depend on where the loop is.
        scope.busy = f"streamed step {pos} {name!r}"
        scope.stream = owner
        try:
            if (yield Begun(pos)) is STOP:
                if rec is None:  # never iterated: nothing was consumed, nothing called
                    return (
                        yield from self._stream_record(
                            pos, name, digest, [], assemble, sig, 1, self.clock.time(), Usage()
                        )
                    )
                if rec.status != OK:
                    return None
            if rec is not None and rec.status == OK:
                value = _decode(self, rec.output, sig, pos, name)
                yield from self._stream_replayed(pos, name, value, replay)
                return value
            if rec is not None and rec.status == FAILED:
                raise StepFailed(name, pos, rec.error_type or "Exception", rec.error_message or "")

            def attempts(*a: Any) -> Generator[Any, Any, Any]:
                return self._stream_attempts(*a, assemble=assemble, in_async=in_async)

            out = yield from self._live(pos, name, digest, fn, args, kwargs, sig, rec, attempts)
            if isinstance(out, _Streamed):
                return out.value
            # Reconciled (an effect in doubt): the recorded value is streamed like a replay.
            yield from self._stream_replayed(pos, name, out, replay)
            return out
        finally:
            scope.stream = None
            scope.busy = None

    def _stream_replayed(
        self, pos: str, name: str, value: Any, replay: Callable[[Any], Any] | None
    ) -> Generator[Deliver, Any, None]:
        """Hand the caller the chunks ``replay(value)`` rebuilds (default: the items of
        the recorded list), until the caller stops."""
        try:
            chunks = iter(value if replay is None else replay(value))
        except Exception as exc:
            raise self.poison(_replay_error(pos, name, exc)) from exc
        index = 0
        while True:
            try:
                chunk = next(chunks, END)
            except Exception as exc:
                raise self.poison(_replay_error(pos, name, exc)) from exc
            if chunk is END or (yield Deliver(chunk, index, None)) is STOP:
                return
            index += 1

    def _stream_attempts(
        self,
        pos: str,
        name: str,
        digest: str,
        key: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        sig: StepSignature,
        started: float,
        crashed: int,
        *,
        assemble: Callable[[list[Any]], Any] | None,
        in_async: bool,
    ) -> Generator[Op | Deliver, Any, Any]:
        """The attempts of a streamed step: each calls ``fn`` and pulls its chunks, handing
        each to the caller as it arrives; the assembled chunks are recorded at the end.
        An attempt that fails before its first chunk reached the caller is retried per
        the step's options (a fresh series, the same key); once the caller has a chunk,
        a failure is final: a chunk cannot be taken back from the caller."""
        opts = sig.options
        attempt = 0
        spent = Usage()
        while True:
            attempt += 1
            self.guard()
            if attempt > 1 and self.halt_requested is not None:
                self.live(pos)
            n = crashed + attempt
            info = CurrentStep(self.run_id, pos, key, n, self.token)
            deadline = None if opts.timeout_s is None else self.clock.time() + opts.timeout_s
            used = Usage()
            opened: Outcome = yield Call(
                fn, args, kwargs, opts.timeout_s, sig.is_async or _is_asyncgen(fn), info
            )
            _add_usage(used, opened.usage)
            error = opened.error
            chunks: list[Any] = []
            stopped = False
            if error is None:
                it, aio = self._chunks_of(pos, name, opened.value, in_async)
                pull = anext_chunk if aio else next_chunk
                while True:
                    # A stale owner (lease lost, the run stopped) pulls no more chunks.
                    self.guard(halt=False)
                    out: Outcome = yield Call(pull, (it,), {}, _left(self, deadline), aio, info)
                    _add_usage(used, out.usage)
                    if out.error is not None:
                        error = out.error
                        break
                    if out.value is END:
                        break
                    chunk = out.value
                    if len(chunks) >= STREAM_CHUNKS_MAX:
                        yield Call(aclose_chunks if aio else close_chunks, (it,), {}, None, aio)
                        raise self.poison(_too_many_chunks(pos, name))
                    if assemble is None:  # recorded as a list: the caller gets it as replayed
                        chunk = self._normalized(pos, name, chunk)
                    chunks.append(chunk)
                    if (yield Deliver(chunk, len(chunks) - 1, info)) is STOP:
                        stopped = True
                        yield Call(aclose_chunks if aio else close_chunks, (it,), {}, None, aio)
                        break
            _add_usage(spent, used)
            # Real spend reaches the ledger before the result is recorded (see _attempts).
            yield from self.charge(pos, f"a{n}", n, used)
            if error is None or stopped:
                return _Streamed(
                    (
                        yield from self._stream_record(
                            pos, name, digest, chunks, assemble, sig, n, started, spent
                        )
                    )
                )
            if not chunks and opts.retryable(error, attempt):
                yield from self._retry(pos, name, key, error, sig, attempt, crashed)
                continue
            yield from self._record_failed(pos, name, digest, key, error, sig, n, started, spent)

    def _stream_record(
        self,
        pos: str,
        name: str,
        digest: str,
        chunks: list[Any],
        assemble: Callable[[list[Any]], Any] | None,
        sig: StepSignature,
        attempts: int,
        started: float,
        spent: Usage,
    ) -> Generator[Op, Any, Any]:
        """Record ``assemble(chunks)`` (default: the list) as the streamed step's result."""
        if assemble is None:
            value: Any = chunks
        else:
            try:
                value = assemble(chunks)
            except Exception as exc:
                raise self.poison(
                    ConfigError(
                        f"streamed step {pos} {name!r}: assemble(chunks) raised"
                        f" {type_name(exc)}: {exc}; the run is blocked until assemble is fixed"
                        " (the stream runs again on resume)"
                    )
                ) from exc
        return (yield from self._record_ok(pos, name, digest, value, sig, attempts, started, spent))

    def _chunks_of(self, pos: str, name: str, value: Any, in_async: bool) -> tuple[Any, bool]:
        """The iterator over what the streamed step's function returned, and whether it
        is async (an async iterator is pulled on the loop, a sync one in a step thread
        of an async workflow)."""
        if in_async and hasattr(value, "__aiter__"):
            return value.__aiter__(), True
        if hasattr(value, "__iter__") and not isinstance(value, (str, bytes, dict)):
            return iter(value), False
        hint = " (an async iterator: use an async workflow)" if hasattr(value, "__aiter__") else ""
        raise self.poison(
            ConfigError(
                f"streamed step {pos} {name!r}: the function returned {type(value).__name__}"
                f"{hint}, not an iterator of chunks; pass a generator function (or a function"
                " returning an iterable; in an async workflow also an async generator)"
            )
        )

    def _normalized(self, pos: str, name: str, chunk: Any) -> Any:
        """``decode(encode(chunk))``: what a replay of the default record hands back."""
        try:
            return codec.loads(codec.dumps(chunk, f"streamed step {pos} {name!r} chunk"))
        except SerializationError as exc:
            raise self.poison(
                SerializationError(
                    f"{exc}. The run is blocked: yield storable chunks (or pass assemble= to"
                    " record something else), then resume it"
                )
            ) from None


def _ms(seconds: float | None) -> float:
    """Seconds as milliseconds, rounded to a microsecond (never negative: a clock that
    stepped back reads as 0)."""
    return round(max(0.0, seconds or 0.0) * 1000, 3)


def _add_usage(total: Usage, more: Usage) -> None:
    if more.reported:
        total.tokens += more.tokens
        total.cost_usd += more.cost_usd
        total.input_tokens += more.input_tokens
        total.output_tokens += more.output_tokens
        total.split = total.split or more.split
        total.reported = True


def _usage_cols(usage: Usage) -> tuple[int | None, float | None]:
    if not usage.reported:
        return None, None
    return usage.tokens, usage.cost_usd


def _decode(core: RunCore, text: str | None, sig: StepSignature, pos: str, name: str) -> Any:
    try:
        text = inputs.resolve_output(text, core.fetch_blobs)
    except SerializationError as exc:
        # A missing blob, or one whose bytes no longer match its sha256: the recorded
        # output is unknown, so the run stops here, blocked and unchanged, never failed.
        raise core.poison(
            SerializationError(
                f"step {pos} {name!r}: its recorded output cannot be read: {exc}. The run is"
                " blocked and nothing recorded is changed: restore the blob's row from a"
                f" backup, then `{command('retry', core.run_id)}` replays it from there"
            )
        ) from exc
    try:
        return codec.loads(text or "null", sig.return_hint)
    except SerializationError as exc:
        raise core.poison(
            SerializationError(
                f"step {pos} {name!r}: the recorded output cannot be decoded as the return"
                f" annotation {sig.return_hint!r} ({exc}); the run is blocked until the"
                " annotation matches what was recorded (or the row is repaired)"
            )
        ) from exc


@dataclass(frozen=True, slots=True)
class _Streamed:
    """A streamed step's recorded value, its chunks already handed to the caller."""

    value: Any


def _is_asyncgen(fn: Any) -> bool:
    """Whether ``fn`` is an async generator function (called on the loop, no thread)."""
    return inspect.isasyncgenfunction(fn) or inspect.isasyncgenfunction(
        getattr(fn, "__call__", None)  # noqa: B004
    )


def _left(core: RunCore, deadline: float | None) -> float | None:
    """What is left of an attempt's ``timeout_s`` (at least a millisecond)."""
    if deadline is None:
        return None
    return max(0.001, deadline - core.clock.time())


def _too_many_chunks(pos: str, name: str) -> ConfigError:
    return ConfigError(
        f"streamed step {pos} {name!r} yielded more than {STREAM_CHUNKS_MAX:,} chunks"
        " (STREAM_CHUNKS_MAX) in one attempt; every chunk is held until the stream is"
        " recorded. Yield larger chunks, or split the stream into several steps. The run is"
        " blocked until the code changes."
    )


def _replay_error(pos: str, name: str, exc: Exception) -> ConfigError:
    return ConfigError(
        f"streamed step {pos} {name!r}: rebuilding its chunks from the record raised"
        f" {type_name(exc)}: {exc}; the run is blocked until replay= accepts what was"
        " recorded (or the row is repaired)"
    )


def _concurrent_use(scope: Scope, busy: str) -> str:
    return (
        f"position {scope.prefix}{scope.next} was asked for while {busy} of the same scope"
        " is still running: the context is used concurrently outside ctx.gather"
        " (asyncio.gather, asyncio.create_task or threads around ctx.step), so positions"
        " and idempotency keys would depend on timing and a replay could not match. For"
        " parallel steps use ctx.gather: `await ctx.gather(ctx.step(...), ctx.step(...))`"
        " gives each branch its own positions. The run is blocked; fix the code, then"
        " resume it."
    )


def _gather_mismatch(pos: str, rec: StepRecord, shape: list[Any]) -> str:
    asked = _gather_text(shape)
    if rec.kind == GATHER:
        had = _gather_text(codec.loads(rec.output or "null"))
    else:
        had = repr(rec.name)
    return (
        f"step {pos}: history has {had}, code asked for {asked}. The code no longer matches"
        " this run's history, and no branch of the gather ran: revert the change, or let old"
        " runs finish on workers that serve their version first. The run is blocked; nothing"
        " recorded was lost, and it resumes once the code matches."
    )


def _gather_text(shape: Any) -> str:
    try:
        arity, labels = shape
        return f"a gather of {arity} branches {list(labels)!r}"
    except (TypeError, ValueError):
        return f"a gather {shape!r}"


def _pos_key(pos: str) -> tuple[int, ...]:
    return tuple(int(p) for p in pos.split("."))


def _later(q: tuple[int, ...], p: tuple[int, ...]) -> bool:
    """Whether position ``q`` comes at or after ``p`` in p's scope or an enclosing one.

    Positions alternate: scope index, branch, scope index, ... At each enclosing level
    (even index j) a larger index is later; an equal index with the same branch goes one
    level deeper; another branch is a sibling, which does not count."""
    for j in range(0, len(p), 2):
        if j >= len(q):
            return False  # an enclosing gather's own marker: before p
        if q[j] != p[j]:
            return q[j] > p[j]
        if j + 1 == len(p):
            return True  # p itself, or a position nested under it
        if j + 1 >= len(q) or q[j + 1] != p[j + 1]:
            return False  # the gather's marker, or a sibling branch
    return False


def _given(value: object) -> str:
    """What was passed where a name (or a Budget) belongs, for a message that leaves the
    process: a str as its repr (cut to 100 characters), anything else by
    :func:`fn_text`, never its repr (a ``functools.partial`` passed by mistake lists the
    API key bound into it)."""
    return repr(value[:100]) if isinstance(value, str) else fn_text(value)


def _patch_digest(change_id: str) -> str:
    return codec.digest("durably.patched", [change_id], {})


GATHER_NAME = "durably.gather"
COMPENSATE_NAME = "durably.compensate"

_SIGNAL_WAIT = "durably.wait_for_signal"
_TIMED_OUT = '{"timeout":true}'


def _signal_wait_name(name: str) -> str:
    """The record name of a wait for signal ``name``: it shows in NonDeterminism messages
    ("history has 'wait_for_signal:approve'...") and in ``runs show``."""
    return f"wait_for_signal:{name}"


def _signal_digest(name: str) -> str:
    return codec.digest(_SIGNAL_WAIT, [name], {})


def _signal_value(core: RunCore, rec: StepRecord, default: Any) -> Any:
    """What a recorded wait returns: the signal's data, or ``default`` after a timeout."""
    try:
        out = codec.loads(rec.output or "null")
        if isinstance(out, dict) and out.get("timeout") is True:
            return default
        if isinstance(out, dict) and "data" in out:
            return out["data"]
        raise SerializationError(f"unexpected record {rec.output!r:.200}")
    except SerializationError as exc:
        raise core.poison(
            SerializationError(
                f"position {rec.position} {rec.name!r}: the recorded signal cannot be decoded"
                f" ({exc}); the run is blocked until the row is repaired"
            )
        ) from None


def _waiting_deadline(core: RunCore, rec: StepRecord) -> float | None:
    """The deadline a ``waiting`` record holds (None: it waits without one)."""
    try:
        # The start and the deadline are printed in the park reason: NaN or a time past
        # year 9999 would crash that inside the workflow (failing the run), so both must
        # be finite and no later than the longest timeout from now.
        since = rec.started_at
        if not math.isfinite(since) or since - core.clock.time() > SIGNAL_TIMEOUT_S_MAX:
            raise TypeError(f"started_at {since!r}")
        out = codec.loads(rec.output or "null")
        deadline = out["deadline"]
        if deadline is None:
            return None
        if (
            isinstance(deadline, (int, float))
            and not isinstance(deadline, bool)
            and math.isfinite(deadline)
            and deadline - core.clock.time() <= SIGNAL_TIMEOUT_S_MAX
        ):
            return float(deadline)
        raise TypeError(f"deadline {deadline!r}")
    except (SerializationError, TypeError, KeyError) as exc:
        raise core.poison(
            SerializationError(
                f"position {rec.position} {rec.name!r}: the recorded wait cannot be decoded"
                f" ({exc}); the run is blocked until the row is repaired"
            )
        ) from None


def signal_park_reason(name: str, since: float, deadline: float | None) -> str:
    """How ``runs show`` and ``runs list`` word a run parked on a signal wait."""
    until = "no timeout" if deadline is None else f"times out at {_iso(deadline)}"
    return f"signal {name!r} since {_iso(since)} ({until})"


WAITS = "waits"
"""The park reason (``Parked.reason``, the ``run.parked`` event's kind) of a run whose
``ctx.gather`` branches parked on more than one wait at once."""


def combine_parks(parks: list[Parked]) -> Parked:
    """One park for a gather whose branches parked (nested gathers' combined parks are
    flattened): it wakes at the earliest known wake time (None when no wait has one), on
    a signal of any waited name, or on a decision of any request. A single wait stays
    itself (the run parks exactly as a top-level wait would)."""
    if len(parks) == 1:
        return parks[0]
    waits = tuple(w for p in parks for w in (p.waits or (_wait_text(p),)))
    wakes = [p.wake_at for p in parks if p.wake_at is not None]
    combined = Parked(
        WAITS,
        min(wakes) if wakes else None,
        wait_signals=tuple(dict.fromkeys(n for p in parks for n in p.wait_signals)),
        approvals=tuple(a for p in parks for a in p.approvals),
        detail=f"{len(waits)} waits: {'; '.join(waits)}",
    )
    combined.waits = waits
    combined.records = tuple(r for p in parks for r in p.records)
    return combined


def _wait_text(parked: Parked) -> str:
    if parked.detail is not None:
        return parked.detail
    if parked.wake_at is None:
        return parked.reason
    return f"{parked.reason} until {_iso(parked.wake_at)}"


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_KIND_DIGESTS = {k: codec.digest(f"durably.{k}", [], {}) for k in (NOW, RANDOM, UUID)}

SLEEP_NAME = "durably.sleep"
# Without the duration: the recorded wake time wins (see RunCore._timer).
_SLEEP_DIGEST = codec.digest(SLEEP_NAME, [], {})
TIMER = "timer"
"""The park reason (``Parked.reason``) of a timer."""

HALT_NAMES: dict[type[DurablyError], str] = {
    Cancelled: "durably.cancel",
    BudgetExceeded: "durably.budget",
}
_HALT_TYPES: dict[str, type[DurablyError]] = {v: k for k, v in HALT_NAMES.items()}


def cancelled_error(run_id: str, reason: str | None) -> Cancelled:
    """The ``Cancelled`` of a run cancelled with ``reason`` (the one message for the
    workflow, ``engine.run``, ``Handle.result`` and the worker's log)."""
    said = f": {reason}" if reason else " (no reason given)"
    return Cancelled(f"run {run_id!r} was cancelled{said}", reason)


def _halt_digest(name: str) -> str:
    return codec.digest(name, [], {})


def _read_record(core: RunCore, rec: StepRecord, read: Callable[[str | None], T_]) -> T_:
    """``read(rec.output)`` (an approval record's contents); a damaged row blocks the run."""
    try:
        return read(rec.output)
    except SerializationError as exc:
        raise core.poison(
            SerializationError(
                f"position {rec.position} {rec.name!r}: {exc}; the run is blocked until the"
                " row is repaired"
            )
        ) from None
