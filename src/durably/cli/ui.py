"""``durably ui``: serve the dashboard (see docs/ui.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .common import CommandError, db_option, open_engine


@click.command("ui")
@db_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind.")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535))
@click.option("--open", "open_browser", is_flag=True, help="Open the page in a browser.")
@click.option(
    "--no-token",
    is_flag=True,
    help="Serve without a token (loopback only; anyone on this machine can then decide).",
)
@click.option(
    "--user",
    help="Name decisions are recorded under when the token names nobody (default on"
    " loopback: the local OS user).",
)
def ui_cmd(
    db: str, host: str, port: int, open_browser: bool, no_token: bool, user: str | None
) -> None:
    """Serve the dashboard: runs, one run live, the inbox, approvals.

    Every request needs a token, on loopback too: a new one is printed in the URL at
    each start. Off loopback set DURABLY_UI_TOKEN=SECRET or
    DURABLY_UI_TOKENS="ana:secret1,bob:secret2" (named: decisions are recorded under the
    name); clients may also send Authorization: Bearer SECRET.
    """
    try:
        import uvicorn

        from ..ui import create_app, security_for
    except ImportError as exc:
        raise CommandError(
            f"durably ui needs its extra: pip install 'durably[ui]' ({exc})"
        ) from exc
    from ..errors import ConfigError
    from ..redact import redact_url

    try:
        security = security_for(host, no_token=no_token, user=user)
    except ConfigError as exc:
        raise CommandError(str(exc)) from exc
    engine = open_engine(db)
    app = create_app(engine, security, db_label=redact_url(db))
    shown = f"[{host}]" if ":" in host else host
    base = f"http://{shown}:{port}/runs"
    url = f"{base}?token={security.login_token}" if security.login_token else base
    if no_token:
        click.echo(
            "warning: --no-token: anyone who can reach this machine's loopback (every local"
            " user and process) can read the journal and decide approvals",
            err=True,
        )
    click.echo(f"durably ui on {redact_url(db)}: open {url}", err=True)
    opener = _open_in_browser(url) if open_browser else None
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=2)
    finally:
        engine.close()
        if opener is not None:
            opener.unlink(missing_ok=True)
    sys.stderr.flush()


def _open_in_browser(url: str) -> Path:
    """Open ``url`` in a browser through a private file that forwards to it (returned,
    for removal when the server stops): a browser's command line is readable by every
    local user (``ps``), and the URL carries the token (Jupyter does the same)."""
    import html
    import os
    import tempfile
    import webbrowser

    fd, name = tempfile.mkstemp(prefix="durably-ui-", suffix=".html")  # mode 0600
    shown = html.escape(url)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(
            f'<!doctype html><meta http-equiv="refresh" content="0;url={shown}">'
            f'<title>durably ui</title><a href="{shown}">open durably ui</a>'
        )
    path = Path(name)
    webbrowser.open(path.as_uri())
    return path
