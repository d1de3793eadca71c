"""The one way the CLI puts text on a terminal: safe, readable, and within 80 columns.

Text from jobs, users or Redis is untrusted. Everything a command prints goes
through this module:

- :func:`text` / :func:`clean` turn a value into text that cannot act on the
  terminal: control characters (ESC, CR, BEL, the bidi overrides, ...) are
  shown as ``\\x1b``-style escapes, and Rich markup (``[/]``) is never
  interpreted because cells are :class:`rich.text.Text`, not markup strings.
- :data:`console` / :data:`err_console` write through :class:`_Degrading`: a
  character the output encoding cannot carry (CJK or emoji on a cp1252 pipe)
  becomes ``?`` instead of raising ``UnicodeEncodeError``; Rich sees the
  encoding and draws ASCII table borders.
- :func:`when`, :func:`fields` and :func:`short_ids` format times, hide empty
  fields and shorten job ids to unique prefixes.

``--json`` output does not come here: it keeps the raw data (``emit_json``).
"""

from __future__ import annotations

import datetime as dt
import os
import sys
from collections.abc import Iterable, Mapping
from typing import Any, TextIO

from rich import box
from rich.cells import cell_len, set_cell_size
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from orders.observability.urls import mask_urls_in
from orders.observability.visible import visible

SHORT_ID = 14
"""Shortest job id prefix a text view shows: the 11 hex digits of the creation
millisecond plus 3 random ones (see ``reliable_queue.ids``)."""


def _empty(value: Any) -> bool:
    """None, False and empty text or collections are hidden from human views (0 is shown)."""
    return (
        value is None
        or value is False
        or (isinstance(value, str | list | tuple | dict) and not value)
    )


class _Degrading:
    """A text stream in front of the current ``sys.stdout`` / ``sys.stderr`` that
    replaces characters its encoding cannot carry with ``?`` (never raises for them)."""

    def __init__(self, name: str) -> None:
        self._name = name

    @property
    def _stream(self) -> TextIO:
        stream: TextIO = getattr(sys, self._name)
        # rich.live.Live swaps sys.stdout for a proxy that prints through the console:
        # write to the file behind it, or the console would write to itself.
        return getattr(stream, "rich_proxied_file", stream)

    @property
    def encoding(self) -> str:
        return getattr(self._stream, "encoding", None) or "utf-8"

    def write(self, data: str) -> int:
        try:
            return self._stream.write(data)
        except UnicodeEncodeError:
            return self._stream.write(degrade(data, self.encoding))

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return bool(getattr(self._stream, "isatty", lambda: False)())

    def fileno(self) -> int:
        return self._stream.fileno()


console = Console(file=_Degrading("stdout"))  # type: ignore[arg-type]
err_console = Console(file=_Degrading("stderr"))  # type: ignore[arg-type]


def degrade(value: str, encoding: str) -> str:
    """``value`` with every character ``encoding`` cannot encode replaced by ``?``."""
    return value.encode(encoding, "replace").decode(encoding, "replace")


def clean(value: Any, *, multiline: bool = False) -> str:
    """``str(value)`` made harmless for a terminal (see :mod:`orders.observability.visible`).

    Args:
        value: anything; None becomes ``-``.
        multiline: keep newlines and tabs (a traceback); otherwise they are
            escaped too, so one value stays on one line of a table.

    Returns:
        The text with control and bidi characters shown as ``\\x..`` / ``\\u....``
        escapes. Rich markup is left as is: print the result as :class:`Text`
        (see :func:`text`) or with ``markup=False``.
    """
    return visible(value, multiline=multiline)


def text(value: Any, style: str = "", *, multiline: bool = False, limit: int = 0) -> Text:
    """A table cell or line for ``value``: cleaned (see :func:`clean`), never read as markup.

    Args:
        value: anything.
        style: a Rich style for the whole text.
        multiline: keep newlines and tabs.
        limit: keep at most this many characters (0: all), ending in ``…`` when cut.
    """
    shown = clean(value, multiline=multiline)
    if limit and len(shown) > limit:
        shown = shown[: limit - 1] + "…"
    return Text(shown, style=style)


