"""``durably audit MODULE:ENGINE``: a sample with one unkeyed write exits non-zero naming
it (with the fix) and passes once the write takes a key; every reachable step and tool is
listed with its kind and safety (ctx.step targets, direct tool calls, dispatch lists,
helpers given the context, saga undos); an unresolvable target is unknown, an error only
with --strict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from durably.cli import main as cli

SAMPLE = '''
import durably
from durably.tools import dispatch

engine = durably.Engine("sqlite:///{db}")


@durably.tool(kind="read")
def lookup(order_id: str) -> dict:
    """Look up an order."""
    return {{}}


@durably.tool(kind="write")
def refund(order_id: str, cents: int{key}) -> str:
    """Refund an order."""
    return "ok"


@durably.tool(kind="destructive")
def close(customer: str) -> str:
    """Close an account (a person approves first)."""
    return "closed"


@durably.step(effect=True)
def charge(cents: int, idempotency_key: str) -> str:
    return "ch"


def plan(text: str) -> str:
    return text


def notify(ctx: durably.Context, who: str) -> None:
    ctx.step("notify", plan, who)


TOOLS = [lookup, close]


@engine.workflow(name="support", version="2")
def support(ctx: durably.Context, order: str) -> object:
    p = ctx.step("plan", plan, order)
    info = lookup(order)
    ctx.step("charge", charge, 100)
    done = ctx.step("refund", refund, order, 5)
    notify(ctx, "ana")
    out = dispatch(ctx, {{"choices": []}}, TOOLS)
    return [p, info, done, out]
'''


def audit(tmp: Path, *args: str, key: bool = False, extra: str = "") -> Result:
    name = f"sample_{'keyed' if key else 'unkeyed'}{len(extra)}"
    path = tmp / f"{name}.py"
    text = SAMPLE.format(db=tmp / "j.db", key=", idempotency_key: str" if key else "")
    path.write_text(text + extra)
    return CliRunner().invoke(cli, ["audit", f"{path}:engine", *args])


def test_one_unkeyed_write_fails_naming_it_then_passes_with_a_key(tmp_path: Path) -> None:
    res = audit(tmp_path)
    assert res.exit_code == 1, res.output
    unsafe = [ln for ln in res.output.splitlines() if ln.startswith("UNSAFE")]
    assert len(unsafe) == 1 and unsafe[0].startswith("UNSAFE refund (support@2, ")
    assert "idempotency_key" in unsafe[0] and "reconcile" in unsafe[0]
    fixed = audit(tmp_path, key=True)
    assert fixed.exit_code == 0, fixed.output
    assert "UNSAFE" not in fixed.output and "every effect is made safe" in fixed.output
    assert "note: 1 step declares no kind (plan)" in fixed.output


def test_json_lists_every_step_and_tool_with_kind_and_safety(tmp_path: Path) -> None:
    res = audit(tmp_path, "--json")
    assert res.exit_code == 1
    data = json.loads(res.output)
    rows = [(e["name"], e["kind"], e["safety"]) for e in data["entries"]]
    assert rows == [
        ("plan", "step", "none"),
        ("lookup", "read", "read-only"),
        ("charge", "effect", "key"),
        ("refund", "write", "none"),
        ("notify", "step", "none"),  # in a helper the context is passed to
        ("close", "destructive", "approval"),  # the dispatch list (lookup: listed above)
    ]
    [bad] = data["unsafe"]
    line = 1 + SAMPLE.splitlines().index('    done = ctx.step("refund", refund, order, 5)')
    assert bad["target"] == "refund" and bad["where"].endswith(f":{line}")
    assert data["unknown"] == []


def test_unresolvable_target_is_unknown_and_fails_only_when_strict(tmp_path: Path) -> None:
    extra = """

@engine.workflow(name="dyn")
def dyn(ctx: durably.Context, fns: list) -> object:
    return ctx.step("picked", fns[0])
"""
    res = audit(tmp_path, key=True, extra=extra)
    assert res.exit_code == 0, res.output
    assert "UNKNOWN fns[0]" in res.output and "not an error without --strict" in res.output
    strict = audit(tmp_path, "--strict", key=True, extra=extra)
    assert strict.exit_code == 1


@pytest.mark.parametrize(
    ("target", "message"),
    [("nope_module_xyz:engine", "cannot load"), ("json:dumps", "not a durably.Engine")],
)
def test_bad_targets_are_met_clearly(target: str, message: str) -> None:
    res = CliRunner().invoke(cli, ["audit", target])
    assert res.exit_code == 1 and message in res.output


def test_help_is_listed_and_names_the_options() -> None:
    top = CliRunner().invoke(cli, ["--help"])
    assert "audit" in top.output and "lint" in top.output
    res = CliRunner().invoke(cli, ["audit", "--help"])
    assert res.exit_code == 0 and "--strict" in res.output and "MODULE:ENGINE" in res.output
    res = CliRunner().invoke(cli, ["lint", "--help"])
    flat = " ".join(res.output.split())  # click wraps to the terminal's width
    assert res.exit_code == 0 and '"# durably: ok" on a line silences it' in flat
    res = CliRunner().invoke(cli, ["chaos", "--help"])
    assert "--park [answer|stop]" in res.output


def test_saga_undos_and_a_destructive_tool_without_approval(tmp_path: Path) -> None:
    extra = '''

@durably.tool(kind="destructive", approval=False)
def wipe(path: str) -> str:
    """Wipe without asking."""
    return path


@engine.workflow(name="trip")
def trip(ctx: durably.Context) -> object:
    with ctx.saga() as saga:
        booked = saga.step("book", charge, refund, 5)
    return [booked, wipe("/tmp")]
'''
    res = audit(tmp_path, "--json", key=True, extra=extra)
    assert res.exit_code == 1, res.output
    data = json.loads(res.output)
    trip = [(e["name"], e["kind"], e["safety"]) for e in data["entries"] if e["workflow"] == "trip"]
    assert trip == [
        ("book", "effect", "key"),
        ("undo:book", "write", "key"),
        ("wipe", "destructive", "none"),
    ]
    [bad] = data["unsafe"]
    assert bad["target"] == "wipe" and "no key, no reconcile and no approval" in bad["problem"]
