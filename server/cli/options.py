"""What the sub-commands share: exit codes, value parsers, and option groups."""

from __future__ import annotations

import argparse
import os
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from tikk.settings import Security, Settings, Tls, embedded_urls

if TYPE_CHECKING:
    from tikk.client.transport import Transport

EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_IMPORT = 0, 1, 2, 3, 4
DEFAULT_SERVER = os.environ.get("TIKK_SERVER", "127.0.0.1:7070")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(text: str) -> int:
    """``250ms``, ``30s``, ``5m``, ``1h30m``, ``2d`` → milliseconds."""
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise argparse.ArgumentTypeError(f"bad duration {text!r} (e.g. 30s, 5m, 1h30m)")
    return int(sum(float(n) * _UNIT_MS[u] for n, u in parts))


def parse_time_ms(text: str) -> int:
    """An ISO-8601 instant; without an offset it is taken as UTC."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"bad time {text!r} (ISO-8601 expected)") from exc
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return int(value.timestamp() * 1000)


def settings(args: argparse.Namespace) -> Settings:
    """The settings of a process from its backend options (``backend_options``)."""
    urls = embedded_urls(args.data_dir)
    return Settings(
        store_url=args.store or urls["store_url"],
        history_url=args.history or urls["history_url"],
        queue_url=args.queue or urls["queue_url"],
        ownership_url=getattr(args, "ownership", None) or "",
        ownership_session_timeout_ms=args.session_timeout,
        shard_count=args.shards,
        listen=getattr(args, "listen", "127.0.0.1:7070"),
        visibility_timeout_ms=getattr(args, "visibility_timeout", 60_000),
        security=security(args),
    )


def security(args: argparse.Namespace) -> Security:
    """The API's protection from ``security_options`` (absent options: none)."""
    cert, key = getattr(args, "tls_cert", None), getattr(args, "tls_key", None)
    if bool(cert) != bool(key):
        raise SystemExit("tikk: --tls-cert and --tls-key go together")
    tls = Tls(cert, key, getattr(args, "tls_client_ca", None) or "") if cert and key else None
    return Security(
        tls=tls,
        auth=getattr(args, "auth", False),
        insecure=getattr(args, "insecure", False),
        delivery_keys_file=delivery_keys_file(args),
    )


def delivery_keys_file(args: argparse.Namespace) -> str:
    """``--delivery-keys``, else the file under the data dir (created on first use), so that
    servers and dispatchers sharing a data dir agree with no configuration."""
    if given := getattr(args, "delivery_keys", None):
        return str(given)
    data_dir = getattr(args, "data_dir", None)
    return str(Path(data_dir).resolve() / "delivery-keys") if data_dir else ""


def security_options(p: argparse.ArgumentParser, *, serves: bool) -> None:
    """The delivery keys (servers and dispatchers); for a process that ``serves`` the API also
    TLS, authentication and the explicit ``--insecure``."""
    p.add_argument(
        "--delivery-keys",
        metavar="FILE",
        default=os.environ.get("TIKK_DELIVERY_KEYS"),
        help="keys signing delivery tokens, shared by servers and dispatchers "
        "(default: $TIKK_DELIVERY_KEYS, else a file under --data-dir)",
    )
    if not serves:
        return
    p.add_argument("--tls-cert", metavar="PEM", help="serve TLS with this certificate chain")
    p.add_argument("--tls-key", metavar="PEM", help="the private key of --tls-cert")
    p.add_argument(
        "--tls-client-ca",
        metavar="PEM",
        help="require client certificates signed by this CA (mTLS)",
    )
    p.add_argument(
        "--auth", action="store_true", help="callers must present a credential (tikk auth)"
    )
    p.add_argument(
        "--insecure",
        action="store_true",
        help="serve a non-loopback address without TLS or authentication anyway",
    )


def backend_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", default="data", help="where the embedded SQLite files live")
    p.add_argument("--store", help="task store URL (default: sqlite under --data-dir)")
    p.add_argument("--history", help="run history URL (default: sqlite under --data-dir)")
    p.add_argument("--queue", help="ready queue URL (default: local:// under --data-dir)")
    p.add_argument(
        "--ownership",
        help="shard ownership URL, e.g. zk://127.0.0.1:12181/tikk "
        "(default: this process owns every shard)",
    )
    p.add_argument(
        "--session-timeout",
        type=parse_duration_ms,
        default=10_000,
        help="ZooKeeper session timeout of a dispatcher (e.g. 10s)",
    )
    p.add_argument("--shards", type=int, default=256, help="shard count (fixed per store)")
    otel_option(p)


def otel_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--otel",
        default=os.environ.get("TIKK_OTEL", "off"),
        metavar="EXPORTER",
        help="OpenTelemetry export: off, console, console:PATH, otlp, otlp:URL "
        "(default: $TIKK_OTEL or off)",
    )


def client_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--server", default=DEFAULT_SERVER, help="address of a tikk server")
    p.add_argument("--namespace", default="", help="namespace (default: 'default')")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds per call")
    transport_options(p)


def transport_options(p: argparse.ArgumentParser) -> None:
    """How a client reaches the server (``transport``): TLS, a client certificate, a token.
    The token itself is never an option, so it stays out of shell history and ``ps``."""
    p.add_argument("--tls", action="store_true", help="connect over TLS (system trusted roots)")
    p.add_argument("--tls-ca", metavar="PEM", help="trust this CA for the server (implies --tls)")
    p.add_argument("--tls-cert", metavar="PEM", help="client certificate for mTLS (implies --tls)")
    p.add_argument("--tls-key", metavar="PEM", help="the private key of --tls-cert")
    p.add_argument(
        "--tls-server-name",
        metavar="NAME",
        help="check the server's certificate for this name instead of --server's host",
    )
    p.add_argument(
        "--token-file",
        metavar="FILE",
        help="a file holding the bearer token (default: $TIKK_TOKEN, else none)",
    )


def transport(args: argparse.Namespace) -> Transport:
    """The client transport of ``transport_options``; ``TransportError`` for a half-given
    certificate or an unreadable token file."""
    from tikk.client.transport import Transport, TransportError

    token = os.environ.get("TIKK_TOKEN", "")
    if args.token_file:
        try:
            with open(args.token_file, encoding="utf-8") as source:
                token = source.read().strip()
        except OSError as exc:
            why = exc.strerror
            raise TransportError(f"cannot read --token-file {args.token_file}: {why}") from None
    return Transport(
        tls=args.tls,
        ca_file=args.tls_ca or "",
        cert_file=args.tls_cert or "",
        key_file=args.tls_key or "",
        server_name=args.tls_server_name or "",
        token=token.strip(),
    )


def paging(p: argparse.ArgumentParser) -> None:
    p.add_argument("--limit", type=int, default=100)
    p.add_argument("--page-token", default="")
