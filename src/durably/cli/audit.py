"""``durably audit MODULE:ENGINE [--json] [--strict]``: each step and tool the engine's
workflows reach, its kind, and how a repeat of it is made safe."""

from __future__ import annotations

import sys
import warnings
from typing import TYPE_CHECKING

import click

from .common import inert, json_text, load_engine

if TYPE_CHECKING:
    from ..audit import Entry


@click.command("audit", short_help="Each step and tool of MODULE:ENGINE and what makes it safe.")
@click.argument("target", metavar="MODULE:ENGINE")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print {"entries": [...], "unsafe": [...], "unknown": [...]} (each entry:'
    " workflow, name, target, kind, safety, where, problem).",
)
@click.option("--strict", is_flag=True, help="Also exit non-zero when a target cannot be resolved.")
def audit_cmd(target: str, as_json: bool, strict: bool) -> None:
    """List every step and tool reachable from the workflows registered on the engine at
    MODULE:ENGINE (e.g. myapp.agents:engine or path/to/agents.py:engine), with its kind
    and how a repeat is made safe: key, reconcile, read-only, idempotent, approval, or
    none.

    Read from the workflow functions' source: ctx.step/step_stream and saga.step
    targets, direct calls of @durably.tool functions, tool lists passed to
    durably.tools.dispatch, and helpers the context is passed to. Kinds: a tool's
    declared kind, "effect" for an effect=True step, "step" for a plain step (no effect
    declared), "unknown" for a target computed at run time. Exits 1 naming each effect
    (a write or destructive tool, an effect=True step) that is safe by no means, with
    the fix; an unknown target exits 1 only with --strict. Importing MODULE runs it.
    """
    from ..audit import audit

    with warnings.catch_warnings():
        # A tool's own warning (an unkeyed write) is what this reports, once, below.
        warnings.simplefilter("ignore")
        engine = load_engine(target, None, as_json)
    try:
        entries = audit(engine)
    finally:
        engine.close()
    unsafe = [e for e in entries if e.problem]
    unknown = [e for e in entries if e.kind == "unknown"]
    if as_json:
        click.echo(
            json_text(
                {
                    "entries": [e.to_json() for e in entries],
                    "unsafe": [e.to_json() for e in unsafe],
                    "unknown": [e.to_json() for e in unknown],
                }
            )
        )
    else:
        _print(entries, unsafe, unknown, strict)
    if unsafe or (strict and unknown):
        sys.exit(1)


def _print(entries: list[Entry], unsafe: list[Entry], unknown: list[Entry], strict: bool) -> None:
    if not entries:
        click.echo("no steps or tools found in the registered workflows")
    workflow = None
    for e in entries:
        if e.workflow != workflow:
            workflow = e.workflow
            click.echo(f"workflow {inert(workflow)}:")
        flag = "  UNSAFE" if e.problem else ("  UNKNOWN" if e.kind == "unknown" else "")
        click.echo(
            f"  {inert(e.name):<24} {inert(e.target):<28} {e.kind:<12} safe by: {e.safety:<10}"
            f" {inert(e.where)}{flag}"
        )
    for e in unsafe:
        click.echo(f"UNSAFE {inert(e.target)} ({inert(e.workflow)}, {inert(e.where)}): {e.problem}")
    for e in unknown:
        note = "" if strict else " (not an error without --strict)"
        click.echo(
            f"UNKNOWN {inert(e.target)} ({inert(e.where)}): cannot be resolved from the source;"
            f" pass a module-level function or @durably.tool{note}"
        )
    plain = sorted({e.target for e in entries if e.kind == "step" and e.safety == "none"})
    if plain:
        click.echo(
            f"note: {len(plain)} step{'s declare' if len(plain) != 1 else ' declares'} no kind"
            f" ({', '.join(inert(p) for p in plain)}): a repeat of each after a crash is"
            " judged only once declared, @durably.tool(kind=...) or"
            " @durably.step(effect=True)"
        )
    if not unsafe:
        click.echo("every effect is made safe" + ("" if not unknown else " (of those resolved)"))