def for_terminal(value: Any, limit: int = 500) -> str:
    """``value`` cleaned (see :func:`clean`), cut to ``limit`` characters and
    markup-escaped: safe inside a string printed with Rich markup on."""
    return escape(clean(str(value)[:limit]))


def say(message: str, *values: Any, style: str = "") -> None:
    """Print one line on stdout: ``message`` with ``{}`` filled by cleaned ``values``.

    ``message`` is the program's own text; ``values`` may be untrusted.
    """
    console.print(
        Text(message.format(*(clean(v) for v in values)), style=style),
        highlight=False,
        soft_wrap=True,
    )


def warn(lines: Iterable[str]) -> None:
    """Each line on stderr as ``WARNING: ...`` (cleaned, secrets masked): something a
    view shows could not be read, and the view went on without it."""
    for shown in lines:
        line = Text("WARNING: ", style="bold red")
        line.append(clean(mask_urls_in(shown)))
        err_console.print(line, highlight=False, soft_wrap=True)


def when(value: Any, *, date: bool = True, ms: bool = False) -> str:
    """A time for people: ``2026-12-01 03:04:05 UTC`` (or ``03:04:05`` without ``date``).

    Args:
        value: epoch seconds (int/float), a datetime (naive means UTC), or None.
        date: include the date.
        ms: include milliseconds.

    Returns:
        The formatted time, or ``-`` for None.
    """
    if value is None:
        return "-"
    if isinstance(value, dt.datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    else:
        moment = dt.datetime.fromtimestamp(float(value), dt.UTC)
    moment = moment.astimezone(dt.UTC)
    shown = moment.strftime("%Y-%m-%d %H:%M:%S.%f" if date else "%H:%M:%S.%f")
    shown = shown[:-3] if ms else shown[:-7]
    return f"{shown} UTC" if date else shown


EPOCH_KEYS = frozenset({"at", "deadline", "queue_time"})
"""Field names holding a point in time (epoch seconds) that end in none of ``_at``,
``_deadline``, ``_until`` (``queue_time``: the queue clock at an ``orders explain``)."""


def _is_time_key(key: str) -> bool:
    return key.endswith(("_at", "_deadline", "_until")) or key in EPOCH_KEYS


def _field_value(key: str, value: Any) -> str:
    if _is_time_key(key) and isinstance(value, int | float | dt.datetime):
        return when(value, ms=True)
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list | tuple):
        return ", ".join(clean(v) for v in value)
    return clean(value, multiline=True)


def fields(
    values: Mapping[str, Any], *, skip: Iterable[str] = (), indent: int = 0, out: Console = console
) -> None:
    """Print ``key: value`` lines, hiding empty fields and formatting times.

    Args:
        values: field name -> value; nested mappings print as indented blocks,
            keys ending in ``_at`` / ``_deadline`` holding epoch seconds or a
            datetime print as UTC times, multi-line text (a traceback) prints
            indented below its key.
        skip: field names not to print.
        indent: spaces before each line.
        out: the console to print on.
    """
    skipped = set(skip)
    pad = " " * indent
    for key, value in values.items():
        if key in skipped or _empty(value):
            continue
        label = key.replace("_", " ")
        if isinstance(value, Mapping):
            out.print(Text(f"{pad}{label}:", style="bold"), highlight=False)
            fields(value, indent=indent + 2, out=out)
            continue
        shown = _field_value(key, value)
        if "\n" in shown:
            out.print(Text(f"{pad}{label}:", style="bold"), highlight=False)
            body = "\n".join(f"{pad}  {line}" for line in shown.rstrip("\n").splitlines())
            out.print(Text(body), highlight=False, soft_wrap=True)
        else:
            line = Text(f"{pad}{label}: ", style="bold")
            line.append(shown)
            out.print(line, highlight=False)


def short_ids(ids: Iterable[str], minimum: int = SHORT_ID) -> dict[str, str]:
    """Each id -> its shortest prefix of at least ``minimum`` characters unique among ``ids``.

    Prefixes that are unique among the ids shown may still match more jobs in
    the queue: the lookup then lists the candidates.
    """
    unique = sorted(set(ids))
    result: dict[str, str] = {}
    for i, job_id in enumerate(unique):
        need = minimum
        for other in (unique[i - 1] if i else None, unique[i + 1] if i + 1 < len(unique) else None):
            if other is None:
                continue
            common = len(os.path.commonprefix([job_id, other]))
            need = max(need, common + 1)
        result[job_id] = job_id[:need]
    return result


