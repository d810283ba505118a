"""Backend URLs with credentials (``tikk.urls``), the config file that may hold inline
passwords (``server.cli.options``), and that a password shows nowhere: not in a redacted URL,
a ``repr``, an error message or the CLI's output."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from server.cli import main as cli_main
from server.cli.options import EXIT_USAGE, backend_urls
from tikk.errors import BackendRefused, InvalidArgument
from tikk.queue_contract import KafkaQueueUrl
from tikk.settings import Settings
from tikk.urls import BackendUrl, has_inline_password, redact

SECRET = "s3cr3t-Pa55"


@pytest.fixture
def password_file(tmp_path: Path) -> Path:
    path = tmp_path / "pw"
    path.write_text(SECRET + "\n")
    path.chmod(0o600)
    return path


def test_a_password_file_gives_user_and_password_and_is_shown_but_not_its_content(
    password_file: Path,
) -> None:
    url = f"cassandra://tikk@db1:9042,db2:9042/ks?consistency=ONE&password_file={password_file}"
    parsed = BackendUrl.parse("store_url", url)
    assert parsed.credentials is not None
    assert (parsed.credentials.user, parsed.credentials.password) == ("tikk", SECRET)
    assert parsed.bare == "cassandra://db1:9042,db2:9042/ks?consistency=ONE"
    assert parsed.tls is None
    shown = parsed.redacted()
    assert shown.startswith("cassandra://tikk@db1:9042,db2:9042/ks?consistency=ONE")
    assert f"password_file={password_file}" in shown
    assert SECRET not in shown + repr(parsed) + str(parsed)


def test_an_inline_password_is_read_and_never_shown() -> None:
    url = f"kafka://tikk:{SECRET}@k1:9093?prefix=p.&tls=1"
    parsed = BackendUrl.parse("queue_url", url)
    assert parsed.credentials is not None and parsed.credentials.password == SECRET
    assert has_inline_password(url) and not has_inline_password("kafka://tikk@k1:9093")
    for shown in (parsed.redacted(), redact(url), repr(parsed)):
        assert SECRET not in shown
    assert redact(url) == "kafka://tikk@k1:9093?prefix=p.&tls=1"
    assert redact("sqlite:///var/tikk.db") == "sqlite:///var/tikk.db"


def test_settings_from_a_config_file_never_show_its_passwords() -> None:
    settings = Settings(
        store_url=f"cassandra://tikk:{SECRET}@db1:9042/ks",
        history_url=f"cassandra://tikk:{SECRET}@db1:9042/ks",
        queue_url=f"kafka://tikk:{SECRET}@k1:9093?sasl=SCRAM-SHA-256",
        ownership_url=f"zk://tikk:{SECRET}@zk1:2181/tikk",
    )
    shown = repr(settings) + str(settings)
    assert SECRET not in shown
    assert "store_url='cassandra://tikk@db1:9042/ks'" in shown
    assert "ownership_url='zk://tikk@zk1:2181/tikk'" in shown and "shard_count=" in shown


def test_a_password_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIKK_TEST_ZK_PW", SECRET)
    parsed = BackendUrl.parse(
        "ownership_url", "zk://tikk@zk1:2181/tikk?password_env=TIKK_TEST_ZK_PW"
    )
    assert parsed.credentials is not None and parsed.credentials.password == SECRET
    assert parsed.bare == "zk://zk1:2181/tikk"


def test_tls_options(tmp_path: Path) -> None:
    on = BackendUrl.parse("queue_url", "kafka://k1:9093?tls=1")
    assert on.tls is not None and on.tls.ca_file == ""
    assert BackendUrl.parse("queue_url", "kafka://k1:9093?tls=0").tls is None
    ca = BackendUrl.parse("queue_url", f"kafka://k1:9093?tls_ca={tmp_path}/ca.pem")
    assert ca.tls is not None and ca.tls.ca_file == f"{tmp_path}/ca.pem"
    assert f"tls_ca={tmp_path}/ca.pem" in ca.redacted()


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("cassandra://tikk@h:1/ks", "has no password"),
        ("cassandra://h:1/ks?password_file=/x", "no user"),
        ("cassandra://tikk@h:1/ks?password_file=/nonexistent/pw", "cannot read password_file"),
        ("cassandra://tikk@h:1/ks?password_env=TIKK_TEST_UNSET_VARIABLE", "unset or empty"),
        ("cassandra://tikk:x@h:1/ks?password_file=/x", "give the password once"),
        ("kafka://tikk@h:1?password_env=X&sasl=GSSAPI", "unknown sasl mechanism"),
        ("kafka://h:1?sasl=PLAIN", "needs a user"),
        ("cassandra://tikk@h:1/ks?sasl=PLAIN&password_env=X", "kafka:// URLs only"),
        ("kafka://h:1?tls_cert=/c.pem", "tls_cert and tls_key go together"),
        ("kafka://h:1?tls=maybe", "tls must be 1 or 0"),
        ("kafka://h:1?tls_ca=/a&tls_ca=/b", "given twice"),
        ("kafka://h:1?tls=0&tls_ca=/a", "contradicts"),
    ],
)
def test_malformed_security_options_name_the_setting(url: str, says: str) -> None:
    os.environ.pop("TIKK_TEST_UNSET_VARIABLE", None)
    os.environ.setdefault("X", "x")
    with pytest.raises(InvalidArgument) as caught:
        BackendUrl.parse("queue_url", url)
    assert caught.value.field == "queue_url"
    assert says in str(caught.value)


def test_an_empty_password_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("\n")
    with pytest.raises(InvalidArgument, match="is empty"):
        BackendUrl.parse("store_url", f"cassandra://tikk@h:1/ks?password_file={tmp_path}/pw")


def test_unreadable_tls_files_are_a_clear_error_naming_the_setting() -> None:
    parsed = BackendUrl.parse("queue_url", "kafka://h:1?tls_ca=/nonexistent/ca.pem")
    with pytest.raises(InvalidArgument, match="queue_url: cannot load the TLS files"):
        parsed.ssl_context()


def test_kafka_url_gives_every_client_the_login_and_tls(password_file: Path) -> None:
    config = KafkaQueueUrl.from_url(
        f"kafka://tikk@k1:9093,k2:9093?prefix=p.&password_file={password_file}&tls=1"
    )
    options = config.client_options()
    assert options["bootstrap_servers"] == ["k1:9093", "k2:9093"]
    assert options["security_protocol"] == "SASL_SSL"
    assert options["sasl_mechanism"] == "SCRAM-SHA-256"  # the default with a user
    assert (options["sasl_plain_username"], options["sasl_plain_password"]) == ("tikk", SECRET)
    assert options["ssl_context"] is not None
    assert config.prefix == "p."
    assert SECRET not in repr(config) + config.shown
    plain = KafkaQueueUrl.from_url("kafka://k1:9093").client_options()
    assert plain == {"bootstrap_servers": ["k1:9093"], "security_protocol": "PLAINTEXT"}
    assert (
        KafkaQueueUrl.from_url("kafka://k1:9093?tls=1").client_options()["security_protocol"]
        == "SSL"
    )


def test_a_malformed_kafka_url_error_never_shows_the_password() -> None:
    with pytest.raises(InvalidArgument) as caught:
        KafkaQueueUrl.from_url(f"kafka://tikk:{SECRET}@k1?prefix=p.")
    assert SECRET not in str(caught.value)


def test_backend_refused_names_backend_host_and_user() -> None:
    error = BackendRefused("kafka", "k1:9093", "tikk", "login failed")
    assert str(error) == "kafka at k1:9093 refused user 'tikk': login failed"
    assert not error.retriable


# -- the config file --------------------------------------------------------------------------


def _args(config: Path | None = None, **urls: str | None) -> argparse.Namespace:
    return argparse.Namespace(config=str(config) if config else None, **urls)


def test_the_config_file_gives_urls_and_the_command_line_wins(tmp_path: Path) -> None:
    config = tmp_path / "tikk.toml"
    config.write_text(
        f'[backends]\nstore = "cassandra://tikk:{SECRET}@db:9042/tikk"\nqueue = "kafka://k1:9093"\n'
    )
    chosen = backend_urls(_args(config, queue="kafka://k2:9093", store=None))
    assert chosen == {
        "store": f"cassandra://tikk:{SECRET}@db:9042/tikk",
        "queue": "kafka://k2:9093",
    }


def test_an_inline_password_on_the_command_line_is_refused_without_echoing_it() -> None:
    with pytest.raises(InvalidArgument) as caught:
        backend_urls(_args(store=f"cassandra://tikk:{SECRET}@db:9042/tikk"))
    assert caught.value.field == "--store"
    assert "config file" in str(caught.value) and "password_file" in str(caught.value)
    assert SECRET not in str(caught.value)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[backends]\nstore = 1\n", "must be a string"),
        ("[backends]\nstor = 'x'\n", "unknown key 'stor'"),
        ("[serve]\nlisten = 'x'\n", "unknown key 'serve'"),
        (f"[backends]\nstore = 'cassandra://tikk:{SECRET}@db", "not valid TOML"),
    ],
)
def test_a_bad_config_file_is_a_clear_error(tmp_path: Path, text: str, says: str) -> None:
    config = tmp_path / "tikk.toml"
    config.write_text(text)
    with pytest.raises(InvalidArgument) as caught:
        backend_urls(_args(config))
    assert caught.value.field == "--config"
    assert says in str(caught.value)
    assert SECRET not in str(caught.value)


def test_a_missing_config_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="cannot read"):
        backend_urls(_args(tmp_path / "absent.toml"))


def test_the_cli_refuses_a_password_on_its_command_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    store = f"cassandra://tikk:{SECRET}@h:1/ks"
    code = cli_main(
        ["server", "--data-dir", str(tmp_path), "--listen", "127.0.0.1:0", "--store", store]
    )
    err = capsys.readouterr().err
    assert code == EXIT_USAGE
    assert "--store" in err and "config file" in err
    assert SECRET not in err
