"""``ctx.branches``' kernel side (replay.gathers, replay.branches) driven by a scripted
driver: no store, no thread, no event loop. The group's marker, the branch scopes'
positions in any entry order, the end of the group, and the refusals."""

from __future__ import annotations

from typing import Any

import pytest

from durably.clock import FakeClock
from durably.errors import ConfigError, NonDeterminism
from durably.journal.records import GATHER, StepRecord
from durably.replay import gathers, stepping
from durably.replay.kernel import RunCore
from durably.replay.ops import Call, Outcome, Write
from durably.replay.scope import SCOPE
from durably.replay.setup import RunSetup

from .test_scripted import drive


def kernel(history: list[StepRecord] | None = None) -> RunCore:
    return RunCore(RunSetup("r", history or [], FakeClock(), incarnation="0" * 12))


def step_in(core: RunCore, group: Any, i: int, name: str, out: list[StepRecord]) -> Any:
    """Branch ``i`` records the step ``name`` (live), its records collected in ``out``."""
    scope = group.enter(i)
    token = SCOPE.set(scope)
    try:
        gen = stepping.step(core, name, lambda: name, (), {})
        reply: Any = None
        while True:  # a Write (the marker's, on the first step), the Call, the Write
            try:
                op = gen.send(reply)
            except StopIteration as stop:
                return stop.value
            assert isinstance(op, Call | Write), op
            if isinstance(op, Write):
                out.extend(op.records)
            reply = Outcome(value=name) if isinstance(op, Call) else None
    finally:
        SCOPE.reset(token)
        group.leave(i, False)


def test_positions_follow_the_index_not_the_entry_order_and_replay_alike() -> None:
    core = kernel()
    group = gathers.branches_begin(core, ["a", "b", "c"])
    written: list[StepRecord] = []
    for i, name in ((2, "c1"), (0, "a1"), (2, "c2"), (1, "b1")):  # any order
        step_in(core, group, i, name, written)
    by_pos = {r.position: (r.kind, r.name) for r in written}
    assert by_pos == {
        "0": (GATHER, "durably.gather"),
        "0.2.0": ("step", "c1"),
        "0.0.0": ("step", "a1"),
        "0.2.1": ("step", "c2"),
        "0.1.0": ("step", "b1"),
    }

    again = kernel(written)
    group = gathers.branches_begin(again, ["a", "b", "c"])
    for i, name in ((1, "b1"), (2, "c1"), (2, "c2"), (0, "a1")):  # another order
        scope = group.enter(i)
        token = SCOPE.set(scope)
        try:
            assert drive(stepping.step(again, name, lambda n=name: n, (), {}), []) == name
        finally:
            SCOPE.reset(token)
            group.leave(i, False)
    again.unconsumed_check()


def test_a_changed_list_is_refused_at_the_marker() -> None:
    core = kernel()
    gathers.branches_begin(core, ["a", "b"])
    written = core.take_pending()
    again = kernel(written)
    with pytest.raises(NonDeterminism, match=r"2 branches \['a', 'b'\].*2 branches \['a', 'x'\]"):
        gathers.branches_begin(again, ["a", "x"])
    assert again.poisoned is not None


def test_the_group_ends_when_its_parent_takes_its_next_position() -> None:
    core = kernel()
    group = gathers.branches_begin(core, ["a"])
    assert core.root.take() == "1"  # the parent moves on
    with pytest.raises(ConfigError, match="after its group ended"):
        group.enter(0)
    assert core.poisoned is not None


def test_a_branch_in_a_step_makes_the_parents_next_position_concurrent_use() -> None:
    core = kernel()
    group = gathers.branches_begin(core, ["a"])
    scope = group.enter(0)
    scope.busy = "step 0.0.0 'a'"  # as stepping.step marks a live step in flight
    with pytest.raises(ConfigError, match=r"branch 0 of the ctx\.branches group at 0"):
        core.root.take()


def test_bad_indexes_and_double_entry_are_refused() -> None:
    for bad in (-1, 2, True, "0"):
        core = kernel()
        group = gathers.branches_begin(core, ["a", "b"])
        with pytest.raises(ConfigError, match="is not a branch of this group of 2"):
            group.enter(bad)
    core = kernel()
    group = gathers.branches_begin(core, ["a", "b"])
    group.enter(1)
    with pytest.raises(ConfigError, match="entered while it is entered already"):
        group.enter(1)
