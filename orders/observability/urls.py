"""Never print a password: the one masker for URLs, known secrets and the text around them.

A Redis or database URL may carry a password in its user info
(``redis://user:secret@host``) or in its query (``redis://host/0?password=secret``,
``postgresql://host/db?password=secret``), and the password may hold characters
that a URL parser reads as structure (an unencoded ``/``, ``?``, ``#`` or ``@``).
Such a parser then quotes a piece of the password in its own error ("Port could
not be cast to integer value as 'pa'"), where no URL is left to mask. So the masker
also knows the secrets themselves: those of the configured URLs and tokens
(:data:`SECRET_VARIABLES`), and of every URL the application connects with
(:func:`remember_url`), with their percent-encoded forms and the pieces a parser
cuts them into (:func:`forms`). Everything the CLI, the web dashboard or a log line
shows goes through :func:`mask_urls_in` (free text) or :func:`mask_url` (one URL)
first. Both are plain text rewriting: they never parse a port or a host, so a
malformed URL cannot make them raise, and when in doubt they hide more than less.
"""

from __future__ import annotations

import os
import re
import threading
from functools import lru_cache
from urllib.parse import quote, unquote

MASK = "***"

#: Environment variables whose value is a secret or a URL that may hold one; the
#: masker reads them at each call (a command may set them after start-up).
SECRET_VARIABLES = ("ORDERS_REDIS_URL", "ORDERS_DATABASE_URL", "ORDERS_WEB_TOKEN")

# Where a URL parser cuts a password into pieces (user info, path, query, fragment).
_CUTS = re.compile(r"[/?#@:%&;=\s]+")
# A piece this long is masked wherever it appears; a shorter one only as a whole word
# (a piece of one or two letters inside other words says nothing of the secret, and
# masking it there would garble the text), a single character only when quoted.
_ANYWHERE = 6
_remembered: set[str] = set()
_lock = threading.Lock()

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
    return mask_secrets_in(_mask_one(url))


def mask_urls_in(text: str) -> str:
    """Mask the passwords of every URL inside free text, and ``password=...`` pairs.

    Args:
        text: a log message, an error message, a traceback, a page's text.

    Returns:
        str: ``text`` with each password replaced by ``***`` (see :func:`mask_url`;
        a URL ends at white space), and every known secret or piece of one
        (:func:`mask_secrets_in`). Never raises.
    """
    if "://" in text:
        text = _URL.sub(lambda m: _mask_one(m[0]), text)
    if "=" in text:
        text = _mask_params(text)
    return mask_secrets_in(text)


def _url_secrets(value: str) -> list[str]:
    """The secrets a URL (or a bare secret) carries: its user-info password and the
    values of its ``password=``-like parameters; a value without ``://`` is one secret."""
    scheme, sep, rest = value.partition("://")
    if not sep:
        return [value] if value else []
    found = [m["value"] for m in _SECRET_PARAM.finditer(rest) if m["value"]]
    at = rest.rfind("@")
    if at >= 0:
        _user, colon, password = rest[:at].partition(":")
        if colon and password:
            found.append(password)
    return found


def forms(secret: str) -> set[str]:
    """Every text a secret may be shown as: itself, percent-decoded and -encoded, and
    the pieces a URL parser cuts each of those into (at ``/ ? # @ : % & ; =``)."""
    whole = {secret, unquote(secret), quote(secret, safe=""), quote(secret, safe="/:@")}
    pieces = {p for w in whole for p in _CUTS.split(w) if p}
    return {f for f in whole | pieces if f}


def remember_url(url: str | None) -> None:
    """Mask the secrets of ``url`` (a URL or a bare secret) in every text from now on.

    Called where the application turns a URL into a client or an engine, so a secret
    that reached this process by any route (settings, the embedded server's own
    password, a test) is masked like the configured ones.
    """
    if not url:
        return
    found = _url_secrets(url)
    if found:
        with _lock:
            _remembered.update(found)


def _known() -> tuple[str, ...]:
    """The secrets to mask now: those of :data:`SECRET_VARIABLES` and the remembered ones."""
    found = set(_remembered)
    for name in SECRET_VARIABLES:
        value = os.environ.get(name)
        if value:
            found.update(_url_secrets(value) if "URL" in name else [value])
    return tuple(sorted(found))


@lru_cache(maxsize=32)
def _pattern(secrets: tuple[str, ...]) -> re.Pattern[str] | None:
    """One regex matching every form of ``secrets``, longest first."""
    everywhere, words, quoted = set(), set(), set()
    for secret in secrets:
        for form in forms(secret):
            if len(form) >= _ANYWHERE or form == secret:
                everywhere.add(form)
            elif len(form) > 1:
                words.add(form)
            else:
                quoted.add(form)
    alternatives = [re.escape(f) for f in sorted(everywhere, key=len, reverse=True)]
    alternatives += [
        rf"(?<![^\W_]){re.escape(f)}(?![^\W_])" for f in sorted(words, key=len, reverse=True)
    ]
    alternatives += [rf"(?<=['\"]){re.escape(f)}(?=['\"])" for f in sorted(quoted)]
    return re.compile("|".join(alternatives)) if alternatives else None


def mask_secrets_in(text: str) -> str:
    """``text`` with every known secret, and every piece of one, replaced by ``***``.

    Args:
        text: any text about to be shown or logged.

    Returns:
        str: the text masked (see :func:`forms` for what is matched). Never raises.
    """
    pattern = _pattern(_known())
    return pattern.sub(MASK, text) if pattern is not None else text


def install_excepthooks() -> None:
    """Route the interpreter's last-resort error printers through the masker.

    An exception nobody catches (in the main thread, or in a thread of its own) is
    printed by ``sys.excepthook`` / ``threading.excepthook``; both are replaced by
    printers that write the same traceback with every secret masked.
    """
    import sys
    import traceback

    def masked(kind: type[BaseException], exc: BaseException, tb: object) -> None:
        text = "".join(traceback.format_exception(kind, exc, tb))  # type: ignore[arg-type]
        sys.stderr.write(mask_urls_in(text))

    def masked_thread(args: threading.ExceptHookArgs) -> None:
        if args.exc_type is SystemExit:
            return
        name = args.thread.name if args.thread is not None else "?"
        sys.stderr.write(f"Exception in thread {name}:\n")
        masked(args.exc_type, args.exc_value or args.exc_type(), args.exc_traceback)

    sys.excepthook = masked
    threading.excepthook = masked_thread
