"""Hand-edited journal rows meet a clear error, never a traceback or a `failed` run.

SQLite keeps whatever type a row is given (text in an INTEGER column stays text) and
whatever bytes (invalid UTF-8 in a TEXT column): every command that reads such a row,
and ``engine.run`` resuming it, must name the bad row (issue 9 §3 "Values that crash
decoding", "Terminal output"). Real SQLite files, rows written with sqlite3 directly.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import durably
from durably.cli import main

# (table, SQL assignment, parameters): each makes one row unreadable to durably.
CRAFTED: dict[str, tuple[str, str, tuple[Any, ...]]] = {
    "text attempts": ("steps", "attempts = 'many'", ()),
    "text started_at": ("steps", "started_at = 'yesterday'", ()),
    "text tokens": ("steps", "usage_tokens = 'lots'", ()),
    "blob tokens": ("steps", "usage_tokens = X'00ff'", ()),
    "text cost": ("steps", "usage_cost_usd = 'free'", ()),
    "superscript position": ("steps", "position = ?", ("\u00b2",)),
    "position of 5000 digits": ("steps", "position = ?", ("9" * 5000,)),
    "position with a newline": ("steps", "position = ?", ("0\n",)),
    "text created_at": ("runs", "created_at = 'today'", ()),
    "text generation": ("runs", "generation = 'x'", ()),
    "incarnation with a newline": ("runs", "incarnation = incarnation || ?", ("\n",)),
    "invalid UTF-8 workflow": ("runs", "workflow = CAST(? AS TEXT)", (b"w\xff\xfe",)),
    "invalid UTF-8 step name": ("steps", "name = CAST(? AS TEXT)", (b"a\xff",)),
}


def _workflow(engine: durably.Engine) -> Any:
    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> int:
        return int(ctx.step("a", lambda: 1))

    return w


def _journal(path: Path, crafted: str) -> str:
    """A run with one recorded step, set back to queued, with one row made unreadable."""
    url = f"sqlite:///{path}"
    with durably.Engine(url) as engine:
        engine.run(_workflow(engine), run_id="r")
    table, assignment, params = CRAFTED[crafted]
    where = "position = '0'" if table == "steps" else "run_id = 'r'"
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE runs SET status = 'queued', outcome = NULL, finished_at = NULL")
        assert conn.execute(f"UPDATE {table} SET {assignment} WHERE {where}", params).rowcount
    conn.close()
    return url


def _state(path: Path) -> tuple[str, Any, Any]:
    """The run's status, owner and lease, read past any undecodable text."""
    conn = sqlite3.connect(path)
    conn.text_factory = bytes
    status, owner, lease = conn.execute(
        "SELECT status, owner, lease_expires_at FROM runs"
    ).fetchone()
    conn.close()
    return status.decode(), owner, lease


COMMANDS = [
    ["runs", "list"],
    ["runs", "list", "--json"],
    ["runs", "show", "r"],
    ["runs", "show", "r", "--json"],
    ["retry", "r"],
    ["skip", "r", "--output", "1"],
    ["fork", "r", "--at", "1"],
    ["fork", "r", "--at", "1", "--json"],
]


@pytest.mark.parametrize("crafted", list(CRAFTED))
def test_commands_meet_a_crafted_row_with_a_clear_error(tmp_path: Path, crafted: str) -> None:
    url = _journal(tmp_path / "j.db", crafted)
    for command in COMMANDS:
        result = CliRunner().invoke(main, [*command, "--db", url])
        # A clean error is a message and exit status 1; a crash leaves result.exception
        # set to something other than SystemExit.
        assert result.exception is None or isinstance(result.exception, SystemExit), (
            command,
            result.exception,
        )
        if "--json" in command and result.exit_code == 0:
            json.loads(result.stdout)
    assert _state(tmp_path / "j.db")[0] == "queued"


@pytest.mark.parametrize("crafted", list(CRAFTED))
def test_resuming_a_crafted_row_raises_a_durably_error_and_never_fails_the_run(
    tmp_path: Path, crafted: str
) -> None:
    url = _journal(tmp_path / "j.db", crafted)
    with durably.Engine(url) as engine:
        _workflow(engine)
        with pytest.raises(durably.DurablyError, match=r"corrupt|not int|not float|position"):
            engine.resume("r")
    status, owner, lease = _state(tmp_path / "j.db")
    # Not failed, and the lease given back: fix the row and the run resumes at once.
    assert status in ("queued", "running") and owner is None and lease is None


@pytest.mark.parametrize("lease", [1e300, float("inf"), 1e18], ids=["1e300", "inf", "1e18"])
def test_a_lease_no_engine_writes_is_refused_not_waited_for(tmp_path: Path, lease: float) -> None:
    # Another host's owner (never provably dead from here) with a lease ending in the
    # far future: engine.run waits for plausible leases only, and never crashes on one.
    path = tmp_path / "j.db"
    url = f"sqlite:///{path}"
    with durably.Engine(url) as engine:
        w = _workflow(engine)
        engine.start(w, run_id="r")
        conn = sqlite3.connect(path)
        with conn:
            conn.execute(
                "UPDATE runs SET status = 'running', owner = ?, lease_expires_at = ?",
                ("elsewhere|123|456|0a0a:0b0b:0c0c", lease),
            )
        conn.close()
        with pytest.raises(durably.RunLeased):
            engine.run(w, run_id="r")
