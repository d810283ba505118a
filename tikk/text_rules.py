"""Which characters a name may hold, and how stored text is shown: one rule for both.

A name (a task or schedule id, a handler, a label value, a worker's id) is read by people in
listings and logs, so it may hold only characters that are shown as themselves. Refused:

* control characters: C0 (U+0000-001F), DEL and C1 (U+007F-009F), which steer a terminal
  (clear the screen, set the window title, return to the start of the line);
* bidi controls (U+061C, U+200E-200F, U+202A-202E, U+2066-2069), which reorder what follows:
  ``invoice<U+202E>gpj.exe`` is shown as ``invoiceexe.jpg``;
* invisible characters: the other format characters (category Cf: zero-width space and
  joiners, word joiner, byte-order mark, soft hyphen, tags) and the rest of Unicode's
  default-ignorable code points (Hangul fillers, variation selectors), with which two names
  that look the same differ;
* line and paragraph separators (U+2028, U+2029);
* surrogates, and code points unassigned in the Unicode version of the running Python
  (noncharacters included): nothing can show them.

Printable text of any script stays a name: ``é``, ``日本``, an emoji without a joiner.

Free text that is stored as it came (a run's error message, its output, a pause note) may
hold anything; whatever prints it, a CLI line or a log line, shows it through ``shown``, which
writes each of those characters as an escape (``\\x1b``, ``\\n``, ``\\u202e``) and bounds the
text when asked. An error quotes input through ``quoted``: escaped and at most
``ECHO_MOST`` characters, so a huge value cannot make the error itself too large to send.
"""

from __future__ import annotations

import logging
import unicodedata

from tikk.errors import InvalidArgument

# Characters of input an error message quotes.
ECHO_MOST = 100
# Characters of one text argument of a log record, and of a whole log message.
_LOG_ARGUMENT_MOST = 200
_LOG_MESSAGE_MOST = 4_000

_BIDI = frozenset(
    chr(c) for c in (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
)
# Default-ignorable code points of categories other than Cf and Cn (which are refused whole):
# letters and marks that are drawn as nothing.
_IGNORABLE = (
    (0x034F, 0x034F), (0x115F, 0x1160), (0x17B4, 0x17B5), (0x180B, 0x180F), (0x3164, 0x3164),
    (0xFE00, 0xFE0F), (0xFFA0, 0xFFA0), (0xE0100, 0xE01EF),
)  # fmt: skip
_KIND_OF_CATEGORY = {
    "Cc": "a control character",
    "Cf": "an invisible character",
    "Zl": "a line or paragraph separator",
    "Zp": "a line or paragraph separator",
    "Cs": "a surrogate",
    "Cn": "an unassigned code point",
}
_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def hidden_kind(char: str) -> str | None:
    """What makes ``char`` unfit for a name (``"a bidi control"``), or None if it is shown
    as itself."""
    if char in _BIDI:
        return "a bidi control"
    kind = _KIND_OF_CATEGORY.get(unicodedata.category(char))
    if kind is None and any(low <= ord(char) <= high for low, high in _IGNORABLE):
        return "an invisible character"
    return kind


def _plain(text: str) -> bool:
    """Printable ASCII only: nothing to refuse or escape (the common case, checked fast)."""
    return text.isascii() and text.isprintable()


def check_name(value: str, field: str) -> str:
    """``value`` if every character is shown as itself, else ``InvalidArgument`` on ``field``
    naming the first one that is not, by code point, kind and position."""
    if _plain(value):
        return value
    for at, char in enumerate(value, start=1):
        if kind := hidden_kind(char):
            raise InvalidArgument(
                field, f"contains U+{ord(char):04X} ({kind}) at character {at}: only "
                "characters that are shown as themselves are allowed",
            )  # fmt: skip
    return value


def _escaped(char: str) -> str:
    if hidden_kind(char) is None:
        return char
    if char in _SHORT_ESCAPES:
        return _SHORT_ESCAPES[char]
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def shown(text: str, most: int | None = None) -> str:
    """``text`` as it may be printed: each character ``hidden_kind`` names written as an
    escape, the rest as it is; with ``most``, at most that many characters of the escaped
    form, then how many characters of ``text`` were left out (``…(1,234 more)``)."""
    if _plain(text):
        if most is None or len(text) <= most:
            return text
        return f"{text[:most]}…({len(text) - most:,} more)"
    pieces: list[str] = []
    used = 0
    for at, char in enumerate(text):
        piece = _escaped(char)
        if most is not None and used + len(piece) > most:
            return "".join(pieces) + f"…({len(text) - at:,} more)"
        pieces.append(piece)
        used += len(piece)
    return "".join(pieces)


def quoted(text: str) -> str:
    """Input as an error message quotes it: in quotes, escaped, at most ``ECHO_MOST``
    characters of it."""
    return f"'{shown(text, ECHO_MOST)}'"


class LogTextBounds(logging.Filter):
    """Makes a log record one bounded line whatever request text it carries: each text
    argument escaped and bounded (a run id of two megabytes is logged as its first 200
    characters), then the message as a whole escaped and bounded, so a newline in a request
    cannot start a forged line and no request makes a huge one. Installed on the handlers,
    so it sees the records of every logger."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple):
            record.args = tuple(_bounded_argument(a) for a in args)
        elif isinstance(args, dict):
            record.args = {k: _bounded_argument(v) for k, v in args.items()}
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # arguments that do not fit: logging reports it
            return True
        record.msg, record.args = shown(message, _LOG_MESSAGE_MOST), ()
        return True


def _bounded_argument(value: object) -> object:
    return shown(value, _LOG_ARGUMENT_MOST) if isinstance(value, str) else value


def bound_log_text(logger: logging.Logger | None = None) -> None:
    """Install ``LogTextBounds`` on each handler of ``logger`` (the root by default) that does
    not have it yet."""
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, LogTextBounds) for f in handler.filters):
            handler.addFilter(LogTextBounds())
