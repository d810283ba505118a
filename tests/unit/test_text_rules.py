"""``tikk.text_rules``: which characters a name may hold, how stored text is printed and
logged, and how much of its input an error quotes."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from tikk.errors import InvalidArgument
from tikk.schedules.cron import parse_cron
from tikk.schedules.spec import time_zone
from tikk.text_rules import LogTextBounds, bound_log_text, check_name, quoted, shown

FORGED = "2030-01-01 00:00:00,000 CRITICAL tikk.server: disk wiped"


@pytest.mark.parametrize(
    "name",
    ["task-1", "façade", "日本語のタスク", "Grüße 🙂", "a b", "Ελληνικά", "עברית", "e\u0301"],
)
def test_printable_text_of_any_script_is_a_name(name: str) -> None:
    assert check_name(name, "f") == name


@pytest.mark.parametrize(
    ("char", "kind"),
    [
        *[(c, "a control character") for c in "\x00\x07\x0a\x0d\x1b\x7f\x85\x9b"],
        *[(c, "a bidi control") for c in "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e"],
        *[(c, "a bidi control") for c in "\u2066\u2067\u2068\u2069"],
        *[
            (c, "an invisible character")
            for c in "\u200b\u200c\u200d\u2060\ufeff\u00ad\U000e0041\u034f\u3164\ufe0f\u115f"
        ],
        ("\u2028", "a line or paragraph separator"),
        ("\u2029", "a line or paragraph separator"),
        ("\ud800", "a surrogate"),
        *[(c, "an unassigned code point") for c in "\u0378\uffff\U0010ffff"],
    ],
)  # fmt: skip
def test_a_hidden_character_is_refused_naming_its_code_point(char: str, kind: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        check_name(f"a{char}b", "labels['team']")
    assert err.value.field == "labels['team']"
    assert err.value.reason.startswith(f"contains U+{ord(char):04X} ({kind}) at character 2")


def test_shown_escapes_what_would_steer_a_terminal_and_keeps_the_rest() -> None:
    assert (
        shown("\x1b]0;owned\x07\x1b[2J\rok\x00\u202efed\n\tat x\U000e0041 é 日本 🙂")
        == "\\x1b]0;owned\\x07\\x1b[2J\\rok\\x00\\u202efed\\n\\tat x\\U000e0041 é 日本 🙂"
    )
    assert shown("plain text") == "plain text"


def test_shown_bounds_the_escaped_text_and_says_how_much_was_left_out() -> None:
    assert shown("x" * 1_000, 10) == "x" * 10 + "…(990 more)"
    assert shown("\x1b" * 10, 9) == "\\x1b\\x1b…(8 more)"
    assert shown("short", 10) == "short"
    assert len(shown("\u202e" * 2_000_000, 200)) < 220


def test_an_error_quotes_at_most_a_hundred_characters_of_input() -> None:
    assert quoted("key") == "'key'"
    assert quoted("k" * 65_536) == "'" + "k" * 100 + "…(65,436 more)'"


def test_cron_and_zone_errors_quote_a_little_of_their_input_escaped() -> None:
    with pytest.raises(InvalidArgument) as err:
        parse_cron(f"0 {'x' * 900} * * *")
    assert err.value.field == "spec.cron" and len(str(err.value)) < 300, str(err.value)
    with pytest.raises(InvalidArgument) as err:
        parse_cron(f"{'9' * 5_000} * * * *")  # more digits than int() reads
    assert err.value.reason == "longer than 1,000 characters: 5,008"
    with pytest.raises(InvalidArgument) as err:
        time_zone("Europe/\u202eolsO" + "x" * 200)
    assert "\\u202eolsO" in err.value.reason and len(err.value.reason) < 200


@pytest.fixture
def logged() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger writing to a string through a handler that has the filter installed."""
    out = io.StringIO()
    logger = logging.getLogger("tikk.test.text_rules")
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.propagate = False
    bound_log_text(logger)
    bound_log_text(logger)  # once is enough: a second call adds nothing
    assert len(handler.filters) == 1
    yield logger, out
    logger.removeHandler(handler)
    logger.propagate = True


def test_a_newline_in_logged_request_text_cannot_start_a_forged_line(
    logged: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, out = logged
    logger.warning("result %s not recorded: %s", "r1\n" + FORGED, ValueError("bad\r\x1b[2K"))
    logger.warning("preformatted " + "t\n" + FORGED)
    lines = out.getvalue().splitlines()
    assert lines == [
        "WARNING tikk.test.text_rules: result r1\\n" + FORGED + " not recorded: bad\\r\\x1b[2K",
        "WARNING tikk.test.text_rules: preformatted t\\n" + FORGED,
    ]


def test_logged_request_text_is_bounded(logged: tuple[logging.Logger, io.StringIO]) -> None:
    logger, out = logged
    logger.warning("result %s not recorded", "x" * 2_000_000)
    logger.warning("%(what)s", {"what": "y" * 10_000})
    logger.warning("refused %s", RuntimeError("z" * 100_000))
    first, second, third = out.getvalue().splitlines()
    assert first.endswith("x" * 200 + "…(1,999,800 more) not recorded")
    assert second.endswith("y" * 200 + "…(9,800 more)")
    assert len(third) < 4_100 and third.endswith("more)")


def test_a_record_whose_arguments_do_not_fit_its_message_is_left_to_logging() -> None:
    record = logging.LogRecord("tikk", logging.WARNING, __file__, 1, "%d items", ("x",), None)
    assert LogTextBounds().filter(record)
    assert record.args == ("x",)
