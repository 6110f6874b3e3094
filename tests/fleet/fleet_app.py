"""The workflows the fleet tests run on real worker processes.

``durably worker fleet_app:engine`` builds the engine from the environment:
``DURABLY_URL`` (journal), ``FLEET_WORLD`` (the world's SQLite file), ``FLEET_LEASE_S``,
and ``FLEET_KILL_AT`` (``POS:WINDOW``: SIGKILL the worker when a step reaches it).
The world deduplicates effects on their idempotency key, counts every execution of every
step (with the pid that ran it), and refuses a writer whose fencing token is older than
one it has already seen for the run.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import time
from collections.abc import Callable
from typing import Any

import durably
import durably.engine


class StaleToken(Exception):
    """The world refused a writer with an old fencing token."""


def world() -> sqlite3.Connection:
    conn = sqlite3.connect(os.environ["FLEET_WORLD"], isolation_level=None, timeout=30)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA busy_timeout=30000")
    return conn


def init_world(path: str) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(
        """
        CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, run_id TEXT, requests INT);
        CREATE TABLE IF NOT EXISTS executions (step TEXT, key TEXT, pid INT, token INT);
        CREATE TABLE IF NOT EXISTS fences (run_id TEXT PRIMARY KEY, token INT);
        CREATE TABLE IF NOT EXISTS refusals (key TEXT, token INT, newest INT);
        """
    )
    conn.close()


def executed(step: str, key: str, token: int = 0) -> None:
    with world() as w:
        w.execute("INSERT INTO executions VALUES (?, ?, ?, ?)", (step, key, os.getpid(), token))


def apply_effect(run_id: str, key: str, token: int) -> str:
    """Apply an effect once per key, refusing a writer older than the newest seen."""
    w = world()
    try:
        w.execute("BEGIN IMMEDIATE")
        row = w.execute("SELECT token FROM fences WHERE run_id = ?", (run_id,)).fetchone()
        if row is not None and token < row[0]:
            w.execute("INSERT INTO refusals VALUES (?, ?, ?)", (key, token, row[0]))
            w.execute("COMMIT")
            raise StaleToken(f"{key}: token {token} < {row[0]}")
        w.execute(
            "INSERT INTO fences VALUES (?, ?) ON CONFLICT (run_id) DO UPDATE SET token ="
            " max(token, excluded.token)",
            (run_id, token),
        )
        w.execute(
            "INSERT INTO effects VALUES (?, ?, 1) ON CONFLICT (key) DO UPDATE SET"
            " requests = requests + 1",
            (key, run_id),
        )
        w.execute("COMMIT")
    finally:
        w.close()
    return f"done:{key}"


def price(n: int) -> int:
    return n * 10


@durably.step(effect=True, retries=3, backoff=0.05, no_retry=(StaleToken,))
def charge(run_id: str, amount: int, *, idempotency_key: str, fencing_token: int) -> str:
    executed("charge", idempotency_key, fencing_token)
    return apply_effect(run_id, idempotency_key, fencing_token)


@durably.step(effect=True, retries=3, backoff=0.05, no_retry=(StaleToken,))
def slow_charge(run_id: str, sleep_s: float, *, idempotency_key: str, fencing_token: int) -> str:
    executed("slow_charge", idempotency_key, fencing_token)
    time.sleep(sleep_s)
    return apply_effect(run_id, idempotency_key, fencing_token)


def after(n: int, *, idempotency_key: str, fencing_token: int) -> int:
    executed("after", idempotency_key, fencing_token)
    return n + 1


def touch(name: str, *, idempotency_key: str, fencing_token: int) -> str:
    executed(name, idempotency_key, fencing_token)
    return name


def wait_for_file(path: str, timeout_s: float = 60) -> None:
    """Workflow code (not a step) that waits for the test to create ``path``."""
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.02)


def kill_hook(at: str) -> durably.engine.FaultHook:
    """A fault hook that SIGKILLs this process when a step reaches ``at`` (``POS:WINDOW``,
    e.g. ``1:effect``: the charge happened, its result is not recorded yet)."""
    position, window = at.split(":")

    def hook(run_id: str, pos: str, name: str, win: str) -> None:
        if (pos, win) == (position, window):
            os.kill(os.getpid(), signal.SIGKILL)

    return hook


def make_engine(url: str | None = None) -> durably.Engine:
    lease_s = float(os.environ.get("FLEET_LEASE_S", "30"))
    kill_at = os.environ.get("FLEET_KILL_AT")
    engine = durably.Engine(
        url,
        lease_s=lease_s,
        heartbeat_s=lease_s / 4,
        fault_hook=kill_hook(kill_at) if kill_at else None,
    )

    @engine.workflow(name="order")
    def order(ctx: durably.Context, n: int) -> dict[str, Any]:
        amount = ctx.step("price", price, n)
        receipt = ctx.step("charge", charge, ctx.run_id, amount)
        done = ctx.step("after", after, n)
        return {"receipt": receipt, "after": done}

    @engine.workflow(name="slow")
    def slow(ctx: durably.Context, n: int, sleep_s: float) -> dict[str, Any]:
        ctx.step("price", price, n)
        receipt = ctx.step("slow_charge", slow_charge, ctx.run_id, sleep_s)
        done = ctx.step("after", after, n)
        return {"receipt": receipt, "after": done}

    @engine.workflow(name="stubborn")
    def stubborn(ctx: durably.Context, gate: str) -> str:
        ctx.step("first", touch, "first")
        wait_for_file(gate)  # the test takes the run over meanwhile
        for name in ("e1", "e2", "e3"):
            try:
                ctx.step(name, touch, name)
            except:  # noqa: E722  (a workflow that swallows everything)
                pass
        return "went on"

    @engine.workflow(name="pause")
    def pause(ctx: durably.Context, gate: str) -> str:
        ctx.step("first", touch, "first")
        # Workflow code between two steps, until the test opens the gate: the test stops
        # us here. (A fixed pause of a second was a window the test had to hit, and a
        # loaded machine missed it: the worker ran "next" before its SIGSTOP.)
        wait_for_file(gate)
        ctx.step("next", touch, "next")
        return "done"

    return engine


def lazy_engine(make: Callable[[], durably.Engine]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that builds ``engine`` with ``make`` on first access, so
    importing the module (as ``durably worker module:engine`` does) opens no database
    before the worker asks for it."""
    built: list[durably.Engine] = []

    def module_getattr(name: str) -> Any:
        if name != "engine":
            raise AttributeError(name)
        if not built:
            built.append(make())
        return built[0]

    return module_getattr


__getattr__ = lazy_engine(make_engine)
