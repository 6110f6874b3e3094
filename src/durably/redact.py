"""Credentials out of everything durably prints or stores about a database URL.

One helper for every place a URL (or an error that may quote one) is shown: CLI lines
and tables, engine and store errors, and the outbox's stored ``last_error``. It replaces

- the password of a URL's user info: ``postgresql://app:s3cret@db/x`` ->
  ``postgresql://app:***@db/x``;
- the value of a ``password=`` parameter (also ``sslpassword``, ``passwd``, ``pwd``), in a
  URL query (``?password=s3cret&...``) or a libpq key/value string
  (``host=db password='s 3cret'``).

Given ``url=``, it also removes that URL's secrets wherever they appear on their own, as
when libpq quotes only the bad token of a URL it cannot parse. It is pure and cheap.
"""

from __future__ import annotations

import functools
import re
from typing import Final

MASK: Final = "***"


@functools.cache
def _patterns() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """Compiled on first use (an error path), not when ``durably`` is imported."""
    # scheme://user:PASSWORD@ : the password runs to the last "@" before a blank, so an
    # unescaped "@", "/" or quote inside it is still covered (over-masking beats a leak).
    userinfo = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s'\"]*):(?P<secret>\S*)@")
    # password=VALUE as a query parameter or a libpq keyword; VALUE may be quoted. An
    # unquoted VALUE runs to a blank or the URL's next parameter ("&", "#"): libpq keeps
    # ";" and "," in a password. Closing quotes and brackets right before that end are
    # left, as they close the text around the URL.
    param = re.compile(
        r"(?i)(?P<head>\b(?:ssl)?(?:password|passwd|pwd)\s*=\s*)"
        r"(?P<secret>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\""
        r"|[^\s&#]*?(?=['\")\]]*(?:[\s&#]|$)))"
    )
    return userinfo, param


@functools.cache
def _whole_url_userinfo() -> re.Pattern[str]:
    """The password of a string that is one URL: everything between the user's ":" and
    the last "@", blanks included (libpq refuses them, quoting the password back)."""
    return re.compile(r"\A\s*[A-Za-z][A-Za-z0-9+.\-]*://[^:/@]*:(?P<secret>.*)@", re.DOTALL)


# A secret this short is not searched for on its own: masking every "ab" in a message
# would garble it. Secrets inside a URL or a password= parameter are masked at any length.
_LOOSE_SECRET_CHARS_MIN: Final = 4


def redact(text: str, *, url: str | None = None) -> str:
    """``text`` with every credential replaced by ``***``.

    With ``url``, the secrets of that URL are also masked where they appear alone.
    """
    loose = secrets_of(url) if url else []
    userinfo, param = _patterns()
    out = userinfo.sub(lambda m: f"{m['head']}:{MASK}@", text)
    out = param.sub(lambda m: f"{m['head']}{MASK}", out)
    for secret in sorted(loose, key=len, reverse=True):
        if len(secret) >= _LOOSE_SECRET_CHARS_MIN:
            out = out.replace(secret, MASK)
    return out


def secrets_of(url: str) -> list[str]:
    """The credentials in ``url``, as written and percent-decoded."""
    from urllib.parse import unquote  # only on error paths: keeps `import durably` fast

    userinfo, param = _patterns()
    found = [m["secret"] for m in userinfo.finditer(url)]
    found += [m["secret"] for m in _whole_url_userinfo().finditer(url)]
    found += [m["secret"].strip("'\"") for m in param.finditer(url)]
    out: set[str] = set()
    for secret in found:
        if secret:
            out.add(secret)
            out.add(unquote(secret))
    return sorted(out)


def redact_url(url: str) -> str:
    """``url`` as it may be shown: :func:`redact` of it, its own secrets masked even where
    the URL is too malformed for the patterns (a blank in the password)."""
    return redact(url, url=url)
