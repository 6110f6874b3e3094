"""The dashboard: ``durably ui``, a local web app for watching runs and deciding approvals.

Server-rendered pages (Starlette and Jinja2, a little JavaScript, nothing fetched from
elsewhere) on durably's public API only; see docs/ui.md for the pages and the security
model. Install with ``pip install 'durably[ui]'``.
"""

from __future__ import annotations

from .app import create_app
from .auth import Security, security_for

__all__ = ["Security", "create_app", "security_for"]
