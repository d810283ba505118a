"""The local production stack: Cassandra, Kafka (KRaft) and ZooKeeper as local processes.

``python -m devtools stack up`` resolves the servers' jars through Maven (``infra/*/pom.xml``) into
``.stack/lib``, starts each service on loopback with small heaps and non-default ports, and
waits until it really answers. Data and logs live under ``.stack/`` (or ``$TIKK_STACK_DIR``).
A second stack can run beside the first with its own ``$TIKK_STACK_DIR`` and its ports moved by
``$TIKK_STACK_PORT_OFFSET`` (or set one by one, e.g. ``$TIKK_STACK_CQL_PORT``).

**Authentication** is on unless ``up(plain=True)`` (``python -m devtools stack up --plain``):
Cassandra asks for a password (user ``tikk``) and speaks TLS only, Kafka's client listener is
SASL/SCRAM over TLS, and ZooKeeper refuses any client that did not authenticate with the digest
scheme. The first start generates the passwords under ``secrets/`` (mode 0600) and a
development CA with the services' certificates under ``tls/`` (``server.certs.make_dev_pki``);
``URLS`` then name the user, the password file and the CA, so every tool connects with no
further setting. The variant that was started last is recorded in ``variant``; switching it
restarts the services.
"""

from __future__ import annotations

import base64
import logging
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
INFRA = ROOT / "infra"
JAVA_HOME_17 = Path("/usr/lib/jvm/java-17-openjdk-amd64")


def _port(name: str, default: int) -> int:
    """A port of the local stack: ``$TIKK_STACK_<NAME>_PORT`` if set, else ``default`` moved
    by ``$TIKK_STACK_PORT_OFFSET`` (0 unless set), so that a second stack (with its own
    ``$TIKK_STACK_DIR``) can run beside the first one."""
    explicit = os.environ.get(f"TIKK_STACK_{name}_PORT")
    if explicit:
        return int(explicit)
    return default + int(os.environ.get("TIKK_STACK_PORT_OFFSET", "0"))


CQL_PORT, KAFKA_PORT = _port("CQL", 19042), _port("KAFKA", 19092)
CONTROLLER_PORT, ZK_PORT = _port("CONTROLLER", 19093), _port("ZK", 12181)
# Cassandra's node-to-node ports: unused by a single node, but bound, so they move too.
STORAGE_PORT, SSL_STORAGE_PORT = _port("STORAGE", 17000), _port("SSL_STORAGE", 17001)
# The user tikk logs in as on each service of the authenticated variant.
USER = "tikk"
AUTH, PLAIN = "auth", "plain"


class StackError(Exception):
    """A service could not be fetched or started; the message says what to do."""


def stack_dir() -> Path:
    return Path(os.environ.get("TIKK_STACK_DIR", ROOT / ".stack")).resolve()


def variant() -> str:
    """The variant started last (``auth`` or ``plain``); a stack started before the variants
    existed, or never started, is ``plain`` until ``up`` says otherwise."""
    try:
        return (stack_dir() / "variant").read_text().strip() or PLAIN
    except FileNotFoundError:
        return PLAIN


def secret_file(name: str) -> Path:
    """The password file of ``name`` (``cassandra``, ``kafka``, ...) under ``secrets/``."""
    return stack_dir() / "secrets" / f"{name}.password"


def tls_ca() -> Path:
    return stack_dir() / "tls" / "ca.pem"


def urls(kind: str | None = None) -> dict[str, str]:
    """The backend URLs of the stack's ``kind`` (default: the variant started last). They hold
    file paths, never a password."""
    plain = {
        "store_url": f"cassandra://127.0.0.1:{CQL_PORT}/tikk",
        "history_url": f"cassandra://127.0.0.1:{CQL_PORT}/tikk",
        "queue_url": f"kafka://127.0.0.1:{KAFKA_PORT}",
        "ownership_url": f"zk://127.0.0.1:{ZK_PORT}/tikk",
    }
    return {name: login(url, kind) for name, url in plain.items()}


