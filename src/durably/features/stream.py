"""Streamed steps (``ctx.step_stream``): a step whose function yields chunks that reach
the caller as they arrive; what was consumed is recorded as one step when the stream
ends, and a replay hands the recorded chunks out without calling the function. Written
over the kernel's step seams (``live_step``, ``retry_wait``, ``record_ok``,
``record_failed``, ``charge``); the iterators the workflow holds are in
:mod:`durably.streaming`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import inputs
from .._record import replace
from ..current import StepInfo as CurrentStep
from ..errors import ConfigError, ReplayEnd, SerializationError, StepFailed, clause
from ..journal import codec
from ..journal.records import FAILED, OK, STEP
from ..journal.text import check_name
from ..replay import stepping
from ..replay.kernel import type_name
from ..replay.ops import Call, Op, Outcome
from ..replay.stepping import add_usage, decode_output
from ..replay.streamops import (
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
from ..steps import StepSignature, Usage, given_text, signature_of

if TYPE_CHECKING:
    from ..replay.kernel import RunCore


def step_stream(
    core: RunCore,
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
    core.guard_replay()
    if not isinstance(name, str) or not name:
        raise core.poison(
            ConfigError(
                f"ctx.step_stream: the step name must be a non-empty str, got {given_text(name)}"
            )
        )
    for what, f in (("fn", fn), ("assemble", assemble), ("replay", replay)):
        if f is not None and not callable(f):
            raise core.poison(
                ConfigError(f"ctx.step_stream({name!r}, ...): {what}={f!r} is not callable")
            )
    try:
        check_name(name, "ctx.step_stream: the step name")
    except ConfigError as exc:
        raise core.poison(exc) from None
    sig = replace(signature_of(fn), return_hint=None)
    if not in_async and (sig.is_async or _is_asyncgen(fn)):
        raise core.poison(
            ConfigError(
                f"ctx.step_stream({name!r}, ...): {fn!r} is async: stream it from an async"
                " workflow (async def, `async for chunk in ctx.step_stream(...)`), or pass"
                " a sync generator function"
            )
        )
    scope = core.scope()
    pos = scope.take()
    try:
        digest = codec.digest(name, args, kwargs, core.codec_version, core.item_hashes)
    except SerializationError as exc:
        raise core.poison(exc) from None
    rec = core.recorded(pos, STEP, name, digest, (fn, args, kwargs))
    if rec is None:
        core.live(pos)
    elif rec.status not in (OK, FAILED) and core.checking:
        raise core.latch(ReplayEnd(pos))
    if rec is None or rec.status not in (OK, FAILED):
        # Its inputs are kept with its records (built only here: replay never pays).
        core.manifests[pos] = inputs.build(args, kwargs, core.blobs.known, core.item_hashes)
    # Open from here until the stream ends: a recording call of this scope meanwhile
    # ends it first (Scope.take), so positions never depend on where the loop is.
    scope.busy = f"streamed step {pos} {name!r}"
    scope.stream = owner
    try:
        if (yield Begun(pos)) is STOP:
            if rec is None:  # never iterated: nothing was consumed, nothing called
                return (
                    yield from _stream_record(
                        core, pos, name, digest, [], assemble, sig, 1, core.clock.time(), Usage()
                    )
                )
            if rec.status != OK:
                return None
        if rec is not None and rec.status == OK:
            value = decode_output(core, rec.output, sig, pos, name)
            yield from _stream_replayed(core, pos, name, value, replay)
            return value
        if rec is not None and rec.status == FAILED:
            raise StepFailed(name, pos, rec.error_type or "Exception", rec.error_message or "")

        def attempts(*a: Any) -> Generator[Any, Any, Any]:
            return _stream_attempts(core, *a, assemble=assemble, in_async=in_async)

        out = yield from stepping.live_step(
            core, pos, name, digest, fn, args, kwargs, sig, rec, attempts
        )
        if isinstance(out, _Streamed):
            return out.value
        # Reconciled (an effect in doubt): the recorded value is streamed like a replay.
        yield from _stream_replayed(core, pos, name, out, replay)
        return out
    finally:
        scope.stream = None
        scope.busy = None


def _stream_replayed(
    core: RunCore, pos: str, name: str, value: Any, replay: Callable[[Any], Any] | None
) -> Generator[Deliver, Any, None]:
    """Hand the caller the chunks ``replay(value)`` rebuilds (default: the items of
    the recorded list), until the caller stops."""
    try:
        chunks = iter(value if replay is None else replay(value))
    except Exception as exc:
        raise core.poison(_replay_error(pos, name, exc)) from exc
    index = 0
    while True:
        try:
            chunk = next(chunks, END)
        except Exception as exc:
            raise core.poison(_replay_error(pos, name, exc)) from exc
        if chunk is END or (yield Deliver(chunk, index, None)) is STOP:
            return
        index += 1


def _stream_attempts(
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
        core.guard()
        if attempt > 1 and core.halt_pending():
            core.live(pos)
        n = crashed + attempt
        info = CurrentStep(core.run_id, pos, key, n, core.token)
        deadline = None if opts.timeout_s is None else core.clock.time() + opts.timeout_s
        used = Usage()
        opened: Outcome = yield Call(
            fn, args, kwargs, opts.timeout_s, sig.is_async or _is_asyncgen(fn), info, f"a{n}"
        )
        add_usage(used, opened.usage)
        error = opened.error
        chunks: list[Any] = []
        stopped = False
        if error is None:
            it, aio = _chunks_of(core, pos, name, opened.value, in_async)
            pull = anext_chunk if aio else next_chunk
            while True:
                # A stale owner (lease lost, the run stopped) pulls no more chunks.
                core.guard(halt=False)
                out: Outcome = yield Call(
                    pull, (it,), {}, _left(core, deadline), aio, info, f"a{n}"
                )
                add_usage(used, out.usage)
                if out.error is not None:
                    error = out.error
                    break
                if out.value is END:
                    break
                chunk = out.value
                if len(chunks) >= STREAM_CHUNKS_MAX:
                    yield Call(aclose_chunks if aio else close_chunks, (it,), {}, None, aio)
                    raise core.poison(_too_many_chunks(pos, name))
                if assemble is None:  # recorded as a list: the caller gets it as replayed
                    chunk = _normalized(core, pos, name, chunk)
                chunks.append(chunk)
                if (yield Deliver(chunk, len(chunks) - 1, info)) is STOP:
                    stopped = True
                    # What the function reports while it is closed (a provider's stream
                    # stopped early: the usage its events carried) is this attempt's.
                    closed: Outcome = yield Call(
                        aclose_chunks if aio else close_chunks, (it,), {}, None, aio, info
                    )
                    add_usage(used, closed.usage)
                    break
        add_usage(spent, used)
        # Real spend reaches the ledger before the result is recorded (see _attempts).
        yield from core.charge(pos, f"a{n}", n, used)
        if error is None or stopped:
            return _Streamed(
                (
                    yield from _stream_record(
                        core, pos, name, digest, chunks, assemble, sig, n, started, spent
                    )
                )
            )
        if not chunks and opts.retryable(error, attempt):
            yield from stepping.retry_wait(core, pos, name, key, error, sig, attempt, crashed)
            continue
        yield from stepping.record_failed(
            core, pos, name, digest, key, error, sig, n, started, spent
        )


def _stream_record(
    core: RunCore,
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
            raise core.poison(
                ConfigError(
                    f"streamed step {pos} {name!r}: assemble(chunks) raised"
                    f" {type_name(exc)}: {exc}; the run is blocked until assemble is fixed"
                    " (the stream runs again on resume)"
                )
            ) from exc
    return (
        yield from stepping.record_ok(core, pos, name, digest, value, sig, attempts, started, spent)
    )


def _chunks_of(core: RunCore, pos: str, name: str, value: Any, in_async: bool) -> tuple[Any, bool]:
    """The iterator over what the streamed step's function returned, and whether it
    is async (an async iterator is pulled on the loop, a sync one in a step thread
    of an async workflow)."""
    if in_async and hasattr(value, "__aiter__"):
        return value.__aiter__(), True
    if hasattr(value, "__iter__") and not isinstance(value, (str, bytes, dict)):
        return iter(value), False
    hint = " (an async iterator: use an async workflow)" if hasattr(value, "__aiter__") else ""
    raise core.poison(
        ConfigError(
            f"streamed step {pos} {name!r}: the function returned {type(value).__name__}"
            f"{hint}, not an iterator of chunks; pass a generator function (or a function"
            " returning an iterable; in an async workflow also an async generator)"
        )
    )


def _normalized(core: RunCore, pos: str, name: str, chunk: Any) -> Any:
    """``decode(encode(chunk))``: what a replay of the default record hands back."""
    try:
        return codec.loads(codec.dumps(chunk, f"streamed step {pos} {name!r} chunk"))
    except SerializationError as exc:
        raise core.poison(
            SerializationError(
                f"{clause(exc)}. The run is blocked: yield storable chunks (or pass assemble= to"
                " record something else), then resume it"
            )
        ) from None


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
