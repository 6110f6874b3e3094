"""The scripted incident-response agent of the crash matrix, and the world it acts on.

The agent takes five turns; each turn is one model call followed by one tool call:

====  ==============  =====
turn  tool            kind
====  ==============  =====
1     fetch_alert     read
2     open_ticket     write
3     page_oncall     write
4     query_logs      read
5     post_status     write
====  ==============  =====

So a run is 10 steps at positions ``0`` .. ``9``: the model call of turn ``k`` is at
``2(k-1)`` and its tool call at ``2k-1``. The model is scripted (its decisions depend only
on the turn and the transcript), and its spend follows a cost model in which the context
grows every turn: turn ``k`` costs ``4,400 + 1,500 (k-1)`` tokens, 37,000 for a clean run.

The *world* is a separate SQLite database standing in for the ticketing system, the pager,
the status page and the model provider's token meter. It deduplicates writes on their
idempotency key only when asked to (``honour_keys``), so the same agent code can be run
against a world that ignores keys and one that honours them.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import durably

TURNS = 5
STEPS = 2 * TURNS
ALERT_ID = "A-42"
WRITE_TABLES: tuple[str, ...] = ("tickets", "pages", "status_posts")
TOOL_OF_TURN: tuple[str, ...] = (
    "fetch_alert",
    "open_ticket",
    "page_oncall",
    "query_logs",
    "post_status",
)
WRITE_TOOLS = frozenset({"open_ticket", "page_oncall", "post_status"})

FaultHook = Callable[[str, str, str, str], None]
"""The engine's fault-hook shape; the baselines call the same hook at the same points."""


def turn_tokens(turn: int) -> int:
    """Tokens one model call costs at ``turn`` (1-based): the context grows each turn."""
    return 4_400 + 1_500 * (turn - 1)


CLEAN_TOKENS = sum(turn_tokens(k) for k in range(1, TURNS + 1))
"""What a run without crashes spends: 37,000 tokens."""


def step_name(position: int) -> str:
    """The step name at ``position`` (0..9): ``model:<turn>`` or the turn's tool."""
    turn = position // 2 + 1
    return f"model:{turn}" if position % 2 == 0 else TOOL_OF_TURN[turn - 1]


_SCHEMA = """
CREATE TABLE IF NOT EXISTS alerts (id TEXT PRIMARY KEY, service TEXT, summary TEXT);
CREATE TABLE IF NOT EXISTS logs (service TEXT, line TEXT);
CREATE TABLE IF NOT EXISTS tickets (id INTEGER PRIMARY KEY, run TEXT, body TEXT, key TEXT);
CREATE TABLE IF NOT EXISTS pages (id INTEGER PRIMARY KEY, run TEXT, body TEXT, key TEXT);
CREATE TABLE IF NOT EXISTS status_posts (id INTEGER PRIMARY KEY, run TEXT, body TEXT,
                                         key TEXT);
CREATE TABLE IF NOT EXISTS token_meter (id INTEGER PRIMARY KEY, run TEXT, turn INTEGER,
                                        tokens INTEGER);
CREATE TABLE IF NOT EXISTS seen_keys (key TEXT PRIMARY KEY, result TEXT NOT NULL);
"""

_LOG_LINES = (
    "ERROR upstream timeout after 30s",
    "ERROR pool exhausted (64/64)",
    "WARN retry budget 80% used",
    "ERROR upstream timeout after 30s",
)


