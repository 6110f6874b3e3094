"""Who may use the dashboard, and how each request proves it.

The journal holds prompts and secrets, and the page can approve payments, so every
request is checked, on loopback too (Jupyter's model):

- **Tokens.** On loopback ``durably ui`` draws a token at each start and prints a URL
  carrying it; any other bind refuses to start unless ``DURABLY_UI_TOKEN`` (one secret)
  or ``DURABLY_UI_TOKENS="ana:secret1,bob:secret2"`` (named secrets) is set. A request
  proves itself with ``?token=`` (which sets a session cookie, HttpOnly and
  SameSite=Strict, and reloads the page without the token in its address),
  ``Authorization: Bearer TOKEN``, or that cookie. ``--no-token`` turns this off, on
  loopback only.
- **Host header.** Only the names the server was bound for are answered, so a page on
  another site cannot reach it through DNS rebinding.
- **CSRF.** Every POST carries the value of a ``durably_ui_csrf`` cookie in its form
  (double-submit): a page on another site can neither read the cookie nor send it,
  so it cannot forge a decision. A request authenticated by a Bearer header needs no
  CSRF field (browsers never attach that header on their own).
- **Origin.** A POST whose ``Origin`` is not this server's own, or whose
  ``Sec-Fetch-Site`` says another site or page sent it, is refused before the CSRF
  field is read: a page on another port of localhost is the same *site* (it gets the
  SameSite=Strict session) and can set the CSRF cookie (cookies ignore ports), so the
  double-submit alone would not stop it.
- **Who decides.** The approver's name is the token's name, else ``--user``, else on
  loopback the local OS user; never a form field.
"""

from __future__ import annotations

import getpass
import hmac
import ipaddress
import os
import secrets
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlencode

from durably import ConfigError

SESSION_COOKIE = "durably_ui_session"
CSRF_COOKIE = "durably_ui_csrf"
CSRF_FIELD = "csrf"
TOKEN_ENV = "DURABLY_UI_TOKEN"
TOKENS_ENV = "DURABLY_UI_TOKENS"
SESSIONS_MAX = 10_000
"""Most browser sessions one server keeps (the oldest go first past it)."""
TOKEN_CHARS_MIN = 16
"""Shortest secret accepted from ``DURABLY_UI_TOKEN(S)``."""

_LOOPBACK_NAMES = ("localhost",)


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def parse_tokens(env: Mapping[str, str]) -> dict[str, str | None]:
    """The secrets named in ``env``: token -> the person it names (None for the unnamed
    ``DURABLY_UI_TOKEN``). Raises ``ConfigError`` for a malformed or short entry."""
    tokens: dict[str, str | None] = {}
    single = env.get(TOKEN_ENV, "").strip()
    if single:
        _check_secret(single, TOKEN_ENV)
        tokens[single] = None
    for entry in filter(None, (e.strip() for e in env.get(TOKENS_ENV, "").split(","))):
        name, sep, secret = entry.partition(":")
        if not sep or not name.strip() or not secret:
            raise ConfigError(
                f"{TOKENS_ENV} entries are NAME:SECRET separated by commas"
                f' (e.g. "ana:secret1,bob:secret2"); got an entry {name[:20]!r}...'
            )
        _check_secret(secret, f"{TOKENS_ENV} ({name.strip()})")
        tokens[secret] = name.strip()
    return tokens


def _check_secret(secret: str, where: str) -> None:
    if len(secret) < TOKEN_CHARS_MIN:
        raise ConfigError(
            f"{where}: a token must be at least {TOKEN_CHARS_MIN} characters long (make one"
            ' with: python -c "import secrets; print(secrets.token_urlsafe(32))")'
        )


