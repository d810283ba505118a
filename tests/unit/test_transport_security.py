"""The exposure rule, the server's TLS file checks and the client transport's own rules."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import grpc
import pytest

from server.auth.authenticator import certificate_subject
from server.certs import DevPki, make_dev_pki
from server.transport_security import (
    ExposureRefused,
    TlsFilesRefused,
    check_exposure,
    check_transport,
    server_credentials,
)
from tikk.client.transport import Transport, TransportError, is_loopback_address
from tikk.settings import Security, Settings, Tls
from tikk.v1 import tasks_pb2


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> DevPki:
    return make_dev_pki(tmp_path_factory.mktemp("pki"))


@pytest.mark.parametrize(
    "address",
    ["127.0.0.1:7070", "127.8.9.10:0", "localhost:7070", "[::1]:7070", "unix:/tmp/s",
     "ipv4:127.0.0.1:7070", "dns:///localhost:7070", "LOCALHOST:1"],
)  # fmt: skip
def test_loopback_addresses(address: str) -> None:
    assert is_loopback_address(address)


@pytest.mark.parametrize(
    "address",
    ["0.0.0.0:7070", "[::]:7070", ":7070", "10.0.0.5:7070", "tikk.example:7070",
     "[2001:db8::1]:7070", "localhost.example:7070", "dns:///tikk.example:443"],
)  # fmt: skip
def test_addresses_other_machines_reach(address: str) -> None:
    assert not is_loopback_address(address)


def _settings(security: Security) -> Settings:
    return Settings("sqlite:///unused", "sqlite:///unused", "local:///unused", security=security)


def _tls(pki: DevPki) -> Tls:
    return Tls(str(pki.server_cert), str(pki.server_key))


def test_loopback_serves_plaintext_without_credentials() -> None:
    check_exposure("127.0.0.1:7070", Security())


@pytest.mark.parametrize(
    ("tls", "auth", "missing"),
    [(False, False, ["TLS", "--auth"]), (True, False, ["--auth"]), (False, True, ["TLS"])],
)
def test_an_exposed_address_needs_tls_and_authentication(
    pki: DevPki, tls: bool, auth: bool, missing: list[str]
) -> None:
    security = Security(tls=_tls(pki) if tls else None, auth=auth)
    with pytest.raises(ExposureRefused) as refused:
        check_exposure("0.0.0.0:7070", security)
    message = str(refused.value)
    assert "--insecure" in message
    for needed in missing:
        assert needed in message
    if tls:
        assert "TLS (" not in message


def test_an_exposed_address_serves_with_both_or_when_insecure_is_meant(pki: DevPki) -> None:
    check_exposure("0.0.0.0:7070", Security(tls=_tls(pki), auth=True))
    check_exposure("0.0.0.0:7070", Security(insecure=True))


def test_a_key_of_another_certificate_is_refused(pki: DevPki) -> None:
    settings = _settings(security=Security(tls=Tls(str(pki.server_cert), str(pki.client_key))))
    with pytest.raises(TlsFilesRefused, match="KEY_VALUES_MISMATCH") as refused:
        check_transport(settings)
    assert "BEGIN" not in str(refused.value)


def test_missing_or_garbled_files_are_refused_naming_them(pki: DevPki, tmp_path: Path) -> None:
    missing = _settings(security=Security(tls=Tls(str(tmp_path / "no.pem"), str(pki.server_key))))
    with pytest.raises(TlsFilesRefused, match=r"no\.pem"):
        check_transport(missing)
    garbled = tmp_path / "ca.pem"
    garbled.write_text("not a certificate\n")
    tls = Tls(str(pki.server_cert), str(pki.server_key), client_ca_file=str(garbled))
    with pytest.raises(TlsFilesRefused, match="--tls-client-ca"):
        check_transport(_settings(security=Security(tls=tls)))


def test_an_encrypted_key_is_refused_rather_than_prompted_for(pki: DevPki, tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(pki.server_key.read_bytes(), password=None)
    encrypted = tmp_path / "encrypted.key"
    encrypted.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret-pass"),
        )
    )
    tls = Tls(str(pki.server_cert), str(encrypted))
    with pytest.raises(TlsFilesRefused):
        check_transport(_settings(security=Security(tls=tls)))


def test_a_client_certificate_needs_its_key() -> None:
    with pytest.raises(TransportError, match="go together"):
        Transport(cert_file="client.pem")


def test_an_unreadable_ca_file_is_named_when_a_channel_opens(tmp_path: Path) -> None:
    with pytest.raises(TransportError, match=r"missing\.pem"):
        Transport(ca_file=str(tmp_path / "missing.pem")).channel("127.0.0.1:1")


def test_the_token_never_shows_in_repr() -> None:
    transport = Transport(ca_file="ca.pem", token="tkn-secret-value")
    assert "tkn-secret-value" not in repr(transport)
    assert "ca.pem" in repr(transport)


async def _subject_seen(tls: Tls, transport: Transport) -> str | None:
    """The subject a real mTLS port (``server_credentials``) sees for one call."""
    seen: list[str | None] = []

    async def get_task(request: tasks_pb2.GetTaskRequest, context: object) -> tasks_pb2.Task:
        auth: Mapping[str, Iterable[bytes]] = context.auth_context()  # type: ignore[attr-defined]
        seen.append(certificate_subject(auth))
        return tasks_pb2.Task(id=request.task_id)

    method = grpc.unary_unary_rpc_method_handler(
        get_task, tasks_pb2.GetTaskRequest.FromString, tasks_pb2.Task.SerializeToString
    )
    server = grpc.aio.server(
        handlers=[grpc.method_handlers_generic_handler("tikk.v1.TaskService", {"GetTask": method})]
    )
    port = server.add_secure_port("127.0.0.1:0", server_credentials(tls))
    await server.start()
    try:
        async with transport.aio_channel(f"127.0.0.1:{port}") as channel:
            call = channel.unary_unary(
                "/tikk.v1.TaskService/GetTask",
                request_serializer=tasks_pb2.GetTaskRequest.SerializeToString,
                response_deserializer=tasks_pb2.Task.FromString,
            )
            await call(tasks_pb2.GetTaskRequest(task_id="t"), timeout=10)
    finally:
        await server.stop(None)
    return seen[0]


async def test_an_mtls_port_sees_the_verified_subject_of_the_client(pki: DevPki) -> None:
    mtls = Tls(str(pki.server_cert), str(pki.server_key), client_ca_file=str(pki.ca_cert))
    client = Transport(
        ca_file=str(pki.ca_cert), cert_file=str(pki.client_cert), key_file=str(pki.client_key)
    )
    assert await _subject_seen(mtls, client) == "tikk-dev-client"
    plain_tls = Tls(str(pki.server_cert), str(pki.server_key))
    assert await _subject_seen(plain_tls, Transport(ca_file=str(pki.ca_cert))) is None


async def test_server_name_checks_the_certificate_for_another_name(tmp_path: Path) -> None:
    named = make_dev_pki(tmp_path, hosts=("tikk.test",))
    tls = Tls(str(named.server_cert), str(named.server_key))
    by_address = Transport(ca_file=str(named.ca_cert))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await _subject_seen(tls, by_address)
    assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
    by_name = Transport(ca_file=str(named.ca_cert), server_name="tikk.test")
    assert await _subject_seen(tls, by_name) is None
