"""The JSON codec: round trips, canonical digests, typed rebuilding, no pickle."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import json
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from durably import codec
from durably.errors import SerializationError

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.text()
    | st.floats(allow_nan=False)
    | st.binary(max_size=64)
    | st.datetimes(timezones=st.just(dt.UTC) | st.none())
    | st.dates()
    | st.uuids()
    | st.timedeltas()
    | st.decimals(allow_nan=False, allow_infinity=False)
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=8), inner, max_size=5)
        | st.dictionaries(st.integers(), inner, max_size=3)
    ),
    max_leaves=20,
)


@given(values)
def test_round_trip_is_exact(value: Any) -> None:
    text = codec.dumps(value)
    assert codec.loads(text) == value
    assert json.loads(text) is not None or text == "null"  # plain JSON on disk
    assert codec.dumps(codec.loads(text)) == text  # canonical: stable across round trips


@given(st.dictionaries(st.text(max_size=5), st.integers(), max_size=6))
def test_digest_ignores_key_order(d: dict[str, int]) -> None:
    reordered = dict(reversed(list(d.items())))
    assert codec.digest("s", [d], {}) == codec.digest("s", [reordered], {})


def test_digest_depends_on_name_args_and_kwargs() -> None:
    base = codec.digest("s", [1], {"k": 2})
    assert (
        len(
            {
                base,
                codec.digest("t", [1], {"k": 2}),
                codec.digest("s", [2], {"k": 2}),
                codec.digest("s", [1], {"k": 3}),
                codec.digest("s", [], {"k": 2}),
            }
        )
        == 5
    )


def test_tuple_and_list_differ() -> None:
    assert codec.loads(codec.dumps((1, 2))) == (1, 2)
    assert codec.loads(codec.dumps([1, 2])) == [1, 2]
    assert codec.digest("s", [(1, 2)], {}) != codec.digest("s", [[1, 2]], {})


def test_user_keys_that_look_like_tags_survive() -> None:
    value = {"$bytes": "not base64 at all"}
    assert codec.loads(codec.dumps(value)) == value


def test_non_finite_floats() -> None:
    out = codec.loads(codec.dumps([float("inf"), float("-inf")]))
    assert out == [float("inf"), float("-inf")]
    assert codec.loads(codec.dumps(float("nan"))) != codec.loads(codec.dumps(float("nan")))


class Color(enum.Enum):
    RED = "red"


@dataclasses.dataclass(frozen=True)
class Inner:
    at: dt.datetime
    blob: bytes


@dataclasses.dataclass
class Outer:
    name: str
    color: Color
    inner: Inner
    items: list[Inner]
    maybe: Inner | None = None
    amount: decimal.Decimal = decimal.Decimal("1.50")


def test_dataclasses_rebuild_from_the_hint_only() -> None:
    now = dt.datetime(2026, 11, 29, 12, tzinfo=dt.UTC)
    value = Outer("x", Color.RED, Inner(now, b"\x00\x01"), [Inner(now, b"")], None)
    text = codec.dumps(value)
    assert "Outer" not in text and "Inner" not in text  # no class names in the journal
    assert codec.loads(text, Outer) == value
    assert codec.loads(text) == {  # without a hint: plain data, never a guess
        "name": "x",
        "color": "red",
        "inner": {"at": now, "blob": b"\x00\x01"},
        "items": [{"at": now, "blob": b""}],
        "maybe": None,
        "amount": decimal.Decimal("1.50"),
    }


def test_pydantic_models() -> None:
    pydantic = pytest.importorskip("pydantic", reason="pydantic is an optional extra")

    class Ticket(pydantic.BaseModel):  # type: ignore[name-defined,misc]
        id: int
        opened: dt.datetime
        ident: uuid.UUID

    t = Ticket(id=3, opened=dt.datetime(2026, 1, 1, tzinfo=dt.UTC), ident=uuid.uuid4())
    assert codec.loads(codec.dumps(t), Ticket) == t
    assert codec.loads(codec.dumps([t]), list[Ticket]) == [t]


def test_containers_follow_hints() -> None:
    assert codec.loads(codec.dumps([1, 2]), tuple[int, ...]) == (1, 2)
    assert codec.loads(codec.dumps({"a": [1]}), dict[str, tuple[int, ...]]) == {"a": (1,)}
    assert codec.loads(codec.dumps(1), float) == 1.0
    assert codec.loads(codec.dumps(None), Inner | None) is None


def test_unencodable_value_names_where_and_type() -> None:
    with pytest.raises(SerializationError, match=r"step 'x' output: .*socket"):
        import socket

        with socket.socket() as s:
            codec.dumps({"conn": s}, "step 'x' output")


def test_no_pickle_anywhere() -> None:
    import pathlib

    src = pathlib.Path(codec.__file__).parent
    for path in src.rglob("*.py"):
        text = path.read_text()
        assert "import pickle" not in text and "pickle.loads" not in text, path


class _Level(enum.IntEnum):
    LOW = 1


flat_values = st.dictionaries(
    st.text(max_size=6),
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()  # nan and infinities too: tagged, so not "flat"
    | st.text(max_size=6)
    | st.just(_Level.LOW),
    max_size=4,
)


@given(flat_values)
def test_a_flat_dict_encodes_as_the_full_walk_does(d: dict[str, Any]) -> None:
    # codec.dumps skips to_json for a dict of plain scalars (every step's result and
    # event data): the text must be the one the full walk gives, byte for byte.
    assert codec.dumps(d) == codec.canonical(codec.to_json(d))


@pytest.mark.parametrize(
    "value",
    [
        {"$tag": 1},  # a lone "$" key is escaped as pairs
        {"$a": 1, "b": 2},
        {1: "x"},  # a non-str key makes a $map
        {"x": float("inf")},
        {"x": float("nan")},
        {"x": _Level.LOW},
        {"x": True, "y": None},
        {},
    ],
)
def test_a_dict_the_fast_path_must_not_take_encodes_as_before(value: dict[Any, Any]) -> None:
    assert codec.dumps(value) == codec.canonical(codec.to_json(value))
    assert codec.dumps(codec.loads(codec.dumps(value))) == codec.dumps(value)


def test_a_flat_dict_with_a_lone_surrogate_is_still_refused() -> None:
    with pytest.raises(SerializationError, match="surrogate"):
        codec.dumps({"text": "cut \udc80"})


_flat_dicts = st.dictionaries(
    st.text(max_size=8),
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    max_size=6,
)


@given(_flat_dicts)
def test_a_flat_dict_is_encoded_as_the_canonical_encoder_does(value: dict[str, Any]) -> None:
    # dumps' fast path (a dict of scalars, issue 28) uses a C encoder made once: the
    # same text as the canonical encoding (non-finite floats are tagged by the general
    # path, so they are not generated here).
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    if len(value) == 1 and next(iter(value)).startswith("$"):
        return  # escaped by the general path: not the fast path's
    assert codec.dumps(value) == canonical


_plain = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)


@given(_plain)
def test_canonical_text_is_the_standard_encoders(value: Any) -> None:
    # canonical() uses the C encoder made once without cycle detection (issue 28): every
    # digest, manifest and record is its text, so it must be byte for byte json's.
    expected = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert codec.canonical(value) == expected


def test_a_union_coerces_in_its_own_members_order() -> None:
    # The shape of each hint is cached by the hint object, never by equality: the two
    # unions are equal (and hash alike) but try their members in opposite orders.
    first = float | decimal.Decimal
    second = decimal.Decimal | float
    assert first == second
    assert type(codec.coerce(5, first)) is float
    assert type(codec.coerce(5, second)) is int
    assert type(codec.coerce(5, first)) is float
