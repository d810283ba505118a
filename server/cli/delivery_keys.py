"""``delivery-keys``: make and rotate the keys that sign delivery tokens.

Servers and dispatchers must read the same file (``--delivery-keys``, default
``$TIKK_DELIVERY_KEYS``, else ``<data-dir>/delivery-keys``). Rotation: ``rotate`` adds a new
current key and keeps the others for checking; restart the servers, then the dispatchers; once
nothing signed with an old key can still be waiting in a queue, ``retire`` it. No command
prints a secret: only key ids.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from server.cli.options import EXIT_OK, EXIT_REFUSED
from tikk.delivery_tokens import DeliveryKeys, load_keys, new_keys, save_keys
from tikk.errors import FailedPrecondition


def _create(args: argparse.Namespace) -> int:
    if not save_keys(args.file, new_keys(), replace=False):
        print(f"tikk: {args.file} exists; rotate it instead", file=sys.stderr)
        return EXIT_REFUSED
    _show(load_keys(args.file), "created")
    return EXIT_OK


def _rotate(args: argparse.Namespace) -> int:
    retire = getattr(args, "retire", None)
    keys = load_keys(args.file)
    keys = keys.retired(retire) if retire else keys.rotated()
    save_keys(args.file, keys, replace=True)
    _show(keys, f"retired {retire}" if retire else "rotated")
    return EXIT_OK


def _list(args: argparse.Namespace) -> int:
    _show(load_keys(args.file), "")
    return EXIT_OK


def _show(keys: DeliveryKeys, done: str) -> None:
    if done:
        print(done)
    for key_id in sorted(keys.secrets):
        print(f"{key_id} {'current' if key_id == keys.current else 'verifies'}")


def _refusing(command: Any) -> Any:
    """A missing or malformed file, or a key that cannot be retired, is a refusal (exit 1)
    with the reason, not a trace."""

    def run(args: argparse.Namespace) -> int:
        try:
            code: int = command(args)
        except FailedPrecondition as exc:
            print(f"tikk: {exc}", file=sys.stderr)
            return EXIT_REFUSED
        return code

    return run


def register(sub: Any) -> None:
    """``delivery-keys create|rotate|retire|list FILE``."""
    parent = sub.add_parser(
        "delivery-keys", help="the keys signing delivery tokens (servers and dispatchers)"
    )
    actions = parent.add_subparsers(dest="action", required=True)
    for name, func, text in (
        ("create", _create, "a new file (mode 0600) with one key"),
        ("rotate", _rotate, "add a new current key; the others still verify"),
        ("retire", _rotate, "drop an old key: what it signed is refused from then on"),
        ("list", _list, "the key ids and which one signs"),
    ):
        p = actions.add_parser(name, help=text)
        p.add_argument("file", metavar="FILE")
        if name == "retire":
            p.add_argument("retire", metavar="KEY_ID")
        elif name == "rotate":
            p.add_argument("--retire", metavar="KEY_ID", help="drop this key instead of adding")
        p.set_defaults(func=_refusing(func))