def login(url: str, kind: str | None = None) -> str:
    """``url`` of a service of this stack (``cassandra://``, ``kafka://``, ``zk://``, with no
    user) with the stack's login added when the stack (``kind``, default the variant started
    last) is authenticated: the user, the password file and the CA to trust."""
    if (kind or variant()) == PLAIN:
        return url
    scheme, _, rest = url.partition("://")
    service = {"cassandra": "cassandra", "kafka": "kafka", "zk": "zookeeper"}[scheme]
    options = [f"password_file={secret_file(service)}"]
    if scheme == "kafka":
        options.insert(0, "sasl=SCRAM-SHA-256")
    if scheme != "zk":  # ZooKeeper's clients speak plain TCP on loopback; the ACLs guard it
        options.append(f"tls_ca={tls_ca()}")
    return f"{scheme}://{USER}@{rest}{'&' if '?' in rest else '?'}{'&'.join(options)}"


URLS = urls()


def java() -> str:
    """JDK 17 explicitly: Cassandra 5.0 cannot run on JDK 24+."""
    home = Path(os.environ.get("TIKK_JAVA_HOME", JAVA_HOME_17))
    binary = home / "bin" / "java"
    if binary.exists():
        return str(binary)
    raise StackError(
        f"JDK 17 not found at {home}. Install it (Debian: apt-get install openjdk-17-jdk-headless)"
        " or set TIKK_JAVA_HOME to a JDK 17."
    )


def check_tools() -> None:
    java()
    if shutil.which("mvn") is None:
        raise StackError("Maven (mvn) not found. Install it (Debian: apt-get install maven).")


@dataclass(frozen=True)
class Service:
    name: str

    @property
    def lib(self) -> Path:
        return stack_dir() / "lib" / self.name

    @property
    def home(self) -> Path:
        return stack_dir() / self.name

    @property
    def pidfile(self) -> Path:
        return self.home / "java.pid"

    @property
    def log(self) -> Path:
        return (
            self.home
            / "logs"
            / {"cassandra": "system.log", "kafka": "server.log", "zookeeper": "zookeeper.log"}[
                self.name
            ]
        )

    def fetch(self) -> None:
        if self.lib.exists() and any(self.lib.glob("*.jar")):
            return
        check_tools()
        print(f"fetching {self.name} jars through Maven ...", flush=True)
        done = subprocess.run(
            [
                "mvn",
                "-B",
                "-q",
                "-f",
                str(INFRA / self.name / "pom.xml"),
                "dependency:copy-dependencies",
                "-DincludeScope=runtime",
                f"-DoutputDirectory={self.lib}",
            ],
            capture_output=True,
            text=True,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        if done.returncode != 0:
            shutil.rmtree(self.lib, ignore_errors=True)
            raise StackError(f"Maven could not resolve {self.name}:\n{done.stdout[-4000:]}")

    def pid(self) -> int | None:
        try:
            pid = int(self.pidfile.read_text())
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ValueError, IndexError):
            return None
        return None if state in ("Z", "X") else pid  # a zombie has exited

    def tail(self, lines: int = 40) -> str:
        chunks = []
        for f in (self.log, self.home / "logs" / "stdout.log"):
            if f.exists():
                text = f.read_text(errors="replace").splitlines()[-lines:]
                chunks.append(f"--- {f}\n" + "\n".join(text))
        return "\n".join(chunks) or f"(no log under {self.home})"

    def spawn(self, args: list[str]) -> None:
        logs = self.home / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        if self.log.exists():  # readiness reads the log: only this run's lines may count
            self.log.replace(self.log.with_name(self.log.name + ".previous"))
        with open(logs / "stdout.log", "ab") as out:
            proc = subprocess.Popen(
                args,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.home,
                start_new_session=True,
            )
        self.pidfile.write_text(str(proc.pid))

    def stop(self, timeout_s: float = 30.0) -> None:
        pid = self.pid()
        if pid is None:
            return
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.pid() is not None:
            time.sleep(0.2)
        if self.pid() is not None:
            os.kill(pid, signal.SIGKILL)
        self.pidfile.unlink(missing_ok=True)


CASSANDRA, KAFKA, ZOOKEEPER = Service("cassandra"), Service("kafka"), Service("zookeeper")
SERVICES = [ZOOKEEPER, KAFKA, CASSANDRA]


def _render(template: Path, target: Path, **values: object) -> None:
    text = template.read_text()
    for key, value in values.items():
        text = text.replace(f"@{key}@", str(value))
    target.write_text(text)


def _classpath(*parts: Path) -> str:
    return ":".join(str(p) for p in parts)


def _password(name: str) -> str:
    """The stack's password for ``name``, generated on first use into a 0600 file."""
    path = secret_file(name)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.parent.chmod(0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(24) + "\n")
    return path.read_text().strip()


