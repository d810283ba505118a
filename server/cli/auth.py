"""``auth``: the credentials of the API's callers (create, list, revoke, rotate).

These commands open the credential store directly, from the same backend options as the
servers (``--data-dir``, ``--store``), so they work while no server runs; servers pick up a
change within seconds. A token is shown once, when it is made (printed, or written to a file
only its owner can read); the store keeps a salted hash, and nothing prints it back.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from server.cli.options import EXIT_OK, EXIT_REFUSED, EXIT_UNREACHABLE, backend_options, settings
from tikk.clock import SystemClock
from tikk.credentials import Credential, Grant, issue_secret, new_credential_id
from tikk.errors import BackendUnavailable, FailedPrecondition, NotFound, TikkError
from tikk.store.credentials import CredentialStore
from tikk.text_rules import shown

StoreAction = Callable[[argparse.Namespace, CredentialStore], Awaitable[None]]


def _with_store(action: StoreAction) -> Callable[[argparse.Namespace], int]:
    """A command that runs ``action`` on the opened store: a refusal (unknown id, revoked)
    is exit code 1, a store that does not answer 3."""

    def run(args: argparse.Namespace) -> int:
        async def main() -> None:
            from server.wiring import Drivers, open_credentials

            store = await open_credentials(settings(args), Drivers())
            try:
                await action(args, store)
            finally:
                await store.close()

        try:
            asyncio.run(main())
        except (NotFound, FailedPrecondition, _Refused) as exc:
            print(f"tikk auth: {exc}", file=sys.stderr)
            return EXIT_REFUSED
        except BackendUnavailable as exc:
            print(f"tikk auth: {exc}", file=sys.stderr)
            return EXIT_UNREACHABLE
        return EXIT_OK

    return run


class _Refused(TikkError):
    """The command is refused as asked (e.g. a subject another credential already has)."""


def _hand_out(args: argparse.Namespace, token: str) -> None:
    """Show ``token`` once: on stdout, or in ``--token-file`` created with mode 0600."""
    if not args.token_file:
        print(f"token {token}")
        print("  (shown once: the server keeps only a hash of it)")
        return
    fd = os.open(args.token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an existing file keeps its mode through O_CREAT
    with os.fdopen(fd, "w") as out:
        out.write(token + "\n")
    print(f"token written to {args.token_file}")


async def _create(args: argparse.Namespace, store: CredentialStore) -> None:
    grants = tuple(dict.fromkeys(Grant.parse(text) for text in args.role))
    if args.subject:
        taken = [c for c in await store.list_all() if c.subject == args.subject and not c.revoked]
        if taken:
            raise _Refused(f"subject {args.subject!r} is already mapped to credential "
                           f"{taken[0].credential_id}")  # fmt: skip
    credential_id = new_credential_id()
    issued = issue_secret(credential_id)
    credential = Credential(
        credential_id=credential_id, name=args.name, salt=issued.salt,
        secret_hash=issued.secret_hash, grants=grants, created_ms=SystemClock().now_ms(),
        subject=args.subject or "",
    )  # fmt: skip
    await store.create(credential)
    print(_line(credential))
    _hand_out(args, issued.token)


async def _list(args: argparse.Namespace, store: CredentialStore) -> None:
    credentials = [c for c in await store.list_all() if args.all or not c.revoked]
    if args.json:
        print(json.dumps([_document(c) for c in credentials], indent=2))
        return
    print("\n".join(_line(c) for c in credentials) or "(none)")


async def _revoke(args: argparse.Namespace, store: CredentialStore) -> None:
    credential = await store.revoke(args.id, SystemClock().now_ms())
    print(_line(credential))


async def _rotate(args: argparse.Namespace, store: CredentialStore) -> None:
    issued = issue_secret(args.id)
    now = SystemClock().now_ms()
    credential = await store.rotate(args.id, issued.salt, issued.secret_hash, now)
    print(_line(credential))
    _hand_out(args, issued.token)


def _when(ms: int | None) -> str:
    return "" if ms is None else datetime.fromtimestamp(ms / 1000, UTC).isoformat("T", "seconds")


def _document(c: Credential) -> dict[str, Any]:
    """What may be shown of a credential: never its salt or hash."""
    return {
        "id": c.credential_id, "name": c.name, "grants": [str(g) for g in c.grants],
        "subject": c.subject, "created": _when(c.created_ms), "rotated": _when(c.rotated_ms),
        "revoked": _when(c.revoked_ms),
    }  # fmt: skip


def _line(c: Credential) -> str:
    """One credential as a line of text (escaped: ``shown``): never its salt or hash."""
    state = f"revoked {_when(c.revoked_ms)}" if c.revoked else "active"
    subject = f"  subject {c.subject}" if c.subject else ""
    grants = " ".join(str(g) for g in c.grants)
    return shown(f"{c.credential_id}  {c.name}  {state}  {grants}{subject}")


def register(sub: Any) -> None:
    """``auth create|list|revoke|rotate``."""
    parent = sub.add_parser("auth", help="credentials of the API's callers (with --auth)")
    commands = parent.add_subparsers(dest="action", required=True)
    p = commands.add_parser("create", help="a new credential; prints its token once")
    p.add_argument("--name", required=True, help="who it is for (shown in listings)")
    roles = "read|write|admin:NAMESPACE or worker:QUEUE, '*' for all; repeat"
    p.add_argument("--role", action="append", required=True, metavar="ROLE:SCOPE", help=roles)
    p.add_argument("--subject", help="client certificate common name that stands for it (mTLS)")
    _token_file(p)
    p.set_defaults(func=_with_store(_create))
    p = commands.add_parser("list", help="credentials (never their tokens or hashes)")
    p.add_argument("--all", action="store_true", help="revoked ones too")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(func=_with_store(_list))
    p = commands.add_parser("revoke", help="refuse a credential from now on (within seconds)")
    p.add_argument("id")
    p.set_defaults(func=_with_store(_revoke))
    p = commands.add_parser("rotate", help="a new token for a credential; the old one stops")
    p.add_argument("id")
    _token_file(p)
    p.set_defaults(func=_with_store(_rotate))
    for p in commands.choices.values():
        backend_options(p)


def _token_file(p: argparse.ArgumentParser) -> None:
    p.add_argument("--token-file", metavar="FILE", help="write the token here (mode 0600)")
