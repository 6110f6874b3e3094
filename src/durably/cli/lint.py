"""``durably lint PATH... [--json]``: non-determinism outside steps, found statically."""

from __future__ import annotations

import sys

import click

from .common import json_text


@click.command("lint", short_help="Find code in workflow bodies that would break a replay.")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True), metavar="PATH...")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print a JSON list of {path, line, col, rule, why, fix}.",
)
def lint_cmd(paths: tuple[str, ...], as_json: bool) -> None:
    """Check the workflow functions in PATH... (files, or folders walked for .py files)
    for non-determinism outside steps, reading the source only (nothing is imported).

    A workflow function is one decorated @<engine>.workflow or taking a parameter
    annotated Context/AsyncContext. Reported in its body: the wall clock (time.time,
    time.monotonic, datetime.now/utcnow/today), random, uuid.uuid1/uuid4, os.environ and
    os.getenv, file and network reads, threads, asyncio.gather/create_task around
    recorded calls, iteration over a set, id()/hash() of objects. Each finding is
    FILE:LINE:COL with why and the durable alternative (ctx.now(), ctx.random(),
    ctx.uuid(), ctx.gather, a step). Functions nested in a workflow (step functions)
    are not its body. "# durably: ok" on a line silences it. Exits 1 when anything is
    found.
    """
    from ..lint import lint_paths

    found = lint_paths(paths)
    if as_json:
        click.echo(json_text([f.to_json() for f in found]))
    else:
        for f in found:
            click.echo(f.text())
        n = len(found)
        click.echo(f"{n} finding{'s' if n != 1 else ''}" if n else "no findings", err=bool(n))
    if found:
        sys.exit(1)