def fault_summary(config: Mapping[str, Any]) -> str:
    """One injected-fault config as words: ``fail 30% (permanent), crash 5%, delay 200 ms``.

    Args:
        config: a ``FaultConfig`` as a dict (rates 0..1, times in milliseconds).
    """
    parts = []
    if config.get("fail_rate"):
        parts.append(
            f"fail {config['fail_rate']:.0%}" + (" (permanent)" if config.get("permanent") else "")
        )
    if config.get("crash_rate"):
        parts.append(f"crash {config['crash_rate']:.0%} after the effect")
    if config.get("crash_once"):
        parts.append("crash once after the effect")
    if config.get("delay_ms"):
        parts.append(f"delay {config['delay_ms']} ms")
    if config.get("slow_rate"):
        parts.append(f"stall {config['slow_rate']:.0%} for {config.get('slow_ms', 0)} ms")
    return ", ".join(parts) or "no faults"


def compact_table(title: str | None = None, caption: str | None = None) -> Table:
    """A table of counts drawn without vertical rules, so ten narrow columns fit 80."""
    return Table(
        title=title,
        caption=caption,
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        show_edge=False,
        collapse_padding=True,
        title_justify="left",
        caption_justify="left",
    )


FLEX_MIN = 10
"""Columns the flexible (error) column of :func:`fitted_table` should keep: less,
and a droppable column gives way first."""


def fitted_table(
    headers: list[str],
    rows: list[list[str]],
    *,
    flex: int,
    title: str | None = None,
    caption: str | None = None,
    right: tuple[int, ...] = (),
    width: int | None = None,
    keep: tuple[int, ...] = (),
    drop: tuple[int, ...] = (),
    flex_min: int = FLEX_MIN,
) -> Table:
    """A table of plain cells that fits the console: every column keeps its full
    width except column ``flex`` (an error text), which is cut with ``…``.

    Where the columns do not fit even so (a narrow terminal), the ``drop`` columns
    are left out, in that order, until the flex column has ``flex_min`` columns
    (:data:`FLEX_MIN` by default); a ``keep`` column (job ids: a cut id can be an
    ambiguous prefix) is never cut: if it still does not fit, it is folded onto more
    lines, whole.

    Args:
        headers: column titles.
        rows: cell texts (cleaned here; never read as markup).
        flex: index of the column that gives up width.
        title / caption: optional lines above / below.
        right: indexes of right-aligned columns.
        width: columns available (default: the console's width, ``COLUMNS``).
        keep: indexes of columns shown whole, folded rather than cut.
        drop: indexes of columns that may be left out, least important first.
        flex_min: columns of the flex column worth dropping another column for.

    Returns:
        The table (its columns in the order of ``headers``, less those dropped).
    """
    total = width or console.width
    cells = [[clean(c) for c in row] for row in rows]
    widths = [max([cell_len(h), *(cell_len(r[i]) for r in cells)]) for i, h in enumerate(headers)]

    def room_left(columns: list[int]) -> int:
        fixed = sum(widths[i] for i in columns if i != flex)
        return total - fixed - 3 * len(columns) - 1

    shown = list(range(len(headers)))
    for victim in drop:
        if room_left(shown) >= min(widths[flex], flex_min):
            break
        shown.remove(victim)
    room = max(4, room_left(shown))
    table = Table(title=title, caption=caption, title_justify="left", caption_justify="left")
    for i in shown:
        size = min(widths[i], room) if i == flex else widths[i]
        justify = "right" if i in right else "left"
        if i in keep:
            table.add_column(
                headers[i], justify=justify, no_wrap=False, overflow="fold", min_width=size
            )
        else:
            table.add_column(headers[i], justify=justify, no_wrap=True, width=size)
    for row in cells:
        if cell_len(row[flex]) > room:
            row[flex] = set_cell_size(row[flex], room - 1) + "…"
        table.add_row(*(Text(row[i]) for i in shown))
    return table