def _private(path: Path, text: str) -> None:
    """Write ``text`` (a config holding a secret or a key) readable by its owner only."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # a file left by an earlier run keeps its mode otherwise
    with os.fdopen(fd, "w") as f:
        f.write(text)


@dataclass(frozen=True)
class ServerTls:
    """The services' TLS files: the CA clients trust, and the key with its certificate in one
    PEM file (the form Cassandra's and Kafka's PEM keystores read)."""

    ca: Path
    keystore: Path


def server_tls() -> ServerTls:
    """The development PKI under ``tls/`` (made on first use, reused while valid)."""
    from server.certs import make_dev_pki

    pki = make_dev_pki(stack_dir() / "tls")
    keystore = stack_dir() / "tls" / "server-keystore.pem"
    _private(keystore, pki.server_key.read_text() + pki.server_cert.read_text())
    return ServerTls(pki.ca_cert, keystore)


def _append(target: Path, template: Path, **values: object) -> None:
    text = template.read_text()
    for key, value in values.items():
        text = text.replace(f"@{key}@", str(value))
    with open(target, "a") as f:
        f.write("\n" + text)


def start_zookeeper(auth: bool) -> None:
    s = ZOOKEEPER
    conf = s.home / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    _render(
        INFRA / "zookeeper" / "zoo.cfg", conf / "zoo.cfg", DATA=s.home / "data", ZK_PORT=ZK_PORT
    )
    if auth:
        _password("zookeeper")  # the digest identity is the first client's: made up front
        _append(conf / "zoo.cfg", INFRA / "zookeeper" / "auth.cfg")
    shutil.copy(INFRA / "zookeeper" / "logback.xml", conf / "logback.xml")
    s.spawn(
        [
            java(),
            "-Xms64m",
            "-Xmx256m",
            f"-Dzookeeper.log.dir={s.home / 'logs'}",
            "-cp",
            _classpath(conf, s.lib / "*"),
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            str(conf / "zoo.cfg"),
        ]
    )


def zookeeper_ready() -> bool:
    # "ruok" answers imok even when the database failed to load; "srvr" reports the mode
    # only once the server really serves requests.
    try:
        with socket.create_connection(("127.0.0.1", ZK_PORT), timeout=1) as sock:
            sock.sendall(b"srvr")
            return b"Mode:" in sock.recv(4096)
    except OSError:
        return False


def _kafka_java_opts() -> list[str]:
    k = KAFKA
    return [
        java(),
        "-Xms256m",
        "-Xmx768m",
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        "-Djava.awt.headless=true",
        f"-Dkafka.logs.dir={k.home / 'logs'}",
        f"-Dlog4j2.configurationFile=file:{k.home / 'conf' / 'log4j2.properties'}",
        "-cp",
        str(k.lib / "*"),
    ]


def start_kafka(auth: bool) -> None:
    k = KAFKA
    conf, data = k.home / "conf", k.home / "data"
    conf.mkdir(parents=True, exist_ok=True)
    props = conf / "server.properties"
    listeners = (INFRA / "kafka" / f"listeners-{AUTH if auth else PLAIN}.properties").read_text()
    if auth:
        tls = server_tls()
        listeners = listeners.replace("@KEYSTORE@", str(tls.keystore)).replace("@CA@", str(tls.ca))
        listeners = listeners.replace("@BROKER_PASSWORD@", _password("kafka-broker"))
    # Written once, readable by its owner only: it holds the broker's own password.
    text = (INFRA / "kafka" / "server.properties").read_text().replace("@LISTENERS@", listeners)
    for key, value in (("DATA", data), ("KAFKA_PORT", KAFKA_PORT),
                       ("CONTROLLER_PORT", CONTROLLER_PORT)):  # fmt: skip
        text = text.replace(f"@{key}@", str(value))
    _private(props, text)
    shutil.copy(INFRA / "kafka" / "log4j2.properties", conf / "log4j2.properties")
    scram_marker = k.home / "scram-users"
    if auth and (data / "meta.properties").exists() and not scram_marker.exists():
        # Formatted by the open variant: SCRAM users can only be added by a new format.
        print("kafka      switching to authentication: its data starts afresh", flush=True)
        shutil.rmtree(data)
    if not (data / "meta.properties").exists():
        _format_kafka(props, conf, auth)
        if auth:
            scram_marker.touch()
    k.spawn([*_kafka_java_opts(), "kafka.Kafka", str(props)])


def _kafka_cluster_id() -> str:
    """A random cluster id the storage tool's argument parser cannot mistake for an option.

    One base64 id in 64 starts with '-', which the parser reads as a flag; Kafka's own
    generator draws again in that case, and so does this one.
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _format_kafka(props: Path, conf: Path, auth: bool) -> None:
    args = ["format", "-t", _kafka_cluster_id(), "-c", str(props), "--ignore-formatted"]
    if auth:
        # The users' passwords go through an argument file (read by the java launcher), never
        # the command line other users of this host can list.
        users = "".join(
            f"--add-scram\nSCRAM-SHA-256=[name={user},password={_password(secret)}]\n"
            for user, secret in ((USER, "kafka"), ("broker", "kafka-broker"))
        )
        argfile = conf / "scram-users.args"
        _private(argfile, users)
        args.append(f"@{argfile}")
    try:
        done = subprocess.run(
            [*_kafka_java_opts(), "kafka.tools.StorageTool", *args],
            capture_output=True,
            text=True,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    finally:
        (conf / "scram-users.args").unlink(missing_ok=True)
    if done.returncode != 0:
        raise StackError(f"formatting Kafka storage failed:\n{done.stdout}{done.stderr}")


def kafka_ready() -> bool:
    log = KAFKA.log
    return log.exists() and "Kafka Server started" in log.read_text(errors="replace")


def start_cassandra(auth: bool) -> None:
    conf = _cassandra_conf(auth)
    CASSANDRA.spawn(_cassandra_command(conf))


def _cassandra_conf(auth: bool) -> Path:
    """The node's configuration folder, written from ``infra/cassandra``."""
    conf = CASSANDRA.home / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    _render(
        INFRA / "cassandra" / "cassandra.yaml",
        conf / "cassandra.yaml",
        CQL_PORT=CQL_PORT,
        STORAGE_PORT=STORAGE_PORT,
        SSL_STORAGE_PORT=SSL_STORAGE_PORT,
    )
    if auth:
        tls = server_tls()
        _append(conf / "cassandra.yaml", INFRA / "cassandra" / "auth.yaml",
                KEYSTORE=tls.keystore, CA=tls.ca)  # fmt: skip
    shutil.copy(INFRA / "cassandra" / "logback.xml", conf / "logback.xml")
    return conf


def _cassandra_command(conf: Path) -> list[str]:
    c = CASSANDRA
    options = (INFRA / "cassandra" / "jvm17-server.options").read_text().split("\n")
    # One option per line; "--add-exports X" is one option written with a space.
    jvm_flags = [line.strip().replace(" ", "=", 1) for line in options if line.startswith("-")]
    jamm = next(iter(sorted(c.lib.glob("jamm-*.jar"))), None)
    if jamm is None:
        raise StackError(f"jamm agent jar missing from {c.lib}; delete the folder and retry")
    return [
        java(),
        "-Xms1g",
        "-Xmx1g",
        "-Xss256k",
        "-XX:+UseG1GC",
        "-da:net.openhft...",
        "-Djava.net.preferIPv4Stack=true",
        f"-javaagent:{jamm}",
        *jvm_flags,
        f"-Dcassandra.config=file://{conf / 'cassandra.yaml'}",
        f"-Dcassandra.storagedir={c.home / 'data'}",
        f"-Dcassandra.logdir={c.home / 'logs'}",
        f"-Dlogback.configurationFile={conf / 'logback.xml'}",
        "-Dcassandra-foreground=yes",
        "-Dcassandra.skip_wait_for_gossip_to_settle=0",
        "-Dcassandra.superuser_setup_delay_ms=0",
        "-Dcassandra.unsafesystem=true",
        "-Dcassandra.test.flush_local_schema_changes=false",
        "-cp",
        _classpath(conf, c.lib / "*"),
        "org.apache.cassandra.service.CassandraDaemon",
    ]


def cassandra_ready() -> bool:
    # The native transport is bound last in start-up: a CQL port that accepts means ready.
    log = CASSANDRA.log
    if not (log.exists() and "Startup complete" in log.read_text(errors="replace")):
        return False
    try:
        socket.create_connection(("127.0.0.1", CQL_PORT), timeout=1).close()
    except OSError:
        return False
    return True


_STARTERS: dict[str, tuple[Callable[[bool], None], Callable[[], bool], int]] = {
    "zookeeper": (start_zookeeper, zookeeper_ready, 60),
    "kafka": (start_kafka, kafka_ready, 90),
    "cassandra": (start_cassandra, cassandra_ready, 180),
}


def up(names: list[str] | None = None, fresh: bool = False, plain: bool = False) -> None:
    """Start the services (all by default; authenticated unless ``plain``) and wait until
    each answers. A service running in the other variant is restarted."""
    unknown = set(names or []) - {s.name for s in SERVICES}
    if unknown:
        raise StackError(f"unknown service(s): {', '.join(sorted(unknown))}")
    chosen = [s for s in SERVICES if names is None or s.name in names]
    kind = PLAIN if plain else AUTH
    switching = variant() != kind
    for s in chosen:
        s.fetch()
    stack_dir().mkdir(parents=True, exist_ok=True)
    for s in chosen:
        start, ready, timeout_s = _STARTERS[s.name]
        if not fresh and not switching and s.pid() is not None and ready():
            print(f"{s.name:<10} already running (pid {s.pid()}), log {s.log}")
            continue
        s.stop()
        if fresh:
            shutil.rmtree(s.home, ignore_errors=True)
        began = time.monotonic()
        start(not plain)
        _wait(s, ready, timeout_s)
        if s is CASSANDRA and not plain:
            cassandra_roles()
        print(
            f"{s.name:<10} up in {time.monotonic() - began:4.1f}s (pid {s.pid()}), log {s.log}",
            flush=True,
        )
    (stack_dir() / "variant").write_text(kind + "\n")


def cassandra_roles() -> None:
    """Give the authenticated Cassandra its ``tikk`` role (all permissions on all keyspaces)
    and replace the built-in superuser's well-known password with a generated one.
    Idempotent: run at every start of the node."""
    # The expected refusals (trying which login works) are no news on the terminal.
    logging.getLogger("cassandra").setLevel(logging.CRITICAL)
    admin = _cassandra_admin(_password("cassandra-admin"))
    try:
        admin.execute(
            f"CREATE ROLE IF NOT EXISTS {USER} WITH LOGIN = true AND PASSWORD = %s",
            (_password("cassandra"),),
        )
        admin.execute(f"GRANT ALL PERMISSIONS ON ALL KEYSPACES TO {USER}")
    finally:
        admin.cluster.shutdown()


def _cassandra_admin(admin_password: str) -> Any:
    """A session of the superuser, with ``admin_password`` set on a fresh node."""
    from cassandra.cluster import NoHostAvailable

    deadline = time.monotonic() + 60
    while True:  # a fresh node creates its default superuser a moment after it serves
        try:
            return _cassandra_session("cassandra", admin_password)
        except NoHostAvailable:
            pass
        try:
            admin = _cassandra_session("cassandra", "cassandra")  # the documented default
            admin.execute("ALTER ROLE cassandra WITH PASSWORD = %s", (admin_password,))
            return admin
        except NoHostAvailable as exc:
            if time.monotonic() > deadline:
                raise StackError(f"cassandra: no superuser to set up roles with: {exc}") from None
            time.sleep(1)


def _cassandra_session(user: str, password: str) -> Any:
    from cassandra.auth import PlainTextAuthProvider
    from cassandra.cluster import Cluster

    ssl_context = ssl.create_default_context(cafile=str(tls_ca()))
    cluster = Cluster(["127.0.0.1"], port=CQL_PORT, protocol_version=5,
                      auth_provider=PlainTextAuthProvider(user, password),
                      ssl_context=ssl_context)  # fmt: skip
    return cluster.connect()


def _wait(s: Service, ready: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ready():
            return
        if s.pid() is None:
            raise StackError(f"{s.name} exited during start-up:\n{s.tail()}")
        time.sleep(0.5)
    raise StackError(f"{s.name} not ready after {timeout_s}s:\n{s.tail()}")


def down() -> None:
    for s in reversed(SERVICES):
        s.stop()
        print(f"{s.name:<10} stopped")


def status() -> bool:
    all_up = True
    print(f"variant    {variant()}")
    for s in SERVICES:
        _, ready, _ = _STARTERS[s.name]
        pid = s.pid()
        state = "up" if pid and ready() else ("starting" if pid else "down")
        all_up &= state == "up"
        print(f"{s.name:<10} {state:<8} {('pid ' + str(pid)) if pid else '':<10} log {s.log}")
    return all_up
