"""Backend URLs: ``scheme://rest``, e.g. ``sqlite:///var/lib/tikk/tikk.db``; and the credentials
and TLS settings a URL of a secured backend carries.

Standard library only (and ``tikk.errors``): the worker SDK reads its queue's credentials with
it too.

A secured backend's URL names the user inline and where the password is, never the password
itself on a command line::

    cassandra://tikk@db1:9042/tikk?password_file=/etc/tikk/cassandra.pw&tls_ca=/etc/tikk/ca.pem
    kafka://tikk@k1:9093?sasl=SCRAM-SHA-256&password_env=TIKK_KAFKA_PASSWORD&tls=1
    zk://tikk@zk1:2181/tikk?password_file=/etc/tikk/zk.pw

* ``user:password@`` inline: only in a config file (the CLI refuses it on its command line,
  where every process listing would show it).
* ``password_file=PATH`` (first line, trailing newline dropped) or ``password_env=VAR``.
* ``tls=1`` (trust the system's CAs), ``tls_ca=PATH`` (trust this CA; implies TLS),
  ``tls_cert=PATH&tls_key=PATH`` (a client certificate; implies TLS).
* ``sasl=SCRAM-SHA-256|SCRAM-SHA-512|PLAIN`` (Kafka only; the default with a user is
  SCRAM-SHA-256).

``BackendUrl.redacted()`` is how a URL is shown anywhere (logs, banners, errors, the queue URL a
server hands to workers): the inline password removed; file paths and variable names stay,
since they are no secret and let a process on the same host find its own copy.
"""

from __future__ import annotations

import os
import ssl
import urllib.parse
from dataclasses import dataclass, field

from tikk.errors import InvalidArgument

# The query options this module takes out of a URL; every other one is the backend's own.
SECURITY_OPTIONS = ("password_file", "password_env", "tls", "tls_ca", "tls_cert", "tls_key", "sasl")
SASL_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


def split_url(setting: str, url: str) -> tuple[str, str]:
    """(scheme, rest) of ``url``; ``setting`` names the option in the error."""
    scheme, sep, rest = url.partition("://")
    if not sep or not scheme or not rest:
        raise InvalidArgument(setting, f"expected scheme://location, got {redact(url)!r}")
    return scheme, rest


def has_inline_password(url: str) -> bool:
    """Whether ``url`` holds ``user:password@`` (allowed only in a config file)."""
    try:
        return urllib.parse.urlsplit(url).password is not None
    except ValueError:
        return False


def redact(url: str) -> str:
    """``url`` with an inline password removed, for messages about a URL not parsed yet."""
    try:
        parts = urllib.parse.urlsplit(url)
        if parts.password is None:
            return url
    except ValueError:
        return "<unparsable URL>"
    hosts = parts.netloc.rpartition("@")[2]
    user = urllib.parse.quote(parts.username or "", safe="")
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}@{hosts}"))


@dataclass(frozen=True)
class Credentials:
    """A backend user and its password; the password never shows in a ``repr``."""

    user: str
    password: str = field(repr=False)


@dataclass(frozen=True)
class TlsFiles:
    """TLS towards a backend: the CA to trust (empty: the system's) and an optional client
    certificate and key (PEM files)."""

    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""

    def context(self, setting: str) -> ssl.SSLContext:
        """A client context that checks the server's certificate and host name; raises
        ``InvalidArgument`` naming ``setting`` when a file is missing or unreadable."""
        try:
            context = ssl.create_default_context(cafile=self.ca_file or None)
            if self.cert_file:
                context.load_cert_chain(self.cert_file, self.key_file or None)
        except (OSError, ssl.SSLError) as exc:
            which = ", ".join(f for f in (self.ca_file, self.cert_file, self.key_file) if f)
            raise InvalidArgument(
                setting, f"cannot load the TLS files ({which}): {exc.strerror or exc}"
            ) from None
        return context


