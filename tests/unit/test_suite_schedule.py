"""The suite's own schedule under pytest-xdist (tests/conftest.py): the timing-bound
modules are one unit, so their tests never run beside each other; every other test is
its own unit."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import SERIAL_TIMING, xdist_unit

ROOT = Path(__file__).resolve().parents[2]


def test_every_serial_timing_module_exists() -> None:
    """A renamed or moved module would silently leave the group and run beside the rest."""
    missing = sorted(p for p in SERIAL_TIMING if not (ROOT / p).is_file())
    assert not missing, f"tests/conftest.py SERIAL_TIMING names no such module: {missing}"


def test_the_timing_modules_are_one_unit_and_other_tests_one_each() -> None:
    units = {xdist_unit(f"{path}::test_x[sqlite]") for path in SERIAL_TIMING}
    assert len(units) == 1
    others = ["tests/unit/test_lease.py::test_a", "tests/unit/test_lease.py::test_b[pg]"]
    assert {xdist_unit(n) for n in others} == set(others)
    assert units.isdisjoint(others)
