"""The development PKI: certificates chain to its CA, names and modes hold, files are reused."""

from __future__ import annotations

import ipaddress
import stat
import sys
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from server.certs import DevPki, TlsExtraMissing, make_dev_pki


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_both_certificates_chain_to_the_ca(tmp_path: Path) -> None:
    pki = make_dev_pki(tmp_path)
    ca = _cert(pki.ca_cert)
    for leaf in (pki.server_cert, pki.client_cert):
        _cert(leaf).verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_the_server_certificate_names_the_hosts_and_the_client_its_name(tmp_path: Path) -> None:
    pki = make_dev_pki(tmp_path, hosts=("127.0.0.1", "localhost", "::1", "tikk.test"))
    server = _cert(pki.server_cert)
    names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(names.get_values_for_type(x509.DNSName)) == {"localhost", "tikk.test"}
    assert set(names.get_values_for_type(x509.IPAddress)) == {
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    }
    client = _cert(pki.client_cert)
    common = client.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    assert [attribute.value for attribute in common] == ["tikk-dev-client"]
    usage = client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]


def test_keys_are_private_unencrypted_pkcs8(tmp_path: Path) -> None:
    pki = make_dev_pki(tmp_path)
    for key in (pki.ca_key, pki.server_key, pki.client_key):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
        pem = key.read_bytes()
        assert pem.startswith(b"-----BEGIN PRIVATE KEY-----")
        serialization.load_pem_private_key(pem, password=None)


def test_valid_files_are_reused(tmp_path: Path) -> None:
    first = make_dev_pki(tmp_path)
    before = {path: path.read_bytes() for path in _files(first)}
    second = make_dev_pki(tmp_path)
    assert second == first
    assert {path: path.read_bytes() for path in _files(second)} == before


def test_files_of_another_ca_or_other_hosts_are_made_again(tmp_path: Path) -> None:
    pki = make_dev_pki(tmp_path)
    old_ca = pki.ca_cert.read_bytes()
    make_dev_pki(tmp_path / "other")
    (tmp_path / "other" / "ca.pem").replace(pki.ca_cert)
    make_dev_pki(tmp_path)
    _cert(pki.server_cert).verify_directly_issued_by(_cert(pki.ca_cert))
    assert pki.ca_cert.read_bytes() != old_ca

    current = pki.ca_cert.read_bytes()
    make_dev_pki(tmp_path, hosts=("tikk.test",))
    assert pki.ca_cert.read_bytes() != current


def test_without_the_tls_extra_the_message_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "cryptography", None)
    with pytest.raises(TlsExtraMissing, match=r"pip install 'tikk\[tls\]'"):
        make_dev_pki(tmp_path)
    assert not (tmp_path / "ca.pem").exists()


def _files(pki: DevPki) -> list[Path]:
    return [
        pki.ca_cert,
        pki.ca_key,
        pki.server_cert,
        pki.server_key,
        pki.client_cert,
        pki.client_key,
    ]
