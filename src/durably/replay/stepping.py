"""Running a step: match its record, or go live (an effect's intent first), call it with
retries and per-attempt timeouts, charge what it reported, and record its result or
failure. Functions over the kernel's primitives (:class:`~durably.replay.kernel.RunCore`):
``ctx.step`` and saga steps come here, and a streamed step (``features/stream.py``)
reuses :func:`live_step`, :func:`retry_wait`, :func:`record_ok` and
:func:`record_failed` with its own attempts.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, NoReturn

from .. import inputs
from ..current import StepInfo as CurrentStep
from ..errors import (
    ConfigError,
    ReplayEnd,
    SerializationError,
    StepFailed,
    clause,
)
from ..journal import codec
from ..journal.events import (
    STEP_COMPLETED,
    STEP_FAILED,
    STEP_RETRIED,
    STEP_STARTED,
)
from ..journal.records import FAILED, INTENT, OK, STEP, StepRecord
from ..journal.text import check_name, describe_error, storable_text
from ..limits import ERROR_MESSAGE_CHARS_MAX, STEP_OUTPUT_BYTES_MAX
from ..shell import command
from ..steps import StepSignature, Usage, fn_text, given_text, signature_of, warn_untyped_result
from .kernel import NOT_DONE, type_name
from .ops import Call, Op, Outcome, Wait, Write
from .park import Parked

if TYPE_CHECKING:
    from .kernel import RunCore


def step(
    core: RunCore, name: Any, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Generator[Op, Any, Any]:
    """Replay or execute one step (see ``Context.step``)."""
    core.guard_replay()
    if not isinstance(name, str) or not name:
        raise core.poison(
            ConfigError(
                f"ctx.step: the step name must be a non-empty str, got {given_text(name)}; call"
                " ctx.step('name', fn, *args)"
            )
        )
    if not callable(fn):
        raise core.poison(ConfigError(f"ctx.step({name!r}, ...): {fn_text(fn)} is not callable"))
    try:
        check_name(name, "ctx.step: the step name")
    except ConfigError as exc:
        raise core.poison(exc) from None
    sig = signature_of(fn)
    scope = core.scope()
    pos = scope.take()
    try:
        digest = codec.digest(name, args, kwargs, core.codec_version, core.item_hashes)
    except SerializationError as exc:
        raise core.poison(exc) from None
    rec = core.recorded(pos, STEP, name, digest, (fn, args, kwargs))
    if rec is not None and rec.status == OK:
        return decode_output(core, rec.output, sig, pos, name)
    if rec is not None and rec.status == FAILED:
        raise StepFailed(name, pos, rec.error_type or "Exception", rec.error_message or "")
    if rec is None:
        core.live(pos)  # nothing recorded: the step would go live (a halt lands here)
    elif core.checking:
        # An intent: the step would run (or reconcile) with its key. A halt waits for
        # the next position: the effect in flight completes under its key first.
        raise core.latch(ReplayEnd(pos))
    # Its inputs are kept with its records (built only here: replay never pays for it).
    core.manifests[pos] = inputs.build(args, kwargs, core.blobs.known, core.item_hashes)
    # Live from here on, and the driver may run other code meanwhile: the scope is
    # busy until this step is recorded (a replayed step never yields, so it never is).
    scope.busy = f"step {pos} {name!r}"
    try:
        return (yield from live_step(core, pos, name, digest, fn, args, kwargs, sig, rec))
    finally:
        scope.busy = None


def live_step(
    core: RunCore,
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
    key = core.key(pos)
    call_kwargs = dict(kwargs)
    if sig.takes_key:
        call_kwargs["idempotency_key"] = key
    if sig.takes_token:
        call_kwargs["fencing_token"] = core.token
    started = core.clock.time()
    # Executions started before a crash (counted by the intent): they are attempts too.
    crashed = 0 if rec is None else rec.attempts
    if rec is not None:  # an intent without a result: the effect is in doubt
        reconciled = yield from _doubt(core, pos, name, digest, key, sig, started, rec)
        if reconciled is not NOT_DONE:
            return reconciled
    if core.fault_hook is not None:  # (no call on the common path)
        core.fault(pos, name, "before", sig)
    pending = core.take_pending()
    started_data = {"name": name, "attempt": crashed + 1, "key": key}
    core.events.append(core.step_event(STEP_STARTED, pos, started_data))
    if sig.options.effect:
        # A re-execution rewrites the intent with one more execution started.
        intent = StepRecord(pos, STEP, name, digest, INTENT, attempts=crashed + 1)
        pending.append(_with_inputs(core, intent.replace(started_at=started)))
    if pending:
        # step.started rides with the intent: no commit of its own.
        yield Write(pending, core.take_events())
    if attempts is not None:
        return (
            yield from attempts(
                pos, name, digest, key, fn, args, call_kwargs, sig, started, crashed
            )
        )
    return (
        yield from _attempts(
            core, pos, name, digest, key, fn, args, call_kwargs, sig, started, crashed
        )
    )


def _doubt(
    core: RunCore,
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
        info = CurrentStep(core.run_id, pos, key, intent.attempts, core.token)
        out: Outcome = yield Call(
            opts.reconcile,
            (key,),
            {},
            opts.timeout_s,
            signature_of(opts.reconcile).is_async,
            info,
            f"r{intent.attempts}",
        )
        # A reconcile that reported usage (it asked a model) spent it for real.
        yield from core.charge(pos, f"r{intent.attempts}", intent.attempts, out.usage)
        if out.misuse is not None:
            raise core.poison(out.misuse)
        if out.error is not None:
            core.in_doubt = (
                f"step {pos} {name!r}: reconcile({key!r}) raised"
                f" {type_name(out.error)}: {out.error}"
            )
            raise core.latch(Parked("in_doubt", None))
        if out.value is not NOT_DONE:
            return (
                yield from record_ok(
                    core,
                    pos,
                    name,
                    digest,
                    out.value,
                    sig,
                    intent.attempts,
                    started,
                    out.usage,
                    key,
                )
            )
        return NOT_DONE
    age_s = started - intent.started_at
    if sig.takes_key and opts.dedupe_window_s is not None and age_s > opts.dedupe_window_s:
        # The receiver has forgotten the key by now: a retry with it is not safe.
        core.in_doubt = (
            f"step {pos} {name!r} was in flight {age_s:,.0f} s ago, longer than the"
            f" receiver remembers keys (dedupe_window_s={opts.dedupe_window_s:g}), so a"
            f" retry with key {key!r} could repeat the effect. Check the receiving"
            f" system, then `{command('retry', core.run_id)}` or"
            f" `{command('skip', core.run_id, options='--output JSON')}`."
        )
        raise core.latch(Parked("in_doubt", None))
    if sig.takes_key or opts.on_doubt == "retry":
        return NOT_DONE
    core.in_doubt = (
        f"step {pos} {name!r} was in flight when its process died: its effect may or"
        " may not have happened, and it takes no idempotency_key and has no reconcile."
        f" Check the receiving system for key {key!r}, then"
        f" `{command('retry', core.run_id)}` to run it again or"
        f" `{command('skip', core.run_id, options='--output JSON')}` to record what it"
        " returned."
    )
    raise core.latch(Parked("in_doubt", None))


def _attempts(
    core: RunCore,
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
        core.guard()
        if attempt > 1 and core.halt_pending():
            # A retry is a new call: a cancel asked for while the failed attempt ran or
            # during the backoff, or a budget that attempt crossed, lands here
            # (recorded at this position, over its intent), not after the remaining
            # attempts, which would run live work under the cancel, spend past the
            # budget, and let the step's failure end the run ``failed`` for the wrong
            # reason. A saga's compensation (not delivered to) keeps its retries.
            core.live(pos)
        n = crashed + attempt
        info = CurrentStep(core.run_id, pos, key, n, core.token)
        out: Outcome = yield Call(fn, args, kwargs, opts.timeout_s, sig.is_async, info, f"a{n}")
        add_usage(spent, out.usage)
        # Real spend reaches the ledger now, before the "effect" window: a crash before
        # the result is recorded re-runs the call, and both calls are counted.
        if out.usage.reported:  # (a generator of its own only when there is spend)
            yield from core.charge(pos, f"a{n}", n, out.usage)
        if out.misuse is not None:
            raise core.poison(out.misuse)
        if out.error is None:
            if sig.return_hint is None:
                warn_untyped_result(name, fn, out.value)
            return (
                yield from record_ok(
                    core, pos, name, digest, out.value, sig, n, started, spent, key
                )
            )
        exc = out.error
        if opts.retryable(exc, attempt):
            yield from retry_wait(core, pos, name, key, exc, sig, attempt, crashed)
            continue
        yield from record_failed(core, pos, name, digest, key, exc, sig, n, started, spent)


def retry_wait(
    core: RunCore,
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
    event = core.step_event(STEP_RETRIED, pos, retried, f":{crashed + attempt}")
    # Committed now, before the backoff, so a reader sees the retry while it
    # waits and runs (`runs why`: "attempt 2 of 5 after ..."). The failure path
    # only: a step that succeeds first time pays no commit for its events.
    yield Write(core.take_pending(), [*core.take_events(), event])
    yield Wait(delay_s)


def record_failed(
    core: RunCore,
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
    now = core.clock.time()
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
    core.fault(pos, name, "effect", sig)
    failed = {
        "name": name,
        "attempt": rec.attempts,
        "duration_ms": _ms(now - started),
        "key": key,
        "error_type": rec.error_type,
        "error_message": rec.error_message,
    }
    events = [*core.take_events(), core.step_event(STEP_FAILED, pos, failed)]
    yield Write([*core.take_pending(), _with_inputs(core, rec)], events)
    core.fault(pos, name, "recorded", sig)
    raise StepFailed(name, pos, rec.error_type or "", rec.error_message or "") from exc


def record_ok(
    core: RunCore,
    pos: str,
    name: str,
    digest: str,
    value: Any,
    sig: StepSignature,
    attempts: int,
    started: float,
    usage: Usage,
    key: str | None = None,
) -> Generator[Op, Any, Any]:
    """Record the step's result (``key``: its idempotency key, when the caller has it)
    and return what a replay of it returns."""
    try:
        text = codec.dumps(value, f"step {pos} {name!r} output", STEP_OUTPUT_BYTES_MAX)
    except SerializationError as exc:
        raise core.poison(
            SerializationError(
                f"{clause(exc)}. The run is blocked: change the step to return storable data,"
                " then resume it"
            )
        ) from None
    if core.fault_hook is not None:  # (no call on the common path)
        core.fault(pos, name, "effect", sig)
    stored, blob = inputs.output_ref(text, core.output_inline_max)
    # Built once with its inputs manifest and blobs (a copy per field change costs a
    # step several microseconds).
    manifest, blobs = _inputs_of(core, pos, OK)
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
        core.clock.time(),
        *_usage_cols(usage),
        manifest,
        blobs if blob is None else (*blobs, blob),
    )
    done = {
        "name": name,
        "attempt": attempts,
        "duration_ms": _ms((rec.finished_at or started) - started),
        "key": core.key(pos) if key is None else key,
        "tokens": rec.usage_tokens,
        "cost_usd": rec.usage_cost_usd,
    }
    if usage.split:
        done.update(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens)
    events = [*core.take_events(), core.step_event(STEP_COMPLETED, pos, done)]
    yield Write([*core.take_pending(), rec], events)
    if core.fault_hook is not None:  # (no call on the common path)
        core.fault(pos, name, "recorded", sig)
    return decode_output(core, text, sig, pos, name)


def _with_inputs(core: RunCore, rec: StepRecord) -> StepRecord:
    """``rec`` with its step's inputs manifest, and the blobs not yet sent (the first
    record of a position carries them; a later one, e.g. the result after its
    intent, only the manifest)."""
    manifest, blobs = _inputs_of(core, rec.position, rec.status)
    if manifest is None:
        return rec
    return rec.replace(inputs=manifest, blobs=blobs)


def _inputs_of(
    core: RunCore, pos: str, status: str
) -> tuple[str | None, tuple[tuple[str, str], ...]]:
    """The inputs manifest of the record at ``pos`` (None: none kept) and the blobs it
    carries (see :func:`_with_inputs`)."""
    # A result or failure is the position's last record: its manifest can go.
    m = core.manifests.get(pos) if status == INTENT else core.manifests.pop(pos, None)
    if m is None:
        return None, ()
    blobs, m.blobs = tuple(m.blobs), []
    return m.text, blobs


def _ms(seconds: float | None) -> float:
    """Seconds as milliseconds, rounded to a microsecond (never negative: a clock that
    stepped back reads as 0)."""
    return round(max(0.0, seconds or 0.0) * 1000, 3)


def add_usage(total: Usage, more: Usage) -> None:
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


def decode_output(core: RunCore, text: str | None, sig: StepSignature, pos: str, name: str) -> Any:
    try:
        text = inputs.resolve_output(text, core.blobs.fetch)
    except SerializationError as exc:
        # A missing blob, or one whose bytes no longer match its sha256: the recorded
        # output is unknown, so the run stops here, blocked and unchanged, never failed.
        raise core.poison(
            SerializationError(
                f"step {pos} {name!r}: its recorded output cannot be read: {clause(exc)}."
                " The run is blocked and nothing recorded is changed: restore the blob's row from a"
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
