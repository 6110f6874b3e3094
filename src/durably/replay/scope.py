"""Scopes: where positions come from. The run's root scope hands out ``0, 1, 2``; gather
branch ``i`` of the gather at position 4 gets a child scope ``4.i.``.

A scope serves one thread of program order and knows its kernel only through the small
:class:`PositionOwner` protocol (its history, how to block the run, how to raise a
recorded halt), so this module imports nothing of the kernel's.
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from typing import Protocol

from ..errors import ConfigError, DurablyError
from ..journal.records import HALT, StepRecord
from ..limits import GATHER_DEPTH_MAX, SCOPE_POSITIONS_MAX
from .streamops import Owner


class PositionOwner(Protocol):
    """What a scope needs of the kernel that owns it."""

    @property
    def history(self) -> Mapping[str, StepRecord]:
        """The run's records by position."""
        ...

    def poison(self, exc: DurablyError) -> DurablyError:
        """Block the run with ``exc`` (latched) and return it for ``raise``."""
        ...

    def replay_halt(self, rec: StepRecord) -> DurablyError:
        """The halt recorded at ``rec`` (a cancel, a crossed budget), latched, to raise."""
        ...


class Group(Protocol):
    """What a scope needs of a ``ctx.branches`` group it opened or belongs to
    (:class:`durably.replay.branches.BranchGroup`)."""

    closed: bool

    def close(self, parent: Scope) -> None:
        """The parent scope takes its next position: the group ends."""
        ...

    def closed_text(self, scope: Scope) -> str:
        """Why a recording call of a branch of a group that is over is refused."""
        ...


class Scope:
    """Hands out positions: ``0, 1, 2`` at the top, ``4.1.0, 4.1.1`` in gather branch 1
    of the gather at position 4.

    A scope serves one thread of program order. ``busy`` names the live step or gather
    of this scope still in flight: a position asked for meanwhile comes from code running
    concurrently on the same scope (``asyncio.gather``/``create_task`` around
    ``ctx.step``), whose positions would depend on timing, so :meth:`take` refuses it.
    """

    __slots__ = ("busy", "core", "group", "member", "next", "prefix", "stream")

    def __init__(self, core: PositionOwner, prefix: str) -> None:
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
        # The ctx.branches group this scope opened and that is still open (it ends when
        # this scope takes its next position), and the group this scope is a branch of.
        self.group: Group | None = None
        self.member: Group | None = None

    def peek(self) -> str:
        """The position :meth:`take` would hand out next, without consuming it."""
        return f"{self.prefix}{self.next}"

    def take(self) -> str:
        """The next position of this scope (ending an open streamed step first)."""
        if self.stream is not None:
            self.stream.finish(f"{self.prefix}{self.next}")
        if self.busy is not None:
            raise self.core.poison(ConfigError(_concurrent_use(self, self.busy)))
        if self.group is not None:
            self.group.close(self)  # this scope moves on: its open ctx.branches group ends
        if self.member is not None and self.member.closed:
            raise self.core.poison(ConfigError(self.member.closed_text(self)))
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
"""The scope of the code running now (a gather branch's); unset: the run's root."""


def _concurrent_use(scope: Scope, busy: str) -> str:
    return (
        f"position {scope.prefix}{scope.next} was asked for while {busy} of the same scope"
        " is still running: the context is used concurrently outside ctx.gather"
        " (asyncio.gather, asyncio.create_task or threads around ctx.step), so positions"
        " and idempotency keys would depend on timing and a replay could not match. For"
        " parallel steps use ctx.gather: `await ctx.gather(ctx.step(...), ctx.step(...))`"
        " gives each branch its own positions; framework code that runs calls"
        " concurrently itself (its own tasks or threads) reserves their order first with"
        " `group = ctx.branches(labels)` and runs call i inside `with group.branch(i):`."
        " The run is blocked; fix the code, then resume it."
    )