@dataclass
class Security:
    """The server's security settings and its sessions (built by :func:`security_for`).

    ``tokens`` maps each accepted secret to the name it carries (None: unnamed);
    ``required`` False only under ``--no-token`` on loopback; ``hosts`` the Host header
    names answered (None: any, for a bind to all interfaces, where a token is required);
    ``user`` the approver's name when a token names nobody.
    """

    tokens: dict[str, str | None]
    required: bool
    hosts: frozenset[str] | None
    user: str | None
    login_token: str | None = None
    _sessions: dict[str, str | None] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def check_host(self, host_header: str | None) -> bool:
        """Whether the request's Host header names this server."""
        if self.hosts is None:
            return True
        if not host_header:
            return False
        name = host_header.strip().lower()
        if name.startswith("["):  # [v6]:port: nothing but a port after the bracket
            end = name.find("]")
            if end < 0:
                return False
            name, rest = name[: end + 1], name[end + 1 :]
        else:
            name, sep, port = name.partition(":")
            rest = sep + port
        if rest and not (rest.startswith(":") and rest[1:].isdigit()):
            return False
        return name in self.hosts

    def token_name(self, token: str) -> tuple[bool, str | None]:
        """(valid, the name it carries) for a presented secret, compared in constant time."""
        found = False
        name: str | None = None
        for secret, who in self.tokens.items():
            if hmac.compare_digest(secret.encode(), token.encode()):
                found, name = True, who
        return found, name

    def new_session(self, name: str | None) -> str:
        """A new session id for a browser that presented a valid token."""
        sid = secrets.token_urlsafe(32)
        with self._lock:
            if len(self._sessions) >= SESSIONS_MAX:
                self._sessions.pop(next(iter(self._sessions)))
            self._sessions[sid] = name
        return sid

    def session(self, sid: str) -> tuple[bool, str | None]:
        """(valid, the name it carries) for a session cookie."""
        with self._lock:
            if sid in self._sessions:
                return True, self._sessions[sid]
        return False, None

    def approver(self, token_name: str | None) -> str | None:
        """Who a decision made by this request is recorded as."""
        return token_name or self.user


def security_for(
    host: str,
    *,
    no_token: bool = False,
    user: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Security:
    """The settings for a server bound to ``host``; raises ``ConfigError`` (a message
    naming ``DURABLY_UI_TOKEN``/``DURABLY_UI_TOKENS``) for a bind off loopback without a
    token, and for ``--no-token`` off loopback."""
    env = os.environ if env is None else env
    tokens = parse_tokens(env)
    loopback = is_loopback(host)
    if no_token and not loopback:
        raise ConfigError(
            f"--no-token works on loopback only (127.0.0.1, ::1, localhost), not on {host};"
            f" set {TOKEN_ENV} or {TOKENS_ENV} instead"
        )
    if not loopback and not tokens:
        raise ConfigError(
            f"durably ui on {host} (not loopback) needs a token: set {TOKEN_ENV}=SECRET, or"
            f' {TOKENS_ENV}="ana:secret1,bob:secret2" to name who decides; every request'
            " must then carry one"
        )
    login: str | None = None
    if loopback and not tokens and not no_token:
        login = secrets.token_urlsafe(32)
        tokens[login] = None
    if user is None and loopback:
        user = _os_user()
    return Security(
        tokens=tokens,
        required=not no_token,
        hosts=_hosts_for(host),
        user=user,
        login_token=login,
    )


def _os_user() -> str | None:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no user name in the environment nor the passwd file
        return None


def _hosts_for(host: str) -> frozenset[str] | None:
    if host in ("0.0.0.0", "::", ""):
        return None  # every interface: any name reaches it, and a token is required
    names = {host.lower(), f"[{host.lower()}]" if ":" in host else host.lower()}
    if is_loopback(host):
        names |= {"localhost", "127.0.0.1", "[::1]"}
    return frozenset(names)


def strip_token(query: str) -> str:
    """The query string without its ``token`` parameter."""
    kept = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k != "token"]
    return urlencode(kept)


def same_origin(host: str | None, origin: str | None, fetch_site: str | None) -> bool:
    """Whether a POST comes from this server's own pages: its ``Sec-Fetch-Site`` (when
    sent) is ``same-origin`` or ``none`` and its ``Origin`` (when sent) is
    ``http(s)://`` + the request's Host. A client that sends neither (a script, curl) is
    not a browser page and passes on to the CSRF check."""
    site = None if fetch_site is None else fetch_site.strip().lower()
    if site is not None and site not in ("same-origin", "none"):
        return False
    if origin is None:
        return True
    if origin.strip().lower() == "null":
        # A browser hides the origin of a form posted under some referrer policies;
        # its Sec-Fetch-Site (which no page can set) then says where it came from.
        return site == "same-origin"
    own = (host or "").strip().lower()
    return bool(own) and origin.strip().lower() in (f"http://{own}", f"https://{own}")


def csrf_ok(cookie: str | None, submitted: str | None) -> bool:
    """Whether a POST's CSRF field matches its cookie (both present and equal)."""
    if not cookie or not submitted:
        return False
    return hmac.compare_digest(cookie.encode(), submitted.encode())