class World:
    """The outside world: tickets, pages, status posts and a token meter in one SQLite file.

    Every write commits before it returns, so it survives the death of the caller's
    process (SIGKILL does not lose data the kernel already has). With ``honour_keys`` a
    write whose idempotency key was seen before returns the first write's result and
    changes nothing, like Stripe's idempotent requests; without it every call writes.
    """

    def __init__(self, path: Path, honour_keys: bool) -> None:
        self.path = path
        self.honour_keys = honour_keys
        # Open per process, never shared across a fork.
        self._db = sqlite3.connect(path, isolation_level=None, timeout=10)
        # NORMAL in WAL survives process death, which is what the matrix tests; the world
        # is not the system under test, so it need not survive power loss.
        self._db.execute("PRAGMA journal_mode = WAL")
        self._db.execute("PRAGMA synchronous = NORMAL")

    @classmethod
    def create(cls, path: Path, honour_keys: bool) -> World:
        """Create the world database with its one alert and its log lines."""
        world = cls(path, honour_keys)
        db = world._db
        db.executescript(_SCHEMA)
        db.execute(
            "INSERT OR IGNORE INTO alerts VALUES (?, ?, ?)",
            (ALERT_ID, "checkout-api", "p99 latency above 2 s for 10 minutes"),
        )
        if db.execute("SELECT COUNT(*) FROM logs").fetchone()[0] == 0:
            db.executemany(
                "INSERT INTO logs VALUES ('checkout-api', ?)", [(line,) for line in _LOG_LINES]
            )
        return world

    def close(self) -> None:
        """Close this process's connection."""
        self._db.close()

    # -- reads -------------------------------------------------------------------------

    def alert(self, alert_id: str) -> dict[str, Any]:
        """The alert's service and summary."""
        row = self._db.execute(
            "SELECT service, summary FROM alerts WHERE id = ?", (alert_id,)
        ).fetchone()
        if row is None:
            raise KeyError(f"no alert {alert_id!r}")
        return {"id": alert_id, "service": row[0], "summary": row[1]}

    def logs(self, service: str) -> list[str]:
        """The service's recent log lines."""
        rows = self._db.execute("SELECT line FROM logs WHERE service = ?", (service,))
        return [r[0] for r in rows]

    # -- writes ------------------------------------------------------------------------

    def write(self, table: str, run: str, body: str, key: str | None) -> dict[str, Any]:
        """Insert one row into ``table`` (a ticket, page or status post); return its id.

        The key check and the insert are one transaction, so a retry racing the first
        attempt cannot slip between them.
        """
        if table not in WRITE_TABLES:
            raise ValueError(f"unknown world table {table!r}")
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            if self.honour_keys and key is not None:
                seen = db.execute("SELECT result FROM seen_keys WHERE key = ?", (key,)).fetchone()
                if seen is not None:
                    db.execute("COMMIT")
                    result: dict[str, Any] = json.loads(seen[0])
                    return result
            cur = db.execute(
                f"INSERT INTO {table} (run, body, key) VALUES (?, ?, ?)", (run, body, key)
            )
            result = {"id": cur.lastrowid}
            if self.honour_keys and key is not None:
                db.execute("INSERT INTO seen_keys VALUES (?, ?)", (key, json.dumps(result)))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return result

    def charge(self, run: str, turn: int, tokens: int) -> None:
        """Meter model spend: the provider bills every call, recorded or not."""
        self._db.execute(
            "INSERT INTO token_meter (run, turn, tokens) VALUES (?, ?, ?)", (run, turn, tokens)
        )

    # -- audit -------------------------------------------------------------------------

    def writes(self) -> int:
        """Rows written to tickets, pages and status posts."""
        return sum(
            self._db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in WRITE_TABLES
        )

    def tokens(self) -> int:
        """Tokens the meter has billed."""
        return int(
            self._db.execute("SELECT COALESCE(SUM(tokens), 0) FROM token_meter").fetchone()[0]
        )


# -- the agent's brain and hands -----------------------------------------------------


def decide(turn: int, transcript: list[dict[str, Any]]) -> dict[str, Any]:
    """The scripted model: which tool to call at ``turn`` and with what arguments.

    Decisions depend only on the turn and what earlier tools returned, like a model at
    temperature zero on a fixed prompt; a ticket number seen in the transcript is quoted
    in later messages.
    """
    observed = {t["tool"]: t["result"] for t in transcript if "result" in t}
    alert = observed.get("fetch_alert", {})
    ticket = observed.get("open_ticket", {}).get("id")
    tool = TOOL_OF_TURN[turn - 1]
    args: dict[str, Any]
    if tool == "fetch_alert":
        args = {"alert_id": ALERT_ID}
    elif tool == "open_ticket":
        args = {"title": f"{alert.get('service')}: {alert.get('summary')}"}
    elif tool == "page_oncall":
        args = {"message": f"ticket #{ticket}: {alert.get('service')} is degraded"}
    elif tool == "query_logs":
        args = {"service": alert.get("service")}
    else:
        errors = sum("ERROR" in line for line in observed.get("query_logs", []))
        args = {
            "body": f"Investigating {alert.get('service')} ({errors} errors in the"
            f" logs); ticket #{ticket}"
        }
    return {"turn": turn, "tool": tool, "args": args}


