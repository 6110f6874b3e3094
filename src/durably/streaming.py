"""What ``ctx.step_stream(...)`` returns: :class:`StepStream` (a sync workflow's
iterator) and :class:`AsyncStepStream` (an async workflow's async iterator).

Each drives the core's streamed-step generator (``RunCore.step_stream``) one chunk at a
time: it carries out the operations the core yields (call the function, pull a chunk,
record the result) until the core hands it a chunk (:class:`~durably.replay.streamops.Deliver`)
for the caller. The rules are in docs/api.md ("Streamed steps").
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Generator, Iterable, Iterator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

from .current import StepInfo
from .errors import ConfigError
from .events import MODEL_DELTA, MODEL_RESTART, NewEvent, new_event
from .features import stream
from .limits import MODEL_DELTAS_MAX, STREAM_FLUSH_S
from .replay.ops import Call, Outcome
from .replay.streamops import STOP, Begun, Deliver
from .steps import fn_text

if TYPE_CHECKING:
    from .replay.kernel import RunCore
    from .runtime.drive import Executor

ChunkHook = Callable[[Any, int, StepInfo], None]
"""``on_chunk(chunk, index, info)``: called for each live chunk before the caller gets
it (never for a chunk rebuilt from the record); ``index`` starts at 0 for every attempt,
so a new series (a retry, a re-run after a crash: ``info.attempt`` /
``info.fencing_token``) is told apart."""

DeltaFn = Callable[[Any], Iterable[Mapping[str, Any]]]
"""``deltas(chunk)``: the ``model.delta`` events a live chunk makes, as their data (for
example ``[{"text": "Hel"}]``, or ``[{"tool": 0, "arguments": "{\\"ci"}]``); an empty
iterable for a chunk with nothing to show."""

_OPEN, _DONE, _ENDED = "open", "done", "ended"


class _Stream:
    """What both iterators share: the core generator, its state, the result."""

    __slots__ = (
        "_by",
        "_core",
        "_deltas",
        "_ex",
        "_gen",
        "_hook",
        "_idle",
        "_name",
        "_pos",
        "_sent",
        "_state",
        "_unflushed",
        "_value",
    )

    def __init__(
        self,
        core: RunCore,
        ex: Executor,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        assemble: Callable[[list[Any]], Any] | None,
        replay: Callable[[Any], Any] | None,
        on_chunk: ChunkHook | None,
        in_async: bool,
        deltas: DeltaFn | None = None,
    ) -> None:
        for what, f in (("on_chunk", on_chunk), ("deltas", deltas)):
            if f is not None and not callable(f):
                raise core.poison(
                    ConfigError(f"ctx.step_stream: {what} ({fn_text(f)}) is not callable")
                )
        self._core = core
        self._name = name
        self._deltas = deltas
        self._sent = 0  # model.delta events of this attempt's series so far
        self._unflushed = False  # events handed to the stream writer since the last flush
        self._ex = ex
        self._hook = on_chunk
        self._state = _OPEN
        self._by: str | None = None
        self._value: Any = None
        self._gen: Generator[Any, Any, Any] = stream.step_stream(
            core, name, fn, args, kwargs, assemble, replay, self, in_async
        )
        # Takes the position now, in program order (a mismatch raises here).
        with ex.hold():  # a ctx.branches branch may stream in its own thread
            first = self._gen.send(None)
        assert isinstance(first, Begun), first
        self._pos = first.position
        self._idle = True  # paused at a Begun/Deliver: the next reply may be sent

    @property
    def result(self) -> Any:
        """The streamed step's recorded value (``assemble(chunks)``, by default the list
        of chunks), as a replay returns it; available once the stream is over."""
        if self._state == _OPEN:
            raise ConfigError(
                f"the streamed step at {self._pos} is not over: iterate it to its end (or"
                " close it) before reading .result"
            )
        return self._value

    def _delivered(self, op: Deliver) -> Any:
        self._idle = True
        if op.info is not None:
            if self._deltas is not None:
                self._publish(op.chunk, op.index, op.info)
            if self._hook is not None:
                self._hook(op.chunk, op.index, op.info)
        return op.chunk

    def _publish(self, chunk: Any, index: int, info: StepInfo) -> None:
        """Hand the live chunk's ``model.delta`` events to the store's stream writer
        (never waiting for it). A series is named by (generation, position, fencing
        token, attempt, index), so a retry or a re-run after a crash is a fresh series,
        opened by a ``model.restart`` that tells readers to drop what they showed."""
        core = self._core
        gen, token = core.setup.generation, info.fencing_token
        pos = f"{core.gen}{info.position}"  # the event's position carries the generation
        attempt = info.attempt
        series = f"g{gen}:{pos}:t{token}:a{attempt}"
        now = core.clock.time()
        out: list[NewEvent] = []
        if index == 0:
            self._sent = 0
            # The stream-only events waiting for the next durable write (this step's
            # step.started, emits before it) go first, so a follower reads them before
            # the tokens; the durable write that carries them later skips them by their
            # dedupe names.
            out.extend(core.events)
            restart = {"name": self._name, "attempt": attempt, "token": token}
            out.append(new_event(MODEL_RESTART, pos, restart, now, f"restart:{series}"))
        try:
            for data in self._deltas(chunk) if self._deltas is not None else ():
                if self._sent >= MODEL_DELTAS_MAX:
                    break  # followers see no more of this attempt; the record is whole
                fields = {**data, "attempt": attempt, "token": token, "index": self._sent}
                dedupe = f"delta:{series}:{self._sent}"
                out.append(new_event(MODEL_DELTA, pos, fields, now, dedupe))
                self._sent += 1
        except Exception as exc:  # not JSON data in a mapping, or deltas itself raised
            raise core.poison(
                ConfigError(
                    f"streamed step {pos} {self._name!r}: deltas(chunk) gave no events"
                    f" ({type(exc).__name__}: {exc}); return a list of dicts of JSON data."
                    " The run is blocked until it is fixed"
                )
            ) from exc
        if out:
            self._ex.store.publish(core.run_id, token, out)
            self._unflushed = True

    def _flush_before(self, op: Any) -> bool:
        """Whether the deltas handed to the stream writer must be written before ``op``
        (a write of the step's spend or result): then a follower reads a call's deltas
        before its ``step.completed``."""
        if not self._unflushed or isinstance(op, Call):
            return False
        self._unflushed = False
        return True

    def _over(self, value: Any, state: str) -> None:
        self._value = value
        self._state = state

    def _ended_error(self) -> ConfigError:
        return ConfigError(
            f"the streamed step at {self._pos} was ended by the recording call at"
            f" {self._by} made while it was open (what its loop had consumed was recorded"
            " then): make recording calls after the loop over ctx.step_stream(...), not"
            " inside it. The run is blocked; fix the code, then resume it."
        )

    def finish(self, by: str) -> None:
        """End the stream now (a recording call of its scope at ``by``, or the workflow's
        end): the function's iterator is closed and what the caller consumed is
        recorded. Carried out in this thread (an async iterator is left to the event
        loop's finalizer)."""
        self._stop(_ENDED)
        self._by = by

    def _stop(self, state: str) -> None:
        if self._state != _OPEN:
            return
        if not self._idle:
            raise self._core.poison(
                ConfigError(
                    f"the streamed step at {self._pos} was asked to end while it was pulling a"
                    " chunk: the context is used concurrently outside ctx.gather. The run is"
                    " blocked; fix the code, then resume it."
                )
            )
        self._idle = False
        reply: Any = STOP
        try:
            with self._ex.hold():
                while True:
                    try:
                        op = self._gen.send(reply)
                    except StopIteration as stop:
                        self._over(stop.value, state)
                        return
                    if isinstance(op, Deliver):  # a replay hands out no more after a STOP
                        reply = STOP
                        continue
                    if self._flush_before(op):
                        _flush_held(self._ex)
                    reply = self._finish_op(op)
        except BaseException:
            self._abandon()
            raise

    def _finish_op(self, op: Any) -> Any:
        from .runtime.drive import op_sync_held

        if isinstance(op, Call) and op.is_async:
            return Outcome()  # an async iterator's aclose needs the loop: its finalizer
        return op_sync_held(self._ex, op)

    def _abandon(self) -> None:
        """Give up the stream without recording (a stop of the run, an error)."""
        if self._state == _OPEN:
            self._state = _DONE
            self._gen.close()  # the core's cleanup: the scope is free again


class StepStream(_Stream, Iterator[Any]):
    """The chunks of a streamed step of a sync workflow (``ctx.step_stream``), live as
    they arrive or rebuilt from the record on replay. Iterate it to the end (the result
    is recorded then), or stop early: ``close()``, the end of a ``with`` block, or the
    scope's next recording call record what was consumed."""

    __slots__ = ()

    def __iter__(self) -> StepStream:
        return self

    def __next__(self) -> Any:
        if self._state == _ENDED:
            raise self._core.poison(self._ended_error())
        if self._state == _DONE:
            raise StopIteration
        from .runtime.drive import op_sync_held

        self._idle = False
        reply: Any = None
        try:
            with self._ex.hold():  # the chunk is pulled (a Call) with the lock let go
                while True:
                    try:
                        op = self._gen.send(reply)
                    except StopIteration as stop:
                        self._over(stop.value, _DONE)
                        break
                    if isinstance(op, Deliver):
                        break
                    if self._flush_before(op):
                        _flush_held(self._ex)
                    reply = op_sync_held(self._ex, op)
        except BaseException:
            self._abandon()
            raise
        if self._state == _OPEN:
            return self._delivered(op)  # the caller's hook runs outside the run's lock
        raise StopIteration

    def close(self) -> None:
        """Stop early: close the function's iterator and record the chunks consumed so
        far (a replay hands out no more). Nothing happens once the stream is over."""
        self._stop(_DONE)

    def __enter__(self) -> StepStream:
        return self

    def __exit__(
        self,
        typ: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if typ is not None and not issubclass(typ, Exception):
            self._abandon()  # the run stops (parked, lease lost, a crash): record nothing
        else:
            self.close()


class AsyncStepStream(_Stream, AsyncIterator[Any]):
    """The chunks of a streamed step of an async workflow: :class:`StepStream` as an
    async iterator (``async for``; ``aclose()``, ``async with``)."""

    __slots__ = ()

    def __aiter__(self) -> AsyncStepStream:
        return self

    async def __anext__(self) -> Any:
        if self._state == _ENDED:
            raise self._core.poison(self._ended_error())
        if self._state == _DONE:
            raise StopAsyncIteration
        from .runtime.drive import op_async

        self._idle = False
        reply: Any = None
        try:
            while True:
                try:
                    op = self._gen.send(reply)
                except StopIteration as stop:
                    self._over(stop.value, _DONE)
                    break
                if isinstance(op, Deliver):
                    return self._delivered(op)
                if self._flush_before(op):
                    await _flush_async(self._ex)
                reply = await op_async(self._ex, op)
        except BaseException:
            self._abandon()
            raise
        raise StopAsyncIteration

    async def aclose(self) -> None:
        """Stop early: close the function's iterator (awaiting its ``aclose``) and record
        the chunks consumed so far. Nothing happens once the stream is over."""
        if self._state != _OPEN:
            return
        if not self._idle:
            self._stop(_DONE)  # raises: concurrent use
        from .runtime.drive import op_async

        self._idle = False
        reply: Any = STOP
        try:
            while True:
                try:
                    op = self._gen.send(reply)
                except StopIteration as stop:
                    self._over(stop.value, _DONE)
                    return
                if isinstance(op, Deliver):
                    reply = STOP
                    continue
                if self._flush_before(op):
                    await _flush_async(self._ex)
                reply = await op_async(self._ex, op)
        except BaseException:
            self._abandon()
            raise

    async def __aenter__(self) -> AsyncStepStream:
        return self

    async def __aexit__(
        self,
        typ: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if typ is not None and not issubclass(typ, Exception):
            self._abandon()
        else:
            await self.aclose()


def _flush_held(ex: Executor) -> None:
    """``flush_stream`` from inside ``ex.hold()``: the run's lock (when branches may
    record from other threads) is let go while the writer catches up."""
    lock = ex.lock
    if lock is None:
        ex.store.flush_stream(STREAM_FLUSH_S)
        return
    with lock.released():
        ex.store.flush_stream(STREAM_FLUSH_S)


async def _flush_async(ex: Executor) -> None:
    """``flush_stream`` off the event loop (it waits for the writer thread)."""
    import asyncio

    await asyncio.to_thread(ex.store.flush_stream, STREAM_FLUSH_S)