@dataclass(frozen=True)
class BackendUrl:
    """A backend URL split into where (``bare``: what the backend's own parser reads) and how
    to authenticate (``credentials``, ``tls``, ``sasl``)."""

    setting: str
    scheme: str
    # The URL without user, password and security options.
    bare: str
    credentials: Credentials | None = None
    tls: TlsFiles | None = None
    sasl: str = ""
    # How the password was given, shown by ``redacted`` ("password_file=PATH" or similar).
    password_source: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, setting: str, url: str) -> BackendUrl:
        """Split ``url``; raises ``InvalidArgument`` naming ``setting`` for a malformed URL,
        an unknown SASL mechanism, a user without a password (or the reverse), an unreadable
        password file or an unset variable. Reads the password file (no network I/O)."""
        try:
            parts = urllib.parse.urlsplit(url)
            inline = (parts.username, parts.password)
        except ValueError as exc:
            raise InvalidArgument(setting, f"malformed URL: {exc}") from None
        if not parts.scheme or not parts.netloc:
            raise InvalidArgument(setting, f"expected scheme://host..., got {redact(url)!r}")
        pairs = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        own = {k: v for k, v in pairs if k in SECURITY_OPTIONS}
        if len(own) != sum(1 for k, _ in pairs if k in SECURITY_OPTIONS):
            raise InvalidArgument(setting, "a password, TLS or SASL option is given twice")
        rest = [(k, v) for k, v in pairs if k not in SECURITY_OPTIONS]
        hosts = parts.netloc.rpartition("@")[2]
        bare = urllib.parse.urlunsplit(
            parts._replace(netloc=hosts, query=urllib.parse.urlencode(rest, safe="/,:"))
        )
        source = tuple((k, own[k]) for k in ("password_file", "password_env") if k in own)
        return cls(
            setting,
            parts.scheme,
            bare,
            _credentials(setting, inline, own),
            _tls(setting, own),
            _sasl(setting, parts.scheme, own, inline[0]),
            source,
        )

    def redacted(self) -> str:
        """The URL as it may be shown: the user, hosts, options and the password's source, but
        never the password."""
        parts = urllib.parse.urlsplit(self.bare)
        netloc = parts.netloc
        if self.credentials is not None:
            netloc = f"{urllib.parse.quote(self.credentials.user, safe='')}@{netloc}"
        extra = list(self.password_source)
        if self.sasl:
            extra.append(("sasl", self.sasl))
        if self.tls is not None:
            tls = self.tls
            extra += [("tls", "1")] if not (tls.ca_file or tls.cert_file) else []
            extra += [(k, v) for k, v in (("tls_ca", tls.ca_file), ("tls_cert", tls.cert_file),
                                           ("tls_key", tls.key_file)) if v]  # fmt: skip
        query = "&".join(q for q in (parts.query, urllib.parse.urlencode(extra, safe="/,:")) if q)
        return urllib.parse.urlunsplit(parts._replace(netloc=netloc, query=query))

    def __str__(self) -> str:
        return self.redacted()

    @property
    def user(self) -> str:
        """The user name, or "" for none (shown in errors)."""
        return self.credentials.user if self.credentials is not None else ""

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context for the backend's driver, or None without TLS."""
        return None if self.tls is None else self.tls.context(self.setting)


def _credentials(
    setting: str, inline: tuple[str | None, str | None], own: dict[str, str]
) -> Credentials | None:
    user, inline_password = inline
    sources = [k for k in ("password_file", "password_env") if k in own]
    given = sources + (["an inline password"] if inline_password is not None else [])
    if len(given) > 1:
        raise InvalidArgument(setting, f"give the password once, not as {' and '.join(given)}")
    if not user:
        if given:
            raise InvalidArgument(setting, "a password is given but no user (user@host)")
        return None
    user = urllib.parse.unquote(user)
    if inline_password is not None:
        return Credentials(user, urllib.parse.unquote(inline_password))
    if "password_file" in own:
        return Credentials(user, _password_file(setting, own["password_file"]))
    if "password_env" in own:
        return Credentials(user, _password_env(setting, own["password_env"]))
    raise InvalidArgument(
        setting,
        f"user {user!r} has no password: add password_file=PATH or password_env=VAR,"
        " or put the URL with its password in a config file (--config)",
    )


def _password_file(setting: str, path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            password = f.readline().rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8"
        raise InvalidArgument(setting, f"cannot read password_file {path!r}: {reason}") from None
    if not password:
        raise InvalidArgument(setting, f"password_file {path!r} is empty")
    return password


def _password_env(setting: str, name: str) -> str:
    password = os.environ.get(name, "")
    if not password:
        raise InvalidArgument(setting, f"password_env names {name!r}, which is unset or empty")
    return password


def _tls(setting: str, own: dict[str, str]) -> TlsFiles | None:
    flag = own.get("tls", "").lower()
    if flag not in _TRUE + _FALSE:
        raise InvalidArgument(setting, f"tls must be 1 or 0, got {own['tls']!r}")
    files = TlsFiles(own.get("tls_ca", ""), own.get("tls_cert", ""), own.get("tls_key", ""))
    if bool(files.cert_file) != bool(files.key_file):
        raise InvalidArgument(setting, "tls_cert and tls_key go together")
    if any((files.ca_file, files.cert_file)):
        if flag in _FALSE[:-1]:
            raise InvalidArgument(setting, "tls=0 contradicts tls_ca / tls_cert")
        return files
    return files if flag in _TRUE else None


def _sasl(setting: str, scheme: str, own: dict[str, str], user: str | None) -> str:
    mechanism = own.get("sasl", "").upper()
    if mechanism and mechanism not in SASL_MECHANISMS:
        known = ", ".join(SASL_MECHANISMS)
        raise InvalidArgument(setting, f"unknown sasl mechanism {own['sasl']!r} (known: {known})")
    if mechanism and scheme != "kafka":
        raise InvalidArgument(setting, "sasl= applies to kafka:// URLs only")
    if mechanism and not user:
        raise InvalidArgument(setting, f"sasl={mechanism} needs a user (user@host)")
    return mechanism
