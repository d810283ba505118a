"""What the sub-commands share: exit codes, value parsers, and option groups."""

from __future__ import annotations

import argparse
import os
import re
import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from server.cli.tunables import SECTIONS, apply
from server.listen_address import address_in_use
from tikk.errors import InvalidArgument
from tikk.settings import MAX_DURATION_MS, Security, Settings, Tls, embedded_urls
from tikk.urls import has_inline_password

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
    ms = sum(float(n) * _UNIT_MS[u] for n, u in parts)
    if not ms <= MAX_DURATION_MS:  # inf too: a number too long for a float
        raise argparse.ArgumentTypeError(f"duration {text[:40]!r} is longer than ten years")
    return int(ms)


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
    """The settings of a process from its backend options (``backend_options``) and its
    config file (``config_option``)."""
    urls = embedded_urls(args.data_dir)
    chosen = backend_urls(args)
    path = getattr(args, "config", None) or ""
    chosen_settings = Settings(
        store_url=chosen.get("store") or urls["store_url"],
        history_url=chosen.get("history") or urls["history_url"],
        queue_url=chosen.get("queue") or urls["queue_url"],
        ownership_url=chosen.get("ownership", ""),
        ownership_session_timeout_ms=args.session_timeout,
        shard_count=args.shards,
        listen=getattr(args, "listen", "127.0.0.1:7070"),
        http=http_address(args),
        visibility_timeout_ms=getattr(args, "visibility_timeout", 60_000),
        security=security(args),
    )
    return apply(chosen_settings, config_document(path), repr(path))


def http_address(args: argparse.Namespace) -> str:
    """``--http``: HOST:PORT, or "" for ``off``. ``auto`` (``tikk dev``'s default) is the
    port after ``--listen``'s on the same host if it is free now, else (or when ``--listen``
    asks for any port) any free port: a default never stops ``tikk dev`` from starting."""
    given = getattr(args, "http", "") or ""
    if given == "off":
        return ""
    if given != "auto":
        return str(given)
    host, _, port = getattr(args, "listen", "127.0.0.1:7070").rpartition(":")
    after = int(port) + 1 if port.isdigit() and int(port) else 0
    return f"{host}:{after if after and not address_in_use(f'{host}:{after}') else 0}"


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
        http_allowed_hosts=tuple(getattr(args, "http_allowed_hosts", None) or ()),
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
    p.add_argument(
        "--http-allowed-hosts",
        type=_host_list,
        metavar="HOST[:PORT],...",
        default=_host_list(os.environ.get("TIKK_HTTP_ALLOWED_HOSTS", "")),
        help="host names the --http listener answers besides its own address and localhost, "
        "e.g. a proxy's (default: $TIKK_HTTP_ALLOWED_HOSTS, else none)",
    )


def _host_list(text: str) -> tuple[str, ...]:
    """``--http-allowed-hosts``: comma-separated ``name`` or ``name:port``."""
    hosts = tuple(h.strip() for h in text.split(",") if h.strip())
    for host in hosts:
        if not _ALLOWED_HOST.fullmatch(host):
            raise argparse.ArgumentTypeError(f"{host[:100]!r} is not HOST or HOST:PORT")
    return hosts


_ALLOWED_HOST = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]{0,252})(:[0-9]{1,5})?")


# The backend URLs a config file may hold (``[backends]``), by their option names.
BACKEND_KEYS = ("store", "history", "queue", "ownership")


def config_option(p: argparse.ArgumentParser) -> None:
    """``--config FILE``: the backend URLs (with their passwords, if inline) in a TOML file."""
    p.add_argument(
        "--config",
        metavar="FILE",
        default=os.environ.get("TIKK_CONFIG"),
        help="TOML file whose [backends] table holds the store, history, queue and ownership "
        "URLs, the only place a URL may carry user:password@ (default: $TIKK_CONFIG)",
    )


def backend_urls(args: argparse.Namespace) -> dict[str, str]:
    """The backend URLs given (by ``BACKEND_KEYS``): each option on the command line, else the
    config file's. A command-line URL with an inline password is refused (every process
    listing would show it); raises ``InvalidArgument`` naming the option or the file."""
    chosen = read_config(getattr(args, "config", None) or "")
    for key in BACKEND_KEYS:
        url = getattr(args, key, None)
        if not url:
            continue
        if has_inline_password(url):
            raise InvalidArgument(
                f"--{key}",
                "a password on the command line is visible to every user of the host: put "
                "the URL in a config file (--config) or use password_file= / password_env=",
            )
        chosen[key] = url
    return chosen


