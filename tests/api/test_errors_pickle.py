"""Every public durably error crosses a process boundary intact: pickled and unpickled
(``multiprocessing``, ``concurrent.futures`` process pools, task queues), it is the same
type with the same message, arguments and attributes. An ``__init__`` taking several
arguments used to fail to unpickle (``TypeError: missing ... positional arguments``)."""

from __future__ import annotations

import copy
import pickle

import pytest

import durably
from durably.errors import DurablyError, StepFailed

_STEP = StepFailed("charge", "3", "ValueError", "card declined")

# One instance of every public error whose __init__ takes more than a message.
MADE: list[DurablyError] = [
    _STEP,
    durably.WorkflowFailed("r1", "ValueError", "boom"),
    durably.RunParked("r1", "timer until 2026-12-01T10:00:00Z", 1.5),
    durably.StaleLease("r1", 3, "renewed elsewhere"),
    durably.ApprovalAlreadyDecided("r1", "req", "approved", "ana", 2.0),
    durably.CompensationFailed("r1", "ValueError: boom", (_STEP,), 2),
    durably.Cancelled("run 'r1' was cancelled", reason="ops asked"),  # a keyword argument
    durably.ToolRejected("refund", "rejected", "ana", "too large"),
    durably.StepTimeout("step 'x' timed out"),
    durably.StoreBusy("locked"),
    durably.HistoryTooLarge("r1", 50_000, 1024, (50_000, 52_428_800)),
]


def test_every_public_error_with_a_constructor_of_its_own_is_listed() -> None:
    mine = {
        name
        for name in durably.__all__
        if isinstance(cls := getattr(durably, name), type)
        and issubclass(cls, DurablyError)
        and "__init__" in vars(cls)
    }
    assert mine <= {type(e).__name__ for e in MADE}


@pytest.mark.parametrize("exc", MADE, ids=lambda e: type(e).__name__)
def test_a_durably_error_pickles_and_copies_intact(exc: DurablyError) -> None:
    exc.added_later = "set after it was made"  # type: ignore[attr-defined]
    for again in (pickle.loads(pickle.dumps(exc)), copy.copy(exc)):
        assert type(again) is type(exc)
        assert str(again) == str(exc) and again.args == exc.args
        assert again.added_later == "set after it was made"  # type: ignore[attr-defined]
        # repr: an error inside (CompensationFailed's StepFailed) compares by identity.
        public = {k: repr(v) for k, v in vars(exc).items() if not k.startswith("_")}
        assert {k: repr(getattr(again, k)) for k in public} == public
