"""Golden CLI output: what ``durably runs list|show|why`` print, byte for byte.

A deterministic journal (a FakeClock, fixed run ids, one SQLite file at a fixed relative
path) holds a run of each kind the commands word differently: completed with spend,
failed at a step, parked on a signal, parked on an approval, cancelled, queued on another
queue. Each command's output is compared with a checked-in file under
``tests/unit/cli_golden/``. Only what is truly random is normalised: a run's incarnation
(drawn when its row is created) is replaced by ``<incarnation>``.

The files were captured from the commands as they were before they moved onto the read
seams (``engine.list_runs``, ``engine.count_runs``, ``durably.explain``); the commands must
keep printing them exactly. One line was added on purpose since: ``runs list`` now ends
with the ``--after`` cursor of the next page when more runs match than it shows
(``runs_list_limit``); the ``--after`` pages themselves are new. And the tables are plain
aligned text now, as every pipe gets them (issue 31: a boxed table in a pipe cut ids to fit
80 columns; tests/unit/test_cli_ids_whole.py has the terminal form). To re-capture after a
deliberate change of output, run with ``DURABLY_UPDATE_GOLDEN=1`` and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import durably
from durably.cli import main as cli

GOLDEN = Path(__file__).parent / "cli_golden"
URL = "sqlite:///journal.db"  # relative: the table title does not carry tmp_path
# The cursors `runs list --limit 2` prints after order-5 and after order-3.
PAGE2 = "r1.WzE3MDAwMDAyNDAuNSwib3JkZXItNSJd"
PAGE3 = "r1.WzE3MDAwMDAxMjAuNSwib3JkZXItMyJd"
# A fixed width, and nothing that would make rich treat the captured output as a colour
# terminal (a CI runner may set FORCE_COLOR).
CONSOLE_ENV: dict[str, str | None] = {
    "COLUMNS": "160",
    "FORCE_COLOR": None,
    "TTY_COMPATIBLE": None,
    "TTY_INTERACTIVE": None,
}
START = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC: never "today", so dates are printed

COMMANDS: dict[str, list[str]] = {
    "runs_list": ["runs", "list"],
    "runs_list_json": ["runs", "list", "--json"],
    "runs_list_limit": ["runs", "list", "--limit", "2"],
    # --after is new with the read seams: these two have no output from before.
    "runs_list_page2": ["runs", "list", "--limit", "2", "--after", PAGE2],
    "runs_list_page3_json": ["runs", "list", "--limit", "2", "--json", "--after", PAGE3],
    "runs_list_status": ["runs", "list", "--status", "parked"],
    "runs_list_workflow_json": ["runs", "list", "--workflow", "order", "--json"],
    **{
        f"runs_{cmd}_{run_id}{suffix}": ["runs", cmd, run_id, *flags]
        for run_id in (
            "order-1",
            "order-2",
            "order-3",
            "order-4",
            "order-5",
            "order-6",
        )
        for cmd in ("show", "why")
        for suffix, flags in (("", []), ("_json", ["--json"]))
    },
}


def _plan(item: str) -> dict[str, Any]:
    return {"title": f"ship {item}", "lines": [1, 2, 3]}


def _charge(amount: int) -> str:
    durably.usage(tokens=1200, cost_usd=0.0125, input_tokens=1000, output_tokens=200)
    return f"charged {amount}"


def _declined(amount: int) -> str:
    raise ValueError(f"card declined for {amount}")


def build_journal(clock: durably.FakeClock) -> dict[str, str]:
    """The deterministic journal in the current directory; returns each run's
    incarnation (the one random value in it)."""
    with durably.Engine(URL, clock=clock, park_wait_s=0) as engine:

        @engine.workflow(name="order", version="2")
        def order(ctx: durably.Context, item: str, amount: int) -> dict[str, Any]:
            plan = ctx.step("plan", _plan, item)
            clock.advance(0.5)
            paid = ctx.step("charge", _charge, amount)
            return {"plan": plan["title"], "paid": paid}

        @engine.workflow(name="refund")
        def refund(ctx: durably.Context, amount: int) -> str:
            ctx.step("declined", _declined, amount)
            return "unreachable"

        @engine.workflow(name="waiter")
        def waiter(ctx: durably.Context) -> Any:
            ctx.step("plan", _plan, "wait")
            return ctx.wait_for_signal("approve")

        @engine.workflow(name="asker")
        def asker(ctx: durably.Context, amount: int) -> Any:
            return ctx.request_approval("refund", {"amount": amount})

        engine.run(order, "book", 42, run_id="order-1")
        clock.advance(60)
        with pytest.raises(durably.WorkflowFailed):
            engine.run(refund, 7, run_id="order-2")
        clock.advance(60)
        with pytest.raises(durably.RunParked):
            engine.run(waiter, run_id="order-3")
        clock.advance(60)
        with pytest.raises(durably.RunParked):
            engine.run(asker, 99, run_id="order-4")
        clock.advance(60)
        engine.start(order, "lamp", 3, run_id="order-5")
        engine.cancel("order-5", reason="customer changed their mind")
        clock.advance(60)
        engine.start(order, "desk", 250, run_id="order-6", queue="slow")
        ids = [f"order-{i}" for i in range(1, 7)]
        return {run_id: engine.get_run(run_id).incarnation or "" for run_id in ids}


def normalise(text: str, incarnations: dict[str, str]) -> str:
    for inc in incarnations.values():
        if inc:
            text = text.replace(inc, "<incarnation>")
    return text


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    where = tmp_path_factory.mktemp("golden")
    old = Path.cwd()
    os.chdir(where)
    try:
        incarnations = build_journal(durably.FakeClock(START))
        runner = CliRunner()
        out: dict[str, str] = {}
        for name, argv in COMMANDS.items():
            res = runner.invoke(cli, [*argv, "--db", URL], env=CONSOLE_ENV)
            assert res.exit_code == 0, (name, res.output)
            out[name] = normalise(res.output, incarnations)
        return out
    finally:
        os.chdir(old)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_output_is_unchanged(outputs: dict[str, str], name: str) -> None:
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("DURABLY_UPDATE_GOLDEN") == "1":
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(outputs[name], encoding="utf-8")
    expected = path.read_text(encoding="utf-8")
    assert outputs[name] == expected, f"`durably {' '.join(COMMANDS[name])}` changed its output"


def test_the_journal_covers_each_kind(outputs: dict[str, str]) -> None:
    # The golden files mean something only if the journal holds what they claim.
    assert '"state": "completed"' in outputs["runs_why_order-1_json"]
    assert '"state": "failed"' in outputs["runs_why_order-2_json"]
    assert '"state": "signal"' in outputs["runs_why_order-3_json"]
    assert '"state": "approval"' in outputs["runs_why_order-4_json"]
    assert '"state": "cancelled"' in outputs["runs_why_order-5_json"]
    assert '"state": "queued"' in outputs["runs_why_order-6_json"]
    assert "spend: " in outputs["runs_show_order-1"]
    assert "(showing 2)" in outputs["runs_list_limit"]
