"""A development PKI: one CA, a server certificate and a client certificate, as PEM files.

``tikk dev --tls`` and ``tikk certs dev`` use it so that the secure path is one command away.
It is for development and tests only: the CA key sits next to the certificates it signed.

Files in the directory (keys PKCS #8, unencrypted, mode 0600)::

    ca.pem ca.key            the CA that signs both certificates (clients trust ca.pem)
    server.pem server.key    the server's certificate, the hosts as subject alternative names
    client.pem client.key    a client certificate for mTLS, ``client_name`` as common name

Files already there are reused while they are valid (readable, not expiring within a day, the
server's names cover the hosts asked for, and chained to that CA); otherwise all six are made
again, since a new CA invalidates the certificates of the old one.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePrivateKey
    from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

DEV_HOSTS = ("127.0.0.1", "localhost", "::1")
# Files younger than this margin before expiry are made again rather than reused.
_RENEW_MARGIN = datetime.timedelta(days=1)
# Clock skew between the machine that makes the files and the one that checks them.
_BACKDATE = datetime.timedelta(minutes=5)


class TlsExtraMissing(RuntimeError):
    """The ``cryptography`` package (the ``tls`` extra) is not installed."""


@dataclass(frozen=True)
class DevPki:
    """Where the files of a development PKI are."""

    ca_cert: Path
    ca_key: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path

    @classmethod
    def in_directory(cls, directory: Path) -> DevPki:
        return cls(
            ca_cert=directory / "ca.pem",
            ca_key=directory / "ca.key",
            server_cert=directory / "server.pem",
            server_key=directory / "server.key",
            client_cert=directory / "client.pem",
            client_key=directory / "client.key",
        )


def _require_cryptography() -> Any:
    try:
        import cryptography
    except ImportError as exc:
        raise TlsExtraMissing(
            "making TLS certificates needs the cryptography package: pip install 'tikk[tls]'"
        ) from exc
    return cryptography


def make_dev_pki(
    directory: Path,
    *,
    hosts: Sequence[str] = DEV_HOSTS,
    client_name: str = "tikk-dev-client",
    days: int = 365,
) -> DevPki:
    """Make (or reuse) a CA, a server certificate for ``hosts`` and a client certificate.

    Idempotent: valid files already in ``directory`` are kept. Raises ``TlsExtraMissing`` when
    the ``tls`` extra is not installed, ``OSError`` when the directory cannot be written.
    """
    _require_cryptography()
    pki = DevPki.in_directory(directory)
    now = datetime.datetime.now(datetime.UTC)
    if _reusable(pki, hosts, client_name, now):
        return pki
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)  # it holds the CA's key
    _write_pki(pki, hosts, client_name, now, datetime.timedelta(days=days))
    return pki


def _write_pki(
    pki: DevPki,
    hosts: Sequence[str],
    client_name: str,
    now: datetime.datetime,
    lifetime: datetime.timedelta,
) -> None:
    from cryptography import x509

    ca_key = _new_key()
    ca_cert = _sign(_ca_builder(ca_key, now, lifetime), ca_key)
    server_key = _new_key()
    server_builder = _leaf_builder(ca_cert, server_key, "tikk-dev-server", now, lifetime)
    server_builder = server_builder.add_extension(
        x509.SubjectAlternativeName([_general_name(host) for host in hosts]), critical=False
    )
    client_key = _new_key()
    client_builder = _leaf_builder(ca_cert, client_key, client_name, now, lifetime)
    _write_key(pki.ca_key, ca_key)
    _write_cert(pki.ca_cert, ca_cert)
    _write_key(pki.server_key, server_key)
    _write_cert(pki.server_cert, _sign(server_builder, ca_key, server=True))
    _write_key(pki.client_key, client_key)
    _write_cert(pki.client_cert, _sign(client_builder, ca_key, server=False))


def _new_key() -> EllipticCurvePrivateKey:
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name: str) -> x509.Name:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _ca_builder(
    key: EllipticCurvePrivateKey, now: datetime.datetime, lifetime: datetime.timedelta
) -> x509.CertificateBuilder:
    from cryptography import x509

    name = _name("tikk development CA")
    return (
        _base_builder(name, name, key, now, lifetime)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )


def _leaf_builder(
    ca_cert: x509.Certificate,
    key: EllipticCurvePrivateKey,
    common_name: str,
    now: datetime.datetime,
    lifetime: datetime.timedelta,
) -> x509.CertificateBuilder:
    from cryptography import x509

    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    return (
        _base_builder(_name(common_name), ca_cert.subject, key, now, lifetime)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False
        )
    )


def _base_builder(
    subject: x509.Name,
    issuer: x509.Name,
    key: EllipticCurvePrivateKey,
    now: datetime.datetime,
    lifetime: datetime.timedelta,
) -> x509.CertificateBuilder:
    from cryptography import x509

    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + lifetime)
    )


def _sign(
    builder: x509.CertificateBuilder, ca_key: EllipticCurvePrivateKey, server: bool | None = None
) -> x509.Certificate:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID

    if server is not None:
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def _general_name(host: str) -> x509.GeneralName:
    from cryptography import x509

    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _write_key(path: Path, key: EllipticCurvePrivateKey) -> None:
    from cryptography.hazmat.primitives import serialization

    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    # Created 0600 from the start, so the key is never readable by others, even briefly.
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(pem)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    from cryptography.hazmat.primitives import serialization

    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _reusable(pki: DevPki, hosts: Sequence[str], client_name: str, now: datetime.datetime) -> bool:
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature

    try:
        ca = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
        server = x509.load_pem_x509_certificate(pki.server_cert.read_bytes())
        client = x509.load_pem_x509_certificate(pki.client_cert.read_bytes())
        pairs = ((pki.ca_key, ca), (pki.server_key, server), (pki.client_key, client))
        if any(_public_pem(_load_key(path)) != _public_pem(cert) for path, cert in pairs):
            return False
        for cert in (server, client):
            cert.verify_directly_issued_by(ca)
        names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (OSError, ValueError, TypeError, InvalidSignature, x509.ExtensionNotFound):
        # Any unreadable or unrelated file means: make them all again.
        return False
    wanted = {_general_name(host) for host in hosts}
    fresh = all(cert.not_valid_after_utc - _RENEW_MARGIN > now for cert in (ca, server, client))
    return fresh and wanted <= set(names) and _common_name(client) == client_name


def _load_key(path: Path) -> PrivateKeyTypes:
    from cryptography.hazmat.primitives import serialization

    return serialization.load_pem_private_key(path.read_bytes(), password=None)


def _public_pem(owner: PrivateKeyTypes | x509.Certificate) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return owner.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _common_name(cert: x509.Certificate) -> str:
    from cryptography.x509.oid import NameOID

    values = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(values[0].value) if values else ""
