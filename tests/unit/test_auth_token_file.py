"""A token file (``--token-file``) or ``$TIKK_TOKEN`` whose text cannot travel in an
``authorization`` header is refused before any call, naming where it came from and what is
wrong, never showing the token; a trailing newline is not a problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.cli import main
from server.cli.options import EXIT_USAGE, read_token_file
from tikk.client.transport import Transport, TransportError

TOKEN = "tikk_" + "0" * 32 + "_s3cr3t-Secret_part"


def _file(tmp_path: Path, content: bytes) -> Path:
    path = tmp_path / "ci.token"
    path.write_bytes(content)
    return path


@pytest.mark.parametrize(
    "text",
    [TOKEN, f"{TOKEN}\n", f"{TOKEN}\r\n", f"\ufeff{TOKEN}\n"],
    ids=["bare", "newline", "crlf", "byte-order-mark"],
)
def test_a_token_alone_on_its_line_is_read(tmp_path: Path, text: str) -> None:
    assert read_token_file(str(_file(tmp_path, text.encode()))) == TOKEN


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (f"{TOKEN}\nsecond line\n".encode(), "holds 2 lines of text"),
        (f"{TOKEN[:9]}\r{TOKEN[9:]}".encode(), "holds 2 lines of text"),
        (f"{TOKEN[:9]} {TOKEN[9:]}".encode(), "character 10 of the token is a space"),
        (f"{TOKEN[:9]}\x00{TOKEN[9:]}".encode(), "character 10 of the token is a control"),
        (f"{TOKEN[:9]}é{TOKEN[9:]}".encode(), "character 10 of the token is not ASCII"),
        (TOKEN.encode()[:9] + b"\xff" + TOKEN.encode()[9:], "is not ASCII"),
    ],
    ids=["two-lines", "carriage-return", "space", "nul", "non-ascii", "not-utf8"],
)
def test_a_token_file_that_cannot_be_sent_is_refused_naming_the_file(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    path = _file(tmp_path, content)
    with pytest.raises(TransportError) as refused:
        read_token_file(str(path))
    message = str(refused.value)
    assert message.startswith(f"--token-file {path}") and problem in message
    assert TOKEN[9:] not in message and "second line" not in message


def test_a_missing_token_file_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(TransportError, match=f"cannot read --token-file {tmp_path}/none"):
        read_token_file(str(tmp_path / "none"))


def test_the_cli_refuses_a_two_line_token_file_before_any_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _file(tmp_path, f"{TOKEN}\n{TOKEN}\n".encode())
    # Nothing listens on port 1: a call made anyway would end in a connection error instead.
    code = main(["task", "get", "t1", "--server", "127.0.0.1:1", "--timeout", "5",
                 "--token-file", str(path)])  # fmt: skip
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    assert f"--token-file {path} holds 2 lines of text" in err
    assert TOKEN not in err


def test_a_two_line_tikk_token_is_refused_naming_the_variable(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIKK_TOKEN", f"{TOKEN}\n{TOKEN}")
    code = main(["task", "get", "t1", "--server", "127.0.0.1:1", "--timeout", "5"])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    assert "$TIKK_TOKEN holds 2 lines of text" in err


@pytest.mark.parametrize("token", ["tikk_a_b\ntikk_c_d", "tikk_a_b ", "tikk_a_\x00b"])
def test_a_transport_refuses_a_token_no_header_can_carry(token: str) -> None:
    """A program building its own ``Transport`` learns it at once, not as INTERNAL at its
    first call."""
    with pytest.raises(TransportError, match="the transport's token") as caught:
        Transport(token=token)
    assert "tikk_" not in str(caught.value)