class Agent:
    """The agent's model call and tools, bound to one world and one run name."""

    def __init__(self, world: World, run: str) -> None:
        self.world = world
        self.run = run

    def model(self, turn: int, transcript: list[dict[str, Any]]) -> dict[str, Any]:
        """One model call: bill it, report it to durably, return the decision."""
        tokens = turn_tokens(turn)
        self.world.charge(self.run, turn, tokens)
        durably.usage(tokens=tokens)
        return decide(turn, transcript)

    def tool(self, name: str, args: dict[str, Any], key: str | None) -> Any:
        """Call tool ``name``; writes carry ``key``, which the world may honour."""
        w = self.world
        if name == "fetch_alert":
            return w.alert(args["alert_id"])
        if name == "query_logs":
            return w.logs(args["service"])
        table = {"open_ticket": "tickets", "page_oncall": "pages", "post_status": "status_posts"}[
            name
        ]
        body = args.get("title") or args.get("message") or args.get("body") or ""
        return w.write(table, self.run, body, key)


def build_workflow(engine: durably.Engine, agent: Agent) -> durably.Workflow:
    """Register the agent on ``engine`` as workflow ``incident-agent`` (durably's API).

    Writes are declared ``effect=True`` and take the step's ``idempotency_key``: after a
    crash between a write and its record, the resume calls the tool again with the same
    key, which a world honouring keys turns into a lookup.
    """

    def model(turn: int, transcript: list[dict[str, Any]]) -> dict[str, Any]:
        return agent.model(turn, transcript)

    def read_tool(name: str, args: dict[str, Any]) -> Any:
        return agent.tool(name, args, None)

    @durably.step(effect=True)
    def write_tool(name: str, args: dict[str, Any], idempotency_key: str) -> Any:
        return agent.tool(name, args, idempotency_key)

    @engine.workflow(name="incident-agent")
    def incident(ctx: durably.Context, alert_id: str) -> list[dict[str, Any]]:
        transcript: list[dict[str, Any]] = []
        for turn in range(1, TURNS + 1):
            decision = ctx.step(f"model:{turn}", model, turn, transcript)
            fn = write_tool if decision["tool"] in WRITE_TOOLS else read_tool
            result = ctx.step(decision["tool"], fn, decision["tool"], decision["args"])
            transcript.append({"tool": decision["tool"], "result": result})
        return transcript

    return incident


# -- the two baselines ---------------------------------------------------------------


def run_baseline(agent: Agent, hook: FaultHook | None, checkpoint: Path | None) -> None:
    """Run the agent without durably, calling ``hook`` at the engine's 10 x 3 points.

    With ``checkpoint`` the conversation is saved once per turn, after the turn's tool
    result (what most hand-rolled agents do); a restart resumes at the first unsaved turn,
    so a kill anywhere inside a turn, even right after its tool step, loses the whole
    turn. Without it nothing survives the process: a restart starts from scratch. Here
    "recorded" only means "added to the in-memory conversation".
    """
    start, transcript = 1, list[dict[str, Any]]()
    store = _Checkpoints(checkpoint) if checkpoint is not None else None
    if store is not None:
        start, transcript = store.load()

    def at(pos: int, window: str) -> None:
        if hook is not None:
            hook(agent.run, str(pos), step_name(pos), window)

    for turn in range(start, TURNS + 1):
        pos = 2 * (turn - 1)
        at(pos, "before")
        decision = agent.model(turn, transcript)
        at(pos, "effect")
        at(pos, "recorded")
        at(pos + 1, "before")
        result = agent.tool(decision["tool"], decision["args"], f"{agent.run}:{pos + 1}")
        at(pos + 1, "effect")
        transcript.append({"tool": decision["tool"], "result": result})
        at(pos + 1, "recorded")
        if store is not None:
            store.save(turn, transcript)
    if store is not None:
        store.close()


class _Checkpoints:
    """One row of conversation state, replaced after every turn in one transaction."""

    def __init__(self, path: Path) -> None:
        self._db = sqlite3.connect(path, isolation_level=None, timeout=10)
        self._db.execute("PRAGMA journal_mode = WAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS ckpt (id INTEGER PRIMARY KEY CHECK"
            " (id = 1), turn INTEGER, state TEXT)"
        )

    def load(self) -> tuple[int, list[dict[str, Any]]]:
        row = self._db.execute("SELECT turn, state FROM ckpt WHERE id = 1").fetchone()
        if row is None:
            return 1, []
        return int(row[0]) + 1, json.loads(row[1])

    def save(self, turn: int, transcript: list[dict[str, Any]]) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO ckpt VALUES (1, ?, ?)", (turn, json.dumps(transcript))
        )

    def close(self) -> None:
        self._db.close()
