"""Never print a password: one masking function for URLs and the text around them.

A Redis or database URL may carry a password in its user info
(``redis://user:secret@host``) or in its query (``redis://host/0?password=secret``,
``postgresql://host/db?password=secret``), and the password may hold characters
that a URL parser reads as structure (an unencoded ``/``, ``?``, ``#`` or ``@``).
Everything the CLI, the web dashboard or a log line shows goes through
:func:`mask_urls_in` (free text) or :func:`mask_url` (one URL) first. Both are
plain text rewriting: they never parse a port or a host, so a malformed URL
cannot make them raise, and when in doubt they hide more rather than less.
"""

from __future__ import annotations

import re

MASK = "***"

# A URL inside text: a scheme, "://", then everything up to white space.
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://\S*")
# A query or key=value parameter whose name says it holds a secret.
_SECRET_PARAM = re.compile(
    r"(?i)(?P<key>\b[A-Za-z_]*(?:password|passwd|pwd|secret|token))=(?P<value>[^&;#\s'\"]*)"
)


def _mask_params(text: str) -> str:
    return _SECRET_PARAM.sub(lambda m: f"{m['key']}={MASK}" if m["value"] else m[0], text)


def _mask_one(url: str) -> str:
    """Mask one URL: its user info password (up to the LAST ``@``) and secret parameters."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return _mask_params(url)
    at = rest.rfind("@")
    if at >= 0:
        userinfo, host_and_more = rest[:at], rest[at + 1 :]
        user, colon, _password = userinfo.partition(":")
        if colon:
            rest = f"{user}:{MASK}@{host_and_more}"
    return f"{scheme}://{_mask_params(rest)}"


def mask_url(url: str | None) -> str | None:
    """Return ``url`` with every password in it replaced by ``***``.

    Args:
        url: any URL redis-py or SQLAlchemy accepts (``redis://:secret@host:6379/0``,
            ``rediss://user:pa/ss@host``, ``redis://host/0?password=secret``,
            ``postgresql+psycopg://user:secret@[::1]/db``, ``unix:///run/r.sock``),
            or None.

    Returns:
        str | None: the same text with the user-info password (everything between
        the first ``:`` after the user name and the last ``@``) and the values of
        ``password=``-like parameters masked; user, host, port and path kept. URLs
        without a password come back unchanged; None stays None. Never raises.
    """
    if url is None:
        return None
    return _mask_one(url)


def mask_urls_in(text: str) -> str:
    """Mask the passwords of every URL inside free text, and ``password=...`` pairs.

    Args:
        text: a log message, an error message, a traceback, a page's text.

    Returns:
        str: ``text`` with each password replaced by ``***`` (see :func:`mask_url`;
        a URL ends at white space). Never raises.
    """
    if "://" in text:
        text = _URL.sub(lambda m: _mask_one(m[0]), text)
    if "=" in text:
        text = _mask_params(text)
    return text
