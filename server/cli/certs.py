"""``tikk certs dev``: a development CA with server and client certificates (``server.certs``),
so a TLS or mTLS server and its clients are one command away."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from server.cli.options import EXIT_OK, EXIT_USAGE


def _run_dev_certs(args: argparse.Namespace) -> int:
    from server.certs import DEV_HOSTS, TlsExtraMissing, make_dev_pki

    hosts = tuple(dict.fromkeys([*DEV_HOSTS, *args.host]))
    try:
        pki = make_dev_pki(Path(args.out).resolve(), hosts=hosts, client_name=args.client_name)
    except (TlsExtraMissing, OSError) as exc:
        print(f"tikk certs dev: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"CA             {pki.ca_cert}")
    print(f"server         {pki.server_cert} {pki.server_key}  ({', '.join(hosts)})")
    print(f"client (mTLS)  {pki.client_cert} {pki.client_key}  (CN {args.client_name})")
    print("serve:   tikk server --tls-cert SERVER.pem --tls-key SERVER.key [--tls-client-ca CA]")
    print("connect: tikk task list --tls-ca CA [--tls-cert CLIENT.pem --tls-key CLIENT.key]")
    return EXIT_OK


def register(sub: Any) -> None:
    """``certs dev``."""
    certs = sub.add_parser("certs", help="TLS certificates for development")
    group = certs.add_subparsers(dest="certs_command", required=True)
    p = group.add_parser(
        "dev",
        help="make (or reuse) a development CA, server and client certificate; "
        "not for production: the CA key sits next to them",
    )
    p.add_argument("--out", default="data/tls", help="directory of the PEM files")
    p.add_argument(
        "--host",
        action="append",
        default=[],
        help="another name or address of the server certificate (repeatable)",
    )
    p.add_argument("--client-name", default="tikk-dev-client", help="client certificate CN")
    p.set_defaults(func=_run_dev_certs)
