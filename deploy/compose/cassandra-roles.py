"""The logins of the compose stack's Cassandra: the ``tikk`` role with the password of the
``cassandra-password`` secret, and the built-in superuser's documented default password
(``cassandra``) replaced by the ``cassandra-admin-password`` secret. Idempotent, so compose
runs it at every ``up``; a changed secret takes effect at the next one."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import Cluster, NoHostAvailable

HOST = "cassandra"
SECRETS = Path("/run/secrets")
DEFAULT_SUPERUSER = ("cassandra", "cassandra")
# A fresh node makes its superuser a few seconds after it starts serving.
WAIT_S = 120


def secret(name: str) -> str:
    return (SECRETS / name).read_text().splitlines()[0].strip()


def connect(user: str, password: str) -> Any:
    cluster = Cluster([HOST], protocol_version=5,
                      auth_provider=PlainTextAuthProvider(user, password))  # fmt: skip
    return cluster.connect()


def admin_session(admin_password: str) -> Any:
    """A superuser session; on a fresh node, logs in with the default password and replaces
    it first."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            return connect("cassandra", admin_password)
        except NoHostAvailable:
            pass
        try:
            session = connect(*DEFAULT_SUPERUSER)
        except NoHostAvailable as exc:
            if time.monotonic() > deadline:
                sys.exit(f"cassandra: no superuser login works: {exc}")
            time.sleep(2)
            continue
        session.execute("ALTER ROLE cassandra WITH PASSWORD = %s", (admin_password,))
        return session


def logs_in(user: str, password: str) -> bool:
    try:
        connect(user, password).cluster.shutdown()
    except NoHostAvailable:
        return False
    return True


def main() -> None:
    session = admin_session(secret("cassandra-admin-password"))
    try:
        password = secret("cassandra-password")
        # A password is set only when it changed: Cassandra refuses to change one twice within
        # a few seconds.
        if not logs_in("tikk", password):
            exists = session.execute("SELECT role FROM system_auth.roles WHERE role = 'tikk'")
            verb = "ALTER" if exists.one() else "CREATE"
            session.execute(f"{verb} ROLE tikk WITH LOGIN = true AND PASSWORD = %s", (password,))
        # `tikk migrate` creates the keyspace, so the role needs CREATE beyond its own.
        session.execute("GRANT ALL PERMISSIONS ON ALL KEYSPACES TO tikk")
    finally:
        session.cluster.shutdown()
    print("cassandra: role tikk ready")


if __name__ == "__main__":
    main()
