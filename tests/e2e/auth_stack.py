"""Real ``tikk server --auth`` processes and credentials made with the real ``tikk auth``.

Tokens travel through files (``--token-file``), never on a command line or in test output.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import grpc

from server.certs import DevPki, make_dev_pki
from tests.e2e.conftest import ROOT, Process

LISTENING = re.compile(r"listening on [\d.]+:(\d+)")
_CREATED = re.compile(r"^([0-9a-f]{32})  ")


class Token(str):
    """A token whose repr hides it, so a failing test's report does not print it."""

    def __repr__(self) -> str:
        return "Token(<hidden>)"


def tampered(token: str) -> Token:
    """``token`` with its last character changed: well-formed, but the wrong secret."""
    return Token(token[:-1] + ("A" if token[-1] != "A" else "B"))


def tikk(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """One ``tikk`` command to its end (a CLI call, not a server)."""
    return subprocess.run(
        [sys.executable, "-m", "server.cli", *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


class AuthStack:
    """A data directory whose callers are made with ``tikk auth``, and servers on it."""

    def __init__(self, data_dir: Path, store: str = "") -> None:
        self.data_dir = data_dir
        self._store = ["--store", store] if store else []
        self.servers: list[Process] = []

    def backend_args(self) -> list[str]:
        return ["--data-dir", str(self.data_dir), *self._store]

    def create(self, name: str, *roles: str, subject: str = "") -> tuple[str, Token]:
        """A new credential: (id, token)."""
        token_file = self.data_dir / f"{name}.token"
        role_args = [a for role in roles for a in ("--role", role)]
        subject_args = ["--subject", subject] if subject else []
        done = tikk("auth", "create", "--name", name, *role_args, *subject_args,
                    "--token-file", str(token_file), *self.backend_args())  # fmt: skip
        assert done.returncode == 0, done.stderr
        match = _CREATED.match(done.stdout)
        assert match, done.stdout
        return match.group(1), Token(token_file.read_text().strip())

    def revoke(self, credential_id: str) -> None:
        done = tikk("auth", "revoke", credential_id, *self.backend_args())
        assert done.returncode == 0, done.stderr

    def tls_args(self, *, mtls: bool = False) -> list[str]:
        """Server options for TLS with the development PKI (mTLS: its CA signs clients)."""
        pki = self.pki()
        args = ["--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key)]
        return args + (["--tls-client-ca", str(pki.ca_cert)] if mtls else [])

    def pki(self) -> DevPki:
        return make_dev_pki(self.data_dir / "pki")

    def channel(self, address: str, *, client_cert: bool = False) -> grpc.Channel:
        """A TLS channel trusting the development CA, presenting its client certificate if
        asked."""
        pki = self.pki()
        key, chain = (
            (pki.client_key.read_bytes(), pki.client_cert.read_bytes()) if client_cert
            else (None, None)
        )  # fmt: skip
        credentials = grpc.ssl_channel_credentials(pki.ca_cert.read_bytes(), key, chain)
        return grpc.secure_channel(address, credentials)

    def start_server(self, *extra: str, env: dict[str, str] | None = None) -> str:
        """A ``tikk server --auth`` on a free port; its address."""
        server = Process(
            ["server", *self.backend_args(), "--listen", "127.0.0.1:0", "--shards", "16",
             "--auth", *extra],
            {"PYTHONUNBUFFERED": "1", **(env or {})},
        )  # fmt: skip
        self.servers.append(server)
        return f"127.0.0.1:{server.wait_for(LISTENING, timeout=60).group(1)}"

    def close(self) -> None:
        for server in self.servers:
            server.stop()


def bearer(token: str | None) -> Sequence[tuple[str, str]]:
    """The call metadata that presents ``token`` (none for None)."""
    return () if token is None else (("authorization", f"Bearer {token}"),)


def code_of(call: grpc.RpcError) -> grpc.StatusCode:
    code: grpc.StatusCode = call.code()
    return code
