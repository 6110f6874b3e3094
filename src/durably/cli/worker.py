"""``durably worker MODULE:ENGINE``: claim and drive runs."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import click

from ..redact import redact_url
from .common import CommandError, inert, load_engine, module_db_option

CONNECT_RETRY_FIRST_S = 0.5
CONNECT_RETRY_MAX_S = 30.0


@click.command("worker", short_help="Claim and drive runs of MODULE:ENGINE's workflows.")
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
@module_db_option
def worker_cmd(
    target: str,
    concurrency: int,
    queues: tuple[str, ...],
    poll_interval_s: float,
    drain_s: float,
    db: str | None,
) -> None:
    """Claim and drive runs of the workflows registered on MODULE:ENGINE.

    MODULE is a module name (myapp.agents:engine) or a Python file
    (path/to/agents.py:engine). Claims, takeovers, parks and failures are logged per run
    at INFO on stderr.

    Runs are claimed under a lease with a fencing token; SIGTERM stops claiming, lets
    current runs finish for up to --drain-s, then releases the rest for other workers.
    """
    import os

    from ..worker import Worker

    _log_to_stderr()  # before loading: a journal not reachable yet is logged
    engine = _load_engine(target, db)
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
        f" {redact_url(engine.url)} with {concurrency} slot(s)",
        err=True,
    )
    stats = w.run()
    click.echo(
        f"durably worker stopped: {stats.claimed} claimed, {stats.completed} completed,"
        f" {stats.failed} failed, {stats.cancelled} cancelled, {stats.stale} lost to other"
        f" workers, {stats.other['parked']} parked",
        err=True,
    )
    sys.stdout.flush()
    sys.stderr.flush()
    # Threads still inside a step after the drain deadline were given back; do not wait.
    os._exit(0)


def _load_engine(target: str, db: str | None) -> Any:
    """:func:`load_engine`, retrying while the journal cannot be reached yet (a refused
    or dropped connection, a busy or full database) with capped backoff, logged, until it
    answers or the worker is stopped: a worker started before its database must not exit
    with a traceback. Any other problem is one clear error."""
    from ..errors import StoreError

    log = logging.getLogger("durably.worker")
    delay = CONNECT_RETRY_FIRST_S
    while True:
        try:
            return load_engine(target, db)
        except CommandError as exc:
            cause = exc.__cause__
            if not (isinstance(cause, StoreError) and cause.transient):
                raise
            log.warning(
                "durably worker: cannot open the journal (%s); retrying in %.1f s", cause, delay
            )
        time.sleep(delay)
        delay = min(delay * 2, CONNECT_RETRY_MAX_S)


def _log_to_stderr() -> None:
    """Show durably's INFO records (claims, takeovers, parks, failures) on stderr.

    The handler goes on the ``durably`` logger only: the root logger, and with it the
    logging set up by the application module just imported, is left alone.
    """
    log = logging.getLogger("durably")
    if not any(getattr(h, "durably_cli", False) for h in log.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(_InertFormatter("%(asctime)s %(name)s %(message)s"))
        handler.durably_cli = True  # type: ignore[attr-defined]
        log.addHandler(handler)
    if log.level == logging.NOTSET or log.level > logging.INFO:
        log.setLevel(logging.INFO)


class _InertFormatter(logging.Formatter):
    """Log lines quote run errors (often model output): control characters other than
    newlines and tabs are shown as escapes, never sent to the terminal."""

    def format(self, record: logging.LogRecord) -> str:
        return inert(super().format(record), keep="\n\t")
