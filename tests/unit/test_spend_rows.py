"""Hand-edited spend ledger rows (a NaN, a negative amount) meet a clear error, never a
budget that silently stops counting or a run that fails. Real journals on both stores,
rows edited with the database's own client."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import durably
from durably.cli import main


class Crash(BaseException):
    """Stands in for a process death inside one process (real deaths: tests/crash)."""


def _url(request: pytest.FixtureRequest, tmp_path: Path, store: str) -> str:
    if store == "sqlite":
        return f"sqlite:///{tmp_path / 'j.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url


def _execute(url: str, sql: str) -> None:
    if url.startswith("sqlite:///"):
        import sqlite3

        conn = sqlite3.connect(url.removeprefix("sqlite:///"))
        with conn:
            assert conn.execute(sql).rowcount == 1
        conn.close()
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute(sql).rowcount == 1


CASES = [
    pytest.param("sqlite", "tokens = -1000", id="sqlite-negative-tokens"),
    pytest.param("sqlite", "cost_usd = -5", id="sqlite-negative-cost"),
    pytest.param("postgres", "tokens = -1000", id="pg-negative-tokens", marks=pytest.mark.postgres),
    pytest.param("postgres", "cost_usd = 'NaN'", id="pg-nan-cost", marks=pytest.mark.postgres),
    pytest.param(
        "postgres", "cost_usd = 'Infinity'", id="pg-infinite-cost", marks=pytest.mark.postgres
    ),
]


@pytest.mark.parametrize(("store", "edit"), CASES)
def test_a_crafted_spend_row_stops_the_run_with_a_clear_error(
    request: pytest.FixtureRequest, tmp_path: Path, store: str, edit: str
) -> None:
    """Before: a NaN cost made every later sum NaN (the budget never triggered again) and a
    negative one handed the run more budget; the run completed over its budget."""
    url = _url(request, tmp_path, store)
    crash = [True]

    def model(n: int) -> int:
        durably.usage(tokens=60, cost_usd=0.6)
        if n == 1 and crash[0]:
            crash[0] = False
            raise Crash
        return n

    with durably.Engine(url, clock=durably.FakeClock()) as e:

        @e.workflow(name="w")
        def w(ctx: durably.Context) -> Any:
            ctx.budget(tokens=100, cost_usd=1.0)
            return [ctx.step(f"m{i}", model, i) for i in range(3)]

        with pytest.raises(Crash):
            e.run(w, run_id="r")
        _execute(url, f"UPDATE spend SET {edit} WHERE position = '0'")
        with pytest.raises(durably.NotADurablyDatabase, match="negative or non-finite"):
            e.resume("r")
        assert e.get_run("r").status not in ("completed", "failed")
        res = CliRunner().invoke(main, ["runs", "show", "r", "--db", url])
        assert res.exit_code == 1
        assert "Error: the spend ledger sums to" in res.output
        assert "Repair the spend rows" in res.output
