"""What the API's port offers the network: TLS credentials from the settings, and the exposure
rule checked before anything is served.

The exposure rule: the embedded default serves plaintext without credentials, which is fine
on loopback only. A server reachable from other machines (any ``listen`` host but
127.0.0.0/8, ::1 or localhost, including all interfaces) must serve TLS *and* require
authentication, unless ``insecure`` says that exposure is meant (a trusted network, a proxy
terminating TLS). Both refusals happen at start-up, before a port is bound.

With a client CA (mTLS) the caller's certificate identifies it: the port admits only
certificates that chain to that CA, and the authentication interceptor maps the verified
common name to a credential (``server.auth.authenticator.certificate_subject``).
"""

from __future__ import annotations

import ssl
from pathlib import Path

import grpc

from tikk.client.transport import is_loopback_address
from tikk.errors import InvalidArgument
from tikk.settings import Security, Settings, Tls


class ExposureRefused(InvalidArgument):
    """A non-loopback address would be served without TLS and authentication."""


class TlsFilesRefused(InvalidArgument):
    """A certificate, key or CA file of the server cannot be read or does not fit."""


def check_transport(settings: Settings) -> None:
    """Refuse what must not be served: raises ``ExposureRefused`` or ``TlsFilesRefused``
    naming the problem and what to add. Reads the TLS files; changes nothing."""
    check_exposure(settings.listen, settings.security)
    if settings.http:
        check_exposure(settings.http, settings.security, "--http")
    if settings.security.tls is not None:
        check_tls_files(settings.security.tls)


def check_exposure(listen: str, security: Security, option: str = "--listen") -> None:
    if security.insecure or is_loopback_address(listen):
        return
    missing = [
        name
        for name, present in (
            ("TLS (--tls-cert and --tls-key)", security.tls is not None),
            ("authentication (--auth)", security.auth),
        )
        if not present
    ]
    if not missing:
        return
    raise ExposureRefused(
        option,
        f"refusing to serve {listen} without {' and '.join(missing)}: other machines could "
        "reach it, and anyone reaching it could read, create and cancel tasks of every "
        "namespace and report results. Add the missing options, listen on 127.0.0.1, or "
        "pass --insecure if this network is trusted",
    )


def check_tls_files(tls: Tls) -> None:
    """The certificate chain and key load and belong together; the client CA loads."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        # An encrypted key is refused (gRPC cannot use one) rather than prompting.
        context.load_cert_chain(tls.cert_file, tls.key_file, password=lambda: b"")
    except OSError as exc:
        raise _refused("--tls-cert/--tls-key", tls.cert_file, tls.key_file, exc) from None
    if tls.client_ca_file:
        try:
            context.load_verify_locations(cafile=tls.client_ca_file)
        except OSError as exc:
            raise _refused("--tls-client-ca", tls.client_ca_file, "", exc) from None


def _refused(option: str, first: str, second: str, exc: OSError) -> TlsFilesRefused:
    files = f"{first} and {second}" if second else first
    if isinstance(exc, ssl.SSLError):
        # The library's reason (e.g. KEY_VALUES_MISMATCH, NO_START_LINE), never file content.
        why = (
            f"not a usable PEM certificate and unencrypted key that belong together ({exc.reason})"
        )
    else:
        why = exc.strerror or type(exc).__name__
    return TlsFilesRefused(option, f"cannot use {files}: {why}")


def server_credentials(tls: Tls) -> grpc.ServerCredentials:
    """TLS credentials of the server's port; with a client CA, a client certificate chaining
    to it is required (mTLS)."""
    ca = Path(tls.client_ca_file).read_bytes() if tls.client_ca_file else None
    return grpc.ssl_server_credentials(
        [(Path(tls.key_file).read_bytes(), Path(tls.cert_file).read_bytes())],
        root_certificates=ca,
        require_client_auth=ca is not None,
    )
