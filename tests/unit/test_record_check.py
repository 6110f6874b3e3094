"""StepRecord.check's exact-type fast path accepts what the field-by-field check accepts
and sends everything else to it, which names the field (issue 28 made the common case a
set lookup)."""

from __future__ import annotations

import enum

import pytest

from durably.errors import CorruptRecord
from durably.history import StepRecord

DIGEST = "0" * 64


class Name(enum.StrEnum):
    """A str subclass as a step name: passes isinstance, not the exact-type lookup."""

    FETCH = "fetch"


def test_a_well_formed_record_passes() -> None:
    rec = StepRecord("3", "step", "s", DIGEST, "ok", "{}", finished_at=2.0, usage_tokens=5)
    assert rec.check() is rec


def test_a_str_subclass_still_passes_by_the_slow_path() -> None:
    assert StepRecord("3", "step", Name.FETCH, DIGEST, "ok", "{}").check().name == "fetch"


@pytest.mark.parametrize(
    ("field", "value", "shown"),
    [
        ("attempts", True, "attempts is bool"),  # bool is an int subclass, never a column's
        ("started_at", "yesterday", "started_at is str"),
        ("output", 7, "output is int"),
    ],
)
def test_a_wrong_type_is_named(field: str, value: object, shown: str) -> None:
    rec = StepRecord("3", "step", "s", DIGEST, "ok", "{}").replace(**{field: value})
    with pytest.raises(CorruptRecord, match=shown):
        rec.check()
