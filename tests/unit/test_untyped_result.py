"""A step returning a pydantic model without a return annotation warns once, naming the
annotation to add (its result comes back as a dict, live and on replay)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pydantic
import pytest

import durably


class Order(pydantic.BaseModel):
    id: str
    total: int


def fetch_order():  # type: ignore[no-untyped-def]  # no return annotation: the trap
    return Order(id="A-1", total=3)


def fetch_typed() -> Order:
    return Order(id="A-2", total=4)


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[durably.Engine]:
    e = durably.Engine(f"sqlite:///{tmp_path / 'j.db'}")
    yield e
    e.close()


def test_an_unannotated_pydantic_result_warns_once_naming_the_annotation(
    engine: durably.Engine,
) -> None:
    @engine.workflow(name="orders")
    def orders(ctx: durably.Context) -> list[str]:
        a = ctx.step("fetch-untyped", fetch_order)
        b = ctx.step("fetch-untyped", fetch_order)
        c = ctx.step("fetch-typed", fetch_typed)
        return [type(a).__name__, type(b).__name__, type(c).__name__]

    with pytest.warns(UserWarning, match=r"add the annotation `-> Order` to fetch_order") as got:
        assert engine.run(orders, run_id="o") == ["dict", "dict", "Order"]
    assert len(got) == 1
