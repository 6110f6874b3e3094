"""A refund workflow with one unkeyed side effect, for ``durably chaos --workflow``.

Three steps: a model drafts the customer's reply (it reports its token spend), a refund is
created with the step's idempotency key (the payments table deduplicates on it), and the
reply is emailed by a function that takes no key and is not declared an effect. Kill the
run between the email and its record, and the resume sends the email again::

    durably chaos --workflow examples/sample_unkeyed.py:refund --args '["ana", 40]'

reports ``send_email`` as an unkeyed re-execution and exits non-zero. The fix is to give
``send_email`` an ``idempotency_key`` parameter and pass it to the mail service.

The "outside world" is a SQLite file (``SAMPLE_WORLD``, default in the temp folder); each
call opens its own connection, so the functions are safe in forked processes.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
from contextlib import closing
from pathlib import Path

import durably

WORLD = Path(os.environ.get("SAMPLE_WORLD", Path(tempfile.gettempdir()) / "sample_world.db"))

engine = durably.Engine(os.environ.get("DURABLY_URL", "sqlite:///sample_unkeyed.db"))


def _world() -> sqlite3.Connection:
    db = sqlite3.connect(WORLD, isolation_level=None, timeout=10)
    db.execute(
        "CREATE TABLE IF NOT EXISTS refunds (key TEXT PRIMARY KEY, customer TEXT, cents INTEGER)"
    )
    db.execute(
        "CREATE TABLE IF NOT EXISTS emails (id INTEGER PRIMARY KEY, recipient TEXT, body TEXT)"
    )
    return db


def draft_reply(customer: str, amount: int) -> str:
    """The model call: scripted here, billed like a real one."""
    durably.usage(tokens=1_200)
    return f"Dear {customer}, we have refunded {amount} EUR. Sorry for the trouble."


@durably.step(effect=True)
def create_refund(customer: str, amount: int, idempotency_key: str) -> dict[str, object]:
    """Create the refund once per key: a retry finds the first one."""
    with closing(_world()) as db:
        db.execute(
            "INSERT OR IGNORE INTO refunds VALUES (?, ?, ?)",
            (idempotency_key, customer, amount * 100),
        )
    return {"customer": customer, "cents": amount * 100}


def send_email(to: str, body: str) -> str:
    """Send the reply. No key, not declared an effect: a re-run sends it twice."""
    with closing(_world()) as db:
        db.execute("INSERT INTO emails (recipient, body) VALUES (?, ?)", (to, body))
    return "sent"


@engine.workflow(name="refund", version="1")
def refund(ctx: durably.Context, customer: str, amount: int) -> dict[str, object]:
    """Draft a reply, refund, and email the customer."""
    reply = ctx.step("draft_reply", draft_reply, customer, amount)
    made = ctx.step("create_refund", create_refund, customer, amount)
    status = ctx.step("send_email", send_email, customer, reply)
    return {"refund": made, "email": status}


if __name__ == "__main__":
    print(engine.run(refund, "ana", 40, run_id="refund-ana-1"))
