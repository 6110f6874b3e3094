"""``durably worker MODULE:ENGINE``: claim and drive runs."""

from __future__ import annotations

import importlib
import sys

import click


@click.command("worker")
@click.argument("target", metavar="MODULE:ENGINE")
@click.option(
    "--concurrency",
    default=4,
    show_default=True,
    type=click.IntRange(1, 256),
    help="Runs driven at once by this process.",
)
@click.option(
    "--queue",
    "queues",
    multiple=True,
    default=("default",),
    show_default=True,
    help="Queue to serve (repeat for several).",
)
@click.option(
    "--poll-interval-s",
    default=0.2,
    show_default=True,
    type=click.FloatRange(0.01),
    help="Longest idle wait between claims (PostgreSQL also wakes on NOTIFY).",
)
@click.option(
    "--drain-s",
    default=30.0,
    show_default=True,
    type=click.FloatRange(0),
    help="On SIGTERM, how long current runs may finish before they are released.",
)
@click.option(
    "--db",
    "db",
    envvar="DURABLY_URL",
    default=None,
    help="Journal URL; set as DURABLY_URL before MODULE is imported, so an"
    " Engine() without a URL uses it. Env DURABLY_URL.",
)
def worker_cmd(
    target: str,
    concurrency: int,
    queues: tuple[str, ...],
    poll_interval_s: float,
    drain_s: float,
    db: str | None,
) -> None:
    """Claim and drive runs of the workflows registered on MODULE:ENGINE.

    Runs are claimed under a lease with a fencing token; SIGTERM stops claiming, lets
    current runs finish for up to --drain-s, then releases the rest for other workers.
    """
    import logging
    import os

    from ..engine import Engine
    from ..worker import Worker

    if db:
        os.environ["DURABLY_URL"] = db
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise click.BadParameter(
            "write MODULE:ENGINE, e.g. myapp.agents:engine", param_hint="MODULE:ENGINE"
        )
    sys.path.insert(0, os.getcwd())
    try:
        engine = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise click.ClickException(f"cannot load {target}: {exc}") from exc
    if not isinstance(engine, Engine):
        raise click.ClickException(f"{target} is a {type(engine).__name__}, not a durably.Engine")
    if db and engine.url != db:
        raise click.ClickException(
            f"{target} is bound to {engine.url} but --db/DURABLY_URL says {db}; build the"
            " engine with durably.Engine() (no URL) to take it from DURABLY_URL"
        )
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    w = Worker(
        engine,
        concurrency=concurrency,
        queues=queues,
        poll_interval_s=poll_interval_s,
        drain_s=drain_s,
    )
    w.install_signal_handlers()
    click.echo(
        f"durably worker pid {os.getpid()} serving {', '.join(queues)} on"
        f" {engine.url} with {concurrency} slot(s)",
        err=True,
    )
    stats = w.run()
    click.echo(
        f"durably worker stopped: {stats.claimed} claimed, {stats.completed} completed,"
        f" {stats.failed} failed, {stats.stale} lost to other workers",
        err=True,
    )
    sys.stdout.flush()
    sys.stderr.flush()
    # Threads still inside a step after the drain deadline were given back; do not wait.
    os._exit(0)
