"""The replay core: positions, matching against history, and the records to write.

The core does no I/O. Each recording call is a generator that yields operations
(:class:`Call` a function, :class:`Write` records, :class:`Wait` a delay) to a driver and
receives their results; :mod:`durably.runtime.drive` holds the one sync and the one
async driver (``drive_sync``, ``drive_async``) under the thin ``Context``/``AsyncContext``
facades. So there is a single implementation of replay semantics for sync and async
workflows.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import inputs
from .._log import LazyLogger
from ..budget import Spend, SpendEntry, exceeded_message
from ..errors import (
    BudgetExceeded,
    Cancelled,
    ConfigError,
    DurablyError,
    HistoryTooLarge,
    LeaseLost,
    NonDeterminism,
    ReplayEnd,
    SerializationError,
    Unwind,
)
from ..journal import codec
from ..journal.events import (
    RUN_HISTORY_WARNING,
    NewEvent,
    new_event,
)
from ..journal.keys import generation_prefix, idempotency_key
from ..journal.records import FAILED, HALT, OK, WAITING, StepRecord, stored_bytes
from ..journal.text import storable_text
from ..limits import ERROR_MESSAGE_CHARS_MAX, OUTPUT_INLINE_BYTES_MAX
from ..limits import EVENTS_BUFFERED_MAX as EVENTS_BUFFERED_MAX
from ..limits import SIGNAL_TIMEOUT_S_MAX as SIGNAL_TIMEOUT_S_MAX
from ..limits import TIMER_S_MAX as TIMER_S_MAX
from ..steps import StepSignature, Usage

# Operations replaycheck.py still imports from here (its lane moves them to replay.ops).
from .ops import Charge as Charge
from .ops import Op
from .ops import ReadSpend as ReadSpend
from .ops import SetBudget as SetBudget
from .ops import Write as Write
from .park import Parked
from .scope import SCOPE as SCOPE
from .scope import Scope as Scope
from .setup import FaultHook as FaultHook
from .setup import RunSetup as RunSetup
from .slots import BlobState, BudgetState, EmitState, GatherState, HistorySize

if TYPE_CHECKING:
    pass

_log = LazyLogger("durably")

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

    def __init__(self, setup: RunSetup) -> None:
        # Built from a frozen setup (the engine's and replay-check's alike); what is
        # copied here is never set from outside (the lease view changes only through
        # lease_renewed/lose_lease).
        self.setup = setup
        self.run_id = setup.run_id
        self.clock = setup.clock
        self.history = {rec.position: rec for rec in setup.history}
        # The run's generation and what its names carry ("" for generation 0, "g3." for
        # 3): keys, event positions and dedupe names, signal consumers, request ids.
        self.generation = setup.generation
        self.gen = generation_prefix(setup.generation)
        # The generation's size, from the loaded history (no query of its own); each
        # write adds to it (count_written), each position going live checks it.
        self.size = HistorySize(
            len(setup.history),
            sum(stored_bytes(rec) for rec in setup.history),
            setup.history_warn,
            setup.history_max,
        )
        self.consumed: set[str] = set()
        self.pending: list[StepRecord] = []
        self.root = Scope(self, "")
        self.fault_hook = setup.fault_hook
        self.poisoned: DurablyError | None = None
        self.stopped: Unwind | None = None
        # Set (under the run's lock) when the engine concludes the attempt: a thread or
        # task of the framework that outlived the workflow records nothing after it.
        self.ended: str | None = None
        self.lease_deadline = setup.lease_deadline
        self.token = setup.token
        # The run's incarnation, part of every key (None for runs from before keys had one).
        self.incarnation = setup.incarnation
        self.in_doubt: str | None = None
        # The first recording call an async workflow created and dropped without awaiting
        # it (``drop``); it blocks the run at the next recording call or when the
        # workflow returns.
        self.dropped: str | None = None
        # Set by ``durably replay --check``: the first live action stops the replay.
        self.checking = setup.checking
        # Stream-only events waiting to ride with the next durable write.
        self.events: list[NewEvent] = []
        # The run's recorded prompt version and the code's, when the workflow declares one.
        self.prompt_versions = setup.prompt_versions
        # The digest rule of the run (codec.CODEC_VERSION when it was created) and the
        # hashes of the list items (messages) its steps were passed, computed once each.
        self.codec_version = setup.codec_version
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
        # Saga blocks open now (durably.saga counts them): continue_as_new inside one
        # would end the generation with its compensations forgotten.
        self.open_sagas = 0
        # One typed slot per capability that keeps state across recording calls
        # (replay/slots.py says which room acts on each).
        self.gathers = GatherState()
        self.budgets = BudgetState(setup.generation)
        self.blobs = BlobState(setup.fetch_blobs)
        self.emits = EmitState()

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
        prefix = self.scope().prefix
        if prefix:
            self.gathers.went_live.add(prefix)
        if self.checking:
            raise self.latch(ReplayEnd(pos))
        if self.budgets.arrived is not self.budgets.arrived_taken:
            self._take_arrived()
        if self.halt_requested is not None and self.halted is None and not self.compensating_here():
            raise self._deliver_halt(pos, self.halt_requested)
        size = self.size
        if size.max is not None and (size.records >= size.max[0] or size.bytes >= size.max[1]):
            # A wait in progress is counted already; a saga's compensation undoes what
            # the run did (bounded by its steps), so the limit never strands an effect.
            if pos not in self.history and not self.compensating_here():
                # Not latched: the workflow may catch it and continue as new.
                raise HistoryTooLarge(self.run_id, size.records, size.bytes, size.max)
        if size.warn is not None and not size.warned:
            if size.records >= size.warn[0] or size.bytes >= size.warn[1]:
                self._warn_history()

    def _warn_history(self) -> None:
        """The generation passed ``history_warn``: one ``run.history_warning`` event per
        generation (named by it: a later claim's is the same event, stored once; it rides
        with the next write) and a log line naming the run and how far it is."""
        size = self.size
        size.warned = True
        limit = size.max or size.warn
        assert size.warn is not None and limit is not None
        data = {
            "generation": self.generation,
            "records": size.records,
            "bytes": size.bytes,
            "warn_records": size.warn[0],
            "warn_bytes": size.warn[1],
            "max_records": None if size.max is None else size.max[0],
            "max_bytes": None if size.max is None else size.max[1],
        }
        at = self.clock.time()
        self.events.append(
            new_event(RUN_HISTORY_WARNING, None, data, at, f"{self.gen}history_warning")
        )
        _log.warning(
            "durably: run %s has %s records and %s bytes of history in generation %d"
            " (warning at %s records or %s bytes; the limit, history_max, is %s records"
            " or %s bytes): carry its state into a fresh history with"
            " ctx.continue_as_new(...) before it reaches the limit",
            self.run_id,
            f"{size.records:,}",
            f"{size.bytes:,}",
            self.generation,
            f"{size.warn[0]:,}",
            f"{size.warn[1]:,}",
            f"{limit[0]:,}",
            f"{limit[1]:,}",
        )

    def count_written(self, records: list[StepRecord]) -> None:
        """The driver writes ``records`` (a live write): add them to the generation's
        size (a position counts once, its intent and result together)."""
        size = self.size
        if size.max is None and size.warn is None:
            return
        history, counted = self.history, size.counted
        for rec in records:
            pos = rec.position
            if pos not in history and pos not in counted:
                counted.add(pos)
                size.records += 1
            size.bytes += stored_bytes(rec)

    def key(self, pos: str) -> str:
        """The idempotency key of ``pos`` in this run's current generation."""
        return idempotency_key(self.run_id, self.incarnation, pos, self.generation)

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
        self.record_marker(pos, HALT, name, _halt_digest(name), text)
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
        gather then raises one park combining them (``replay.park.combine_parks``), so
        waits in parallel branches run at the same time instead of one after another.
        """
        scope = self.scope()
        if scope is self.root or scope.member is not None:
            # (A ctx.branches branch parks the run: the framework's code around it has
            # no way to go on with the other calls and park once.)
            stop = self.latch(parked)
            if stop is parked:
                # Now the park is the attempt's end: records held for it (new approval
                # requests of gather branches) go with its write, with their rows.
                self.pending.extend(parked.records)
            return stop
        self.gathers.parks.setdefault(scope.prefix, parked)
        return parked

    def branch_parked(self) -> Parked | None:
        """The park of the gather branch the running code belongs to, if it parked."""
        prefix = self.scope().prefix
        for branch, parked in self.gathers.parks.items():
            if prefix.startswith(branch):
                return parked
        return None

    @property
    def lease_lost(self) -> bool:
        """True once the run's lease is known lost (a refused renewal or append, a passed
        deadline, or the engine giving the run back)."""
        return isinstance(self.stopped, LeaseLost)

    def lose_lease(self) -> None:
        """The run's lease is lost (a refused renewal, the owner lock gone, the engine
        giving the run back): latch the stop, so the next step does not start."""
        self.latch(LeaseLost(self.run_id, self.token))

    def token_refused(self, asked_at: float | None = None) -> Unwind:
        """A renewal or a write asked for at ``asked_at`` (default: now) was refused, the
        token being stale: latch the stop and return it for ``raise``. When this driver's
        own deadline had already passed by then (a SIGSTOP, a long pause), the reason says
        so as :meth:`guard` would, and that the token was refused: after such a pause the
        refusal and the local check race, and the reason must not depend on which of them
        ran first."""
        deadline = self.lease_deadline
        at = self.clock.time() if asked_at is None and deadline is not None else asked_at
        if self.stopped is None and deadline is not None and at is not None and at >= deadline:
            late = f"was past its lease deadline by {at - deadline:.1f} s"
            lost = LeaseLost(self.run_id, self.token, late, taken=True)
        else:
            lost = LeaseLost(self.run_id, self.token)
        # The refusal is raised even when another stop was latched first: the park of a
        # run whose token another claim raised meanwhile must end as a lost lease, never
        # re-raise the internal Parked it was recording (found by durably.chaos.dst).
        self.latch(lost)
        return lost

    def lease_renewed(self, deadline: float) -> None:
        """The lease was renewed until ``deadline`` (on the engine's clock)."""
        self.lease_deadline = deadline

    def guard(self, halt: bool = True) -> None:
        """Refuse to go on after poisoning, after a stop signal, past the lease deadline,
        or (``halt``, unless compensating) after a delivered halt (cancel, budget).

        The deadline check is local (no I/O): a process stopped past its lease (SIGSTOP, a
        long pause) may have been replaced by another owner, so it never starts another
        step on its own say-so.
        """
        self.refuse_after_end()
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
        if self.gathers.parks and (parked := self.branch_parked()) is not None:
            raise parked.with_traceback(None)
        if halt and self.halted is not None and not self.compensating_here():
            raise self.halted.with_traceback(None)

    def end(self, how: str) -> None:
        """The engine concludes the attempt (the workflow ``how``: returned, raised):
        every later recording call is refused (:meth:`refuse_after_end`)."""
        if self.ended is None:
            self.ended = (
                f"run {self.run_id!r}: a recording call came after the workflow {how} (a"
                " thread or task of the framework outlived it), so it was not run. Join"
                " the threads (await the tasks) before the workflow returns."
            )

    def refuse_after_end(self) -> None:
        """Raise ``ConfigError`` in a caller that records after the attempt concluded."""
        if self.ended is not None:
            raise ConfigError(self.ended)

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

    def drop(self, text: str) -> None:
        """An async workflow created a recording call and dropped it without awaiting it
        (``text`` says which and what to write): the first one blocks the run at its next
        recording call, or when the workflow returns."""
        if self.dropped is None:
            self.dropped = text

    def mark_live(self, prefix: str) -> None:
        """The gather branch ``prefix`` counts as gone live (its wait settles now), so
        siblings settling in turn need not wait for it."""
        self.gathers.went_live.add(prefix)

    def check_dropped(self) -> None:
        """Raise (and poison) if the workflow dropped a recording call without awaiting it."""
        if self.dropped is not None:
            raise self.poison(ConfigError(self.dropped))

    def _inputs_diff(self, rec: StepRecord, call: Any) -> str:
        """How the recorded inputs differ from ``call``'s ("" when they were not kept)."""
        fetch = self.blobs.fetch
        if call is None or rec.inputs is None or fetch is None:
            return ""
        fn, args, kwargs = call
        try:
            now = inputs.build(args, kwargs, set())
            return inputs.diff(rec.inputs, now, fn, fetch)
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
        if self.root.busy is not None:
            # The end (a return, a continue_as_new) takes no position, so Scope.take's
            # concurrent-use check never sees it: a step still live here would be left
            # unrecorded in a history that is over, its effect done under a dead key.
            raise self.poison(
                ConfigError(
                    f"the workflow ended its generation (returned or called"
                    f" ctx.continue_as_new) while {self.root.busy} was still running: inside"
                    " that step's function, or concurrently with it outside ctx.gather (a"
                    " task not awaited, a thread not joined). Await every step before"
                    " returning or continuing as new, and call ctx.continue_as_new from the"
                    " workflow itself, never from a step. The run is blocked; fix the code,"
                    " then resume it."
                )
            )
        if self.gathers.entered:
            raise self.poison(
                ConfigError(
                    f"the workflow returned while {self.gathers.entered} ctx.branches"
                    " branch(es) were still entered (a task or thread of the framework still"
                    " running): what they record would come after the run's end. Await the"
                    " tasks (join the threads) before returning. The run is blocked; fix the"
                    " code, then resume it."
                )
            )
        left = sorted(set(self.history) - self.consumed, key=_pos_key)
        if left and self.gathers.failed:
            exempt = tuple(self.gathers.failed)
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
                self.key(pos),
                sig.takes_key,
                sig.options.effect,
                sig.options.reconcile is not None,
            )
            token = _FAULT_STEP.set(info)
            try:
                # In generation N >= 1 the hook sees the key's position (g1.0).
                self.fault_hook(self.run_id, f"{self.gen}{pos}", name, window)
            finally:
                _FAULT_STEP.reset(token)

    def record_marker(
        self,
        pos: str,
        kind: str,
        name: str,
        digest: str,
        text: str,
        status: str = OK,
        *,
        since: float | None = None,
        at: float | None = None,
    ) -> None:
        """Buffer the record of a marker at ``pos`` (a value, halt, gather, patch, timer,
        signal, approval or compensation): it rides with the next durable write. ``at`` is
        when (the clock now unless given), ``since`` when the wait it ends began (``at``
        unless given); a ``waiting`` record has no finish time."""
        if at is None and (since is None or status != WAITING):
            at = self.clock.time()  # read only when needed, and once
        started = at if since is None else since
        assert started is not None
        finished = None if status == WAITING else at
        self.pending.append(
            StepRecord(
                pos, kind, name, digest, status, text, started_at=started, finished_at=finished
            )
        )

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
        # In generation N >= 1 the position carries g<N>. (positions start again at 0).
        where = f"{self.gen}{pos}"
        dedupe = f"t{self.token}:{where}:{kind}{tail}"
        return new_event(kind, where, data, self.clock.time(), dedupe)

    # -- budgets and the spend ledger ----------------------------------------------------

    def charge(self, pos: str, call: str, attempt: int, usage: Usage) -> Generator[Op, Any, None]:
        """Put one call's reported usage in the ledger (nothing when it reported none), then
        check the budget: a crossing asks for a halt, which reaches the workflow at its
        next position that goes live (this step's result is still recorded)."""
        if not usage.reported:
            return
        self.budgets.spend = yield Charge(self.spend_entry(pos, call, attempt, usage))
        self.check_budget()

    def spend_entry(self, pos: str, call: str, attempt: int, usage: Usage) -> SpendEntry:
        """The ledger row of ``usage`` reported by call ``call`` (``"a2"``) at ``pos``:
        named by generation, position, this claim's token and the call, so a retried
        write stores it once and another claim's call is its own row."""
        return SpendEntry(
            f"g{self.budgets.generation}:{pos}:t{self.token}:{call}",
            self.budgets.generation,
            pos,
            attempt,
            self.token,
            usage.tokens,
            usage.input_tokens if usage.split else None,
            usage.output_tokens if usage.split else None,
            usage.cost_usd,
        )

    def spend_arrived(self, spend: Spend) -> None:
        """The driver charged usage that arrived on its own (an attempt that ran past its
        timeout reported it later, from its thread): ``spend`` is the run's spend after
        it. Only kept here (another thread calls this, one at a time: the driver
        serializes the calls); :meth:`live` takes it, so a budget it crosses stops the
        workflow at its next position that goes live."""
        state = self.budgets
        kept = state.arrived
        # The ledger only grows: the reading with more entries is the later one.
        if kept is None or spend.entries > kept.entries:
            state.arrived = spend

    def halt_pending(self) -> bool:
        """Whether a halt (cancel, budget) waits to be delivered, after taking the spend
        that arrived on its own (a retry checks this before calling again)."""
        self._take_arrived()
        return self.halt_requested is not None

    def _take_arrived(self) -> None:
        # One read, never reset: a reading set by another thread meanwhile is another
        # object, taken next time (a reset here could drop it).
        state = self.budgets
        arrived = state.arrived
        if arrived is None or arrived is state.arrived_taken:
            return
        state.arrived_taken = arrived
        if state.spend is None or arrived.entries > state.spend.entries:
            state.spend = arrived
        self.check_budget()

    def check_budget(self) -> None:
        """Ask for a ``BudgetExceeded`` halt when the known spend is more than the limit
        (this claim's, else the stored one)."""
        state = self.budgets
        if state.spend is None:
            return
        budget = state.limit if state.limit is not None else state.spend.budget
        how = state.spend.over(budget)
        if how is not None:
            self.request_halt(BudgetExceeded(exceeded_message(self.run_id, how)))


def _pos_key(pos: str) -> tuple[int, ...]:
    return tuple(int(p) for p in pos.split("."))


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
