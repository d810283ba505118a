"""The local stack's URLs (``devtools.stack``): the open variant's are bare, the authenticated
one's name the user, the password file and the CA under ``$TIKK_STACK_DIR``, never a password;
and every URL they give parses as its backend reads it."""

from __future__ import annotations

from pathlib import Path

import pytest

from devtools import stack, stack_launch
from tikk.urls import BackendUrl


@pytest.fixture
def stack_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TIKK_STACK_DIR", str(tmp_path))
    return tmp_path


def test_a_stack_never_started_is_the_open_variant(stack_dir: Path) -> None:
    assert stack.variant() == stack.PLAIN
    assert stack.urls()["queue_url"] == f"kafka://127.0.0.1:{stack.KAFKA_PORT}"


def test_authenticated_urls_name_the_files_under_the_stack_dir(stack_dir: Path) -> None:
    (stack_dir / "variant").write_text("auth\n")
    secrets = stack_dir / "secrets"
    secrets.mkdir()
    for service in ("cassandra", "kafka", "zookeeper"):
        (secrets / f"{service}.password").write_text(f"pw-of-{service}\n")
    urls = stack.urls()
    assert urls["store_url"] == (
        f"cassandra://tikk@127.0.0.1:{stack.CQL_PORT}/tikk?password_file={secrets}/"
        f"cassandra.password&tls_ca={stack_dir}/tls/ca.pem"
    )
    assert "sasl=SCRAM-SHA-256" in urls["queue_url"]
    assert "tls_ca" not in urls["ownership_url"]
    for setting, url in urls.items():
        assert "pw-of-" not in url
        parsed = BackendUrl.parse(setting, url)
        assert parsed.credentials is not None and parsed.credentials.user == stack.USER
        assert parsed.credentials.password.startswith("pw-of-")
    with_options = stack.login(f"kafka://127.0.0.1:{stack.KAFKA_PORT}?prefix=x.")
    assert with_options.startswith(f"kafka://tikk@127.0.0.1:{stack.KAFKA_PORT}?prefix=x.&sasl=")


def test_a_kafka_cluster_id_never_reads_as_an_option() -> None:
    # One plain base64 id in 64 starts with '-'; 2,000 draws would show about 31 of them.
    ids = [stack_launch.new_cluster_id() for _ in range(2000)]
    assert not [i for i in ids if i.startswith("-")]
    assert all(len(i) == 22 for i in ids)
    assert len(set(ids)) == len(ids)
