"""``@durably.tool``: a tool records itself as a step in a workflow body (sync and
async), is the plain function elsewhere, applies its kind through ``ctx.step`` too,
composes with ``@durably.step`` in either order, and a destructive tool parks for an
approval bound to its name and arguments and runs once after ``durably approve``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import durably
from durably.cli import main as cli
from durably.steps import signature_of
from durably.tools import UnsafeToolWarning


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/journal.db"


CALLS: list[tuple[str, Any]] = []


@durably.tool(kind="read")
def lookup(order_id: str) -> dict[str, str]:
    """Look up an order."""
    CALLS.append(("lookup", order_id))
    return {"id": order_id, "state": "paid"}


@durably.tool(kind="write")
def refund(order_id: str, cents: int, idempotency_key: str) -> str:
    """Refund an order."""
    CALLS.append(("refund", idempotency_key))
    return f"refunded {cents} on {order_id}"


@durably.tool(kind="read")
async def alookup(order_id: str) -> dict[str, str]:
    """Look up an order (async)."""
    CALLS.append(("alookup", order_id))
    return {"id": order_id}


@pytest.fixture(autouse=True)
def _clear() -> None:
    CALLS.clear()


def test_direct_call_in_a_sync_workflow_is_a_recorded_step(url: str) -> None:
    with durably.Engine(url) as engine:

        @engine.workflow(name="wf")
        def wf(ctx: durably.Context) -> Any:
            order = lookup("A-1")
            return [order, refund("A-1", 500)]

        out = engine.run(wf, run_id="r1")
        assert out == [{"id": "A-1", "state": "paid"}, "refunded 500 on A-1"]
        hist = engine.history("r1")
        assert [(h.position, h.name, h.status) for h in hist if h.status == "ok"] == [
            ("0", "lookup", "ok"),
            ("1", "refund", "ok"),
        ]
        key = [c[1] for c in CALLS if c[0] == "refund"]
        assert len(key) == 1 and key[0].endswith(":1")
        # Replay returns the records and runs nothing.
        CALLS.clear()
        assert engine.run(wf, run_id="r1") == out
        assert CALLS == []


def test_outside_a_workflow_and_inside_a_step_it_is_the_plain_function(url: str) -> None:
    assert lookup("B") == {"id": "B", "state": "paid"}
    assert refund("B", 1, idempotency_key="k") == "refunded 1 on B"
    with durably.Engine(url) as engine:

        def outer() -> Any:
            return lookup("C")  # inside a running step: no step of its own

        @engine.workflow(name="wf")
        def wf(ctx: durably.Context) -> Any:
            return ctx.step("outer", outer)

        assert engine.run(wf, run_id="r") == {"id": "C", "state": "paid"}
        assert [h.name for h in engine.history("r")] == ["outer"]


def test_async_workflow_gets_an_awaitable(url: str) -> None:
    with durably.Engine(url) as engine:

        @engine.workflow(name="awf")
        async def awf(ctx: durably.AsyncContext) -> Any:
            a = await alookup("X")
            b = await ctx.step("second", lookup, "Y")
            both = await ctx.gather(alookup("P"), lookup("Q"))
            return [a, b, both]

        out = asyncio.run(engine.run_async(awf, run_id="a1"))
        assert out == [
            {"id": "X"},
            {"id": "Y", "state": "paid"},
            [{"id": "P"}, {"id": "Q", "state": "paid"}],
        ]
        names = [(h.position, h.name) for h in engine.history("a1") if h.status == "ok"]
        assert ("0", "alookup") in names and ("1", "second") in names
        assert ("2.0.0", "alookup") in names and ("2.1.0", "lookup") in names


def test_async_tool_in_a_sync_workflow_is_refused_clearly(url: str) -> None:
    with durably.Engine(url) as engine:

        @engine.workflow(name="wf")
        def wf(ctx: durably.Context) -> Any:
            return alookup("X")

        # A misuse: the run blocks (a fix of the code resumes it), never fails.
        with pytest.raises(durably.ConfigError, match="Make the workflow async"):
            engine.run(wf, run_id="r")
        assert engine.get_run("r").status == "blocked"


def test_ctx_step_applies_the_kind_write_is_an_effect() -> None:
    assert refund.options.effect is True and lookup.options.effect is False
    assert refund.safety == "key" and lookup.safety == "read-only"
    assert signature_of(refund).takes_key is True


@pytest.mark.parametrize("order", ["tool-above", "step-above"])
def test_composes_with_step_options_in_either_order(url: str, order: str) -> None:
    tries: list[int] = []

    def flaky(x: int, idempotency_key: str) -> int:
        tries.append(x)
        if len(tries) < 3:
            raise ConnectionError("try again")
        return x * 2

    if order == "tool-above":
        t = durably.tool(kind="write")(durably.step(retries=2, backoff=0)(flaky))
    else:
        t = durably.step(retries=2, backoff=0)(durably.tool(kind="write")(flaky))
    assert t.options.retries == 2 and t.options.effect is True
    with durably.Engine(url) as engine:

        @engine.workflow(name="wf")
        def wf(ctx: durably.Context) -> Any:
            return t(21)

        assert engine.run(wf, run_id="r") == 42
        assert tries == [21, 21, 21]


def test_unkeyed_write_warns_once_naming_the_two_ways() -> None:
    with pytest.warns(UnsafeToolWarning) as caught:

        @durably.tool(kind="write")
        def send_email(to: str) -> None:
            """Send."""

    assert len(caught) == 1
    assert caught[0].filename == __file__  # it names the line that declared the tool
    text = str(caught[0].message)
    assert "send_email" in text and "idempotency_key" in text and "reconcile" in text
    assert send_email.options.effect is True and send_email.safety == "none"

    @durably.tool(kind="write", reconcile=lambda key: None)
    def send_reconciled(to: str) -> None:
        """Send, with a lookup."""

    assert send_reconciled.safety == "reconcile" and send_reconciled.options.reconcile


def test_bad_options_are_refused_clearly() -> None:
    with pytest.raises(durably.ConfigError, match="kind='delete'"):
        durably.tool(kind="delete")  # type: ignore[arg-type]
    with pytest.raises(durably.ConfigError, match="reconcile= is for writes"):
        durably.tool(kind="read", reconcile=lambda k: None)(lambda: None)
    with pytest.raises(durably.ConfigError, match="already a tool"):
        durably.tool(kind="read")(lookup)


def test_schemas_come_from_signature_hints_and_docstring() -> None:
    @durably.tool(kind="write")
    def charge(
        customer: str,
        cents: int,
        memo: str | None = None,
        *,
        idempotency_key: str,
        fencing_token: int = 0,
    ) -> str:
        """Charge a customer's card.

        Args:
            customer: The customer's id.
            cents: How much, in cents;
                never negative.
            memo: A note for the statement.
        """
        return "ok"

    params = charge.json_schema()
    assert set(params["properties"]) == {"customer", "cents", "memo"}
    assert params["required"] == ["customer", "cents"]
    assert params["properties"]["cents"] == {
        "type": "integer",
        "description": "How much, in cents; never negative.",
    }
    assert params["additionalProperties"] is False
    chat = charge.openai_schema()
    assert chat["type"] == "function" and chat["function"]["name"] == "charge"
    assert chat["function"]["description"] == "Charge a customer's card."
    responses = charge.openai_schema(api="responses")
    assert responses["name"] == "charge" and responses["parameters"] == params
    anthropic = charge.anthropic_schema()
    assert anthropic == {
        "name": "charge",
        "description": "Charge a customer's card.",
        "input_schema": params,
    }


DELETED: list[str] = []


@durably.tool(kind="destructive")
def delete_repo(repo: str, idempotency_key: str) -> str:
    """Delete a repository."""
    DELETED.append(repo)
    return f"deleted {repo}"


def test_destructive_tool_parks_for_approval_and_runs_once_after_approve(
    journal_url: str,
) -> None:
    DELETED.clear()
    with durably.Engine(journal_url, park_wait_s=0) as engine:

        @engine.workflow(name="cleanup")
        def cleanup(ctx: durably.Context) -> Any:
            return delete_repo("acme/old")

        with pytest.raises(durably.RunParked):
            engine.run(cleanup, run_id="c1")
        assert DELETED == []
        [p] = engine.pending_approvals()
        assert (p.action, p.args, p.request_id) == ("delete_repo", {"repo": "acme/old"}, "0")
        res = CliRunner().invoke(
            cli,
            ["approve", "c1", "0", "--digest", p.digest[:12], "--by", "ana", "--db", journal_url],
        )
        assert res.exit_code == 0, res.output
        assert engine.resume("c1") == "deleted acme/old"
        assert DELETED == ["acme/old"]
        assert engine.resume("c1") == "deleted acme/old"
        assert DELETED == ["acme/old"]
        positions = [(h.position, h.kind, h.name) for h in engine.history("c1")]
        assert positions[0][0] == "0" and positions[-1][:1] == ("1",)


def test_rejected_destructive_tool_raises_tool_rejected_and_runs_nothing(url: str) -> None:
    DELETED.clear()
    with durably.Engine(url, park_wait_s=0) as engine:

        @engine.workflow(name="cleanup")
        def cleanup(ctx: durably.Context) -> Any:
            try:
                return ctx.step("delete", delete_repo, "acme/prod")
            except durably.ToolRejected as exc:
                return [exc.tool, exc.outcome, exc.by, exc.note]

        with pytest.raises(durably.RunParked):
            engine.run(cleanup, run_id="c2")
        [p] = engine.pending_approvals()
        assert p.action == "delete"  # ctx.step's name is the step's and the request's
        engine.reject("c2", p.request_id, digest=p.digest, by="bo", reason="prod!")
        assert engine.resume("c2") == ["delete", "rejected", "bo", "prod!"]
        assert DELETED == []


def test_approval_false_runs_a_destructive_tool_without_asking(url: str) -> None:
    @durably.tool(kind="destructive", approval=False)
    def wipe(path: str, idempotency_key: str) -> str:
        """Wipe."""
        return path

    with durably.Engine(url, park_wait_s=0) as engine:

        @engine.workflow(name="wf")
        def wf(ctx: durably.Context) -> Any:
            return wipe("/tmp/x")

        assert engine.run(wf, run_id="r") == "/tmp/x"
        assert engine.pending_approvals() == []


def test_a_tool_in_a_saga_keeps_its_kind_and_one_asking_approval_is_refused(url: str) -> None:
    undone: list[str] = []

    @durably.tool(kind="write")
    async def book(room: str, idempotency_key: str) -> str:
        """Book a room."""
        return f"booked {room}"

    @durably.tool(kind="write")
    def unbook(room: str, idempotency_key: str) -> None:
        """Cancel a booking."""
        undone.append(room)

    @durably.tool(kind="idempotent")
    def fail() -> None:
        """Always fails."""
        raise RuntimeError("no")

    with durably.Engine(url) as engine:

        @engine.workflow(name="trip")
        async def trip(ctx: durably.AsyncContext) -> Any:
            try:
                async with ctx.saga() as saga:
                    got = await saga.step("book", book, unbook, "R1")
                    await ctx.step("fail", fail)
            except durably.StepFailed:
                return got

        assert asyncio.run(engine.run_async(trip, run_id="t")) == "booked R1"
        assert undone == ["R1"]

        @engine.workflow(name="bad")
        def bad(ctx: durably.Context) -> Any:
            with ctx.saga() as saga:
                return saga.step("delete", delete_repo, unbook, "acme/x")

        with pytest.raises(durably.ConfigError, match="asks for an approval"):
            engine.run(bad, run_id="b")


def test_import_durably_loads_neither_dispatch_nor_pydantic() -> None:
    import subprocess
    import sys

    code = (
        "import sys, durably; assert 'durably.tools._dispatch' not in sys.modules;"
        " assert 'pydantic' not in sys.modules; import durably.tools._dispatch;"
        " from durably.tools import dispatch; assert callable(dispatch), dispatch"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