def config_document(path: str) -> dict[str, Any]:
    """The TOML file at ``path`` ({} for no file): ``[backends]`` and the settings' tables
    (``server.cli.tunables``)."""
    if not path:
        return {}
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as exc:
        raise InvalidArgument("--config", f"cannot read {path!r}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        # The parser's message quotes no value, only where the syntax broke.
        raise InvalidArgument("--config", f"{path!r} is not valid TOML: {exc}") from None


def read_config(path: str) -> dict[str, str]:
    """The ``[backends]`` table of the TOML file at ``path`` ({} for no file)."""
    document = config_document(path)
    table = document.get("backends", {})
    known_tables = {"backends", *(section.name for section in SECTIONS)}
    unknown = sorted(set(document) - known_tables) + sorted(set(table) - set(BACKEND_KEYS))
    if unknown:
        known = ", ".join(BACKEND_KEYS)
        raise InvalidArgument(
            "--config", f"{path!r}: unknown key {unknown[0]!r} ([backends]: {known})"
        )
    if not all(isinstance(v, str) for v in table.values()):
        raise InvalidArgument("--config", f"{path!r}: every [backends] value must be a string")
    return dict(table)


def backend_options(p: argparse.ArgumentParser) -> None:
    config_option(p)
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
    log_format_option(p)


def log_format_option(p: argparse.ArgumentParser) -> None:
    """``--log-format`` of a long-lived process (``server.log_format``)."""
    p.add_argument(
        "--log-format",
        choices=["text", "json"],
        default=None,
        help="log lines as text, or one JSON object per line with the task, queue and trace "
        "ids where known (default: $TIKK_LOG_FORMAT, else text)",
    )


def otel_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--otel",
        default=os.environ.get("TIKK_OTEL", "off"),
        metavar="EXPORTER",
        help="OpenTelemetry export: off, console, console:PATH, otlp, otlp:URL "
        "(default: $TIKK_OTEL or off)",
    )


def client_options(p: argparse.ArgumentParser) -> None:
    server_option(p)
    p.add_argument("--namespace", default="", help="namespace (default: 'default')")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds per call")
    transport_options(p)


def server_option(p: argparse.ArgumentParser) -> None:
    """``--server``: one server, or several to balance calls over (``tikk.client.server_list``)."""
    p.add_argument(
        "--server",
        default=DEFAULT_SERVER,
        metavar="ADDRESS",
        help="HOST:PORT of a tikk server; or several, calls spread over them and a server "
        "that is down skipped: a comma-separated list of IP:PORT, or dns:///NAME:PORT "
        "(every address of the name) (default: $TIKK_SERVER, else 127.0.0.1:7070)",
    )


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
    certificate, or a token file (or ``$TIKK_TOKEN``) that cannot be read or sent."""
    from tikk.client.transport import Transport, sendable_token

    if args.token_file:
        token = read_token_file(args.token_file)
    else:
        token = sendable_token(os.environ.get("TIKK_TOKEN", "").strip(), "$TIKK_TOKEN")
    return Transport(
        tls=args.tls,
        ca_file=args.tls_ca or "",
        cert_file=args.tls_cert or "",
        key_file=args.tls_key or "",
        server_name=args.tls_server_name or "",
        token=token,
    )


def read_token_file(path: str) -> str:
    """The bearer token held in the file at ``path``, without the whitespace around it (the
    newline an editor adds, a byte-order mark). ``TransportError`` naming the file when it
    cannot be read or its text cannot be a token; refused here, before any call, since gRPC
    would refuse the header only when the call is made (INTERNAL: Invalid metadata)."""
    from tikk.client.transport import TransportError, sendable_token

    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise TransportError(f"cannot read --token-file {path}: {exc.strerror}") from None
    # Bytes that are not UTF-8 become U+FFFD, which the check refuses as not ASCII.
    text = raw.decode("utf-8-sig", errors="replace").strip()
    return sendable_token(text, f"--token-file {path}")


def paging(p: argparse.ArgumentParser) -> None:
    p.add_argument("--limit", type=int, default=100)
    p.add_argument("--page-token", default="")


def metrics_option(p: argparse.ArgumentParser) -> None:
    """``--metrics HOST:PORT`` of a dispatcher or worker (``server.web.listener``)."""
    p.add_argument(
        "--metrics",
        metavar="HOST:PORT",
        default="",
        help="serve /metrics (Prometheus) and /healthz on this address (port 0: any; "
        "default: none). It shows metric values only: queue and handler names, counts",
    )
