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

from durably.journal.records import CorruptRecord, StepRecord

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
