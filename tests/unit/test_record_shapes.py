"""A loaded record's type check keeps refusing bad values on its fast path.

``StepRecord.check`` compares the tuple of its values' exact types with the well-typed
ones, so a long history costs one tuple and one set lookup per record (issue 28), and
only a record off that path takes the field-by-field check. The fast path must never let
through a record whose types differ in any field: a ``bool`` where an ``int`` belongs,
text where a number belongs, a ``str`` subclass (well typed, off the fast path), each
checked after well-typed records went through it.
"""

from __future__ import annotations

from typing import Any

import pytest

from durably.journal.records import CorruptRecord, RunRecord, StepRecord

DIGEST = "a" * 64


def _good(**changes: Any) -> StepRecord:
    base = StepRecord("0", "step", "s", DIGEST, "ok", output='{"i":1}', started_at=1.0)
    return base.replace(**changes) if changes else base


class Text(str):
    """A str subclass: well typed (isinstance str), a shape of its own."""


@pytest.mark.parametrize(
    ("field", "bad"),
    [
        ("attempts", True),  # bool is an int subclass, never a column's value
        ("attempts", "many"),
        ("started_at", "yesterday"),
        ("usage_tokens", 1.5),
        ("usage_cost_usd", "free"),
        ("output", 7),
        ("name", None),
    ],
)
def test_a_bad_type_is_refused_after_good_shapes_were_remembered(field: str, bad: Any) -> None:
    for good in (_good(), _good(usage_tokens=3, usage_cost_usd=0.5), _good(attempts=2)):
        assert good.check() is good  # remembered, and checked again from memory
        assert good.check() is good
    with pytest.raises(CorruptRecord, match=field):
        _good(**{field: bad}).check()


def test_a_subclass_shape_is_checked_then_remembered_without_changing_the_outcome() -> None:
    rec = _good(name=Text("s"))
    assert rec.check() is rec
    assert rec.check() is rec
    with pytest.raises(CorruptRecord, match="attempts"):
        _good(name=Text("s"), attempts=True).check()


def _run(**changes: Any) -> RunRecord:
    fields: dict[str, Any] = {
        "run_id": "r1",
        "workflow": "wf",
        "version": None,
        "prompt_version": None,
        "queue": "default",
        "input": "{}",
        "input_digest": DIGEST,
        "codec_version": 1,
        "status": "running",
        **changes,
    }
    return RunRecord(**fields)


@pytest.mark.parametrize(
    ("field", "bad"),
    [
        ("fencing_token", True),
        ("fencing_token", "3"),
        ("created_at", "today"),
        ("lease_expires_at", "soon"),
        ("owner", 7),
        ("workflow", None),
        ("starts", 1.0),
    ],
)
def test_a_bad_run_row_type_is_refused_after_good_shapes_were_remembered(
    field: str, bad: Any
) -> None:
    """RunRecord.check remembers the exact-type tuples of rows that passed (every claim,
    creation and finish reads one); a row differing in one field's type is checked field
    by field and refused, naming the field."""
    for good in (_run(), _run(owner="me", lease_expires_at=5.0), _run(fencing_token=2)):
        assert good.check() is good
        assert good.check() is good
    with pytest.raises(CorruptRecord, match=field):
        _run(**{field: bad}).check()


def test_run_row_values_are_checked_whatever_the_shape() -> None:
    """The remembered shape covers the types only: a status, an outcome or an
    incarnation is checked on every row."""
    assert _run().check()
    with pytest.raises(CorruptRecord, match="unknown status"):
        _run(status="sleeping").check()
    with pytest.raises(CorruptRecord, match="without an outcome"):
        _run(status="completed").check()
