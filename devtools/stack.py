"""The local production stack: Cassandra, Kafka (KRaft) and ZooKeeper as local processes.

``python -m devtools stack up`` resolves the servers' jars through Maven (``infra/*/pom.xml``) into
``.stack/lib``, starts each service on loopback with small heaps and non-default ports, and
waits until it really answers. Data and logs live under ``.stack/`` (or ``$TIKK_STACK_DIR``).
A second stack can run beside the first with its own ``$TIKK_STACK_DIR`` and its ports moved by
``$TIKK_STACK_PORT_OFFSET`` (or set one by one, e.g. ``$TIKK_STACK_CQL_PORT``).

**Two shapes.** The one-node stack (the default) runs one node of each service on 127.0.0.1.
The replicated stack (``stack up --nodes 3``) runs three of each, every node on a loopback
address of its own (Cassandra 127.0.0.11-13, Kafka 127.0.0.21-23, ZooKeeper 127.0.0.31-33:
127.0.0.0/8 is all loopback) with the same ports, under ``.stack/replicated/``; both may run at
once. A ``Service`` is one node: ``Service("kafka")`` the one-node stack's, ``Service("kafka",
2)`` the second broker of the replicated one. Starting and stopping them is
``devtools.stack_launch``'s.

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

import os
import secrets
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INFRA = ROOT / "infra"
JAVA_HOME_17 = Path("/usr/lib/jvm/java-17-openjdk-amd64")


def stack_port(name: str, default: int) -> int:
    """A port of the local stack: ``$TIKK_STACK_<NAME>_PORT`` if set, else ``default`` moved
    by ``$TIKK_STACK_PORT_OFFSET`` (0 unless set), so that a second stack (with its own
    ``$TIKK_STACK_DIR``) can run beside the first one."""
    explicit = os.environ.get(f"TIKK_STACK_{name}_PORT")
    if explicit:
        return int(explicit)
    return default + int(os.environ.get("TIKK_STACK_PORT_OFFSET", "0"))


CQL_PORT, KAFKA_PORT = stack_port("CQL", 19042), stack_port("KAFKA", 19092)
CONTROLLER_PORT, ZK_PORT = stack_port("CONTROLLER", 19093), stack_port("ZK", 12181)
# Cassandra's node-to-node ports: unused by a single node, but bound, so they move too.
STORAGE_PORT, SSL_STORAGE_PORT = stack_port("STORAGE", 17000), stack_port("SSL_STORAGE", 17001)
# The user tikk logs in as on each service of the authenticated variant.
USER = "tikk"
AUTH, PLAIN = "auth", "plain"


class StackError(Exception):
    """A service could not be fetched or started; the message says what to do."""


def stack_dir() -> Path:
    return Path(os.environ.get("TIKK_STACK_DIR", ROOT / ".stack")).resolve()


def topology_dir(count: int = 1) -> Path:
    """Where the stack of ``count`` nodes per service records its variant."""
    return stack_dir() if count == 1 else replicated_dir()


def variant(count: int = 1) -> str:
    """The variant the stack of ``count`` nodes was started in last (``auth`` or ``plain``); a
    stack started before the variants existed, or never started, is ``plain`` until ``up``
    says otherwise."""
    try:
        return (topology_dir(count) / "variant").read_text().strip() or PLAIN
    except FileNotFoundError:
        return PLAIN


def secret_file(name: str) -> Path:
    """The password file of ``name`` (``cassandra``, ``kafka``, ...) under ``secrets/``: one
    for both stacks."""
    return stack_dir() / "secrets" / f"{name}.password"


def tls_ca() -> Path:
    """The CA both stacks' certificates chain to (one certificate names every node)."""
    return stack_dir() / "tls" / "ca.pem"


def addresses(name: str, count: int = 1) -> str:
    """``host:port,...`` of the client port of every node of service ``name``."""
    port = {"cassandra": CQL_PORT, "kafka": KAFKA_PORT, "zookeeper": ZK_PORT}[name]
    return ",".join(f"{node.host}:{port}" for node in nodes(name, count))


def urls(kind: str | None = None, count: int = 1) -> dict[str, str]:
    """The backend URLs of the stack of ``count`` nodes per service, in its ``kind`` (default:
    the variant it was started in last). They hold file paths, never a password. The
    replicated stack's name every node, and its topics three replicas."""
    cassandra = f"cassandra://{addresses('cassandra', count)}/tikk"
    kafka = f"kafka://{addresses('kafka', count)}" + (f"?replication={count}" if count > 1 else "")
    plain = {
        "store_url": cassandra,
        "history_url": cassandra,
        "queue_url": kafka,
        "ownership_url": f"zk://{addresses('zookeeper', count)}/tikk",
    }
    return {name: login(url, kind or variant(count)) for name, url in plain.items()}


def login(url: str, kind: str | None = None) -> str:
    """``url`` of a service of this stack (``cassandra://``, ``kafka://``, ``zk://``, with no
    user) with the stack's login added when the stack (``kind``, default the variant the
    stack whose nodes the URL names started in last) is authenticated: the user, the
    password file and the CA to trust."""
    if (kind or variant(_stack_of(url))) == PLAIN:
        return url
    scheme, _, rest = url.partition("://")
    service = {"cassandra": "cassandra", "kafka": "kafka", "zk": "zookeeper"}[scheme]
    options = [f"password_file={secret_file(service)}"]
    if scheme == "kafka":
        options.insert(0, "sasl=SCRAM-SHA-256")
    if scheme != "zk":  # ZooKeeper's clients speak plain TCP on loopback; the ACLs guard it
        options.append(f"tls_ca={tls_ca()}")
    return f"{scheme}://{USER}@{rest}{'&' if '?' in rest else '?'}{'&'.join(options)}"


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


# Each replicated node's address is 127.0.0.<base + its index> (1..REPLICAS).
REPLICAS = 3
_REPLICA_BASE = {"cassandra": 10, "kafka": 20, "zookeeper": 30}
SERVICE_NAMES = ("zookeeper", "kafka", "cassandra")  # the order they start in


def replicated_dir() -> Path:
    """Where the replicated stack's nodes keep their data, logs and variant."""
    return stack_dir() / "replicated"


@dataclass(frozen=True)
class Service:
    """One node of a service: ``index`` 0 is the one-node stack's, 1..``REPLICAS`` a node of
    the replicated stack."""

    name: str
    index: int = 0

    @property
    def label(self) -> str:
        return self.name if not self.index else f"{self.name}-{self.index}"

    @property
    def host(self) -> str:
        return "127.0.0.1" if not self.index else f"127.0.0.{_REPLICA_BASE[self.name] + self.index}"

    @property
    def lib(self) -> Path:
        return stack_dir() / "lib" / self.name

    @property
    def home(self) -> Path:
        return stack_dir() / self.name if not self.index else replicated_dir() / self.label

    @property
    def pidfile(self) -> Path:
        return self.home / "java.pid"

    @property
    def log(self) -> Path:
        names = {"cassandra": "system.log", "kafka": "server.log", "zookeeper": "zookeeper.log"}
        return self.home / "logs" / names[self.name]

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
        # Started by a shell that exits at once: the node is nobody's child (init reaps it),
        # so whoever started it (a test, the fault suite) holds no process object of it.
        launched = subprocess.run(
            ["/bin/sh", "-c", '"$@" >>"$NODE_LOG" 2>&1 </dev/null & echo $!', "sh", *args],
            env={**os.environ, "NODE_LOG": str(logs / "stdout.log")},
            cwd=self.home,
            capture_output=True,
            text=True,
            check=True,
            start_new_session=True,
            timeout=30,
        )
        self.pidfile.write_text(launched.stdout.strip())

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

    def kill(self, timeout_s: float = 10.0) -> None:
        """``kill -9`` of the node (a crash), returning once it is gone (its sockets closed:
        a dying node must not pass for a running one); its pid file stays."""
        pid = self.pid()
        if pid is None:
            return
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + timeout_s
        while self.pid() is not None and time.monotonic() < deadline:
            time.sleep(0.05)


def nodes(name: str, count: int = 1) -> list[Service]:
    """The nodes of service ``name`` in the stack of ``count`` nodes (1 or ``REPLICAS``)."""
    if count not in (1, REPLICAS):
        raise StackError(f"a stack has 1 or {REPLICAS} nodes of each service, not {count}")
    return [Service(name)] if count == 1 else [Service(name, i) for i in range(1, count + 1)]


CASSANDRA, KAFKA, ZOOKEEPER = Service("cassandra"), Service("kafka"), Service("zookeeper")
SERVICES = [ZOOKEEPER, KAFKA, CASSANDRA]


def render(template: Path, target: Path, **values: object) -> None:
    text = template.read_text()
    for key, value in values.items():
        text = text.replace(f"@{key}@", str(value))
    target.write_text(text)


def classpath(*parts: Path) -> str:
    return ":".join(str(p) for p in parts)


def password(name: str) -> str:
    """The stack's password for ``name``, generated on first use into a 0600 file."""
    path = secret_file(name)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.parent.chmod(0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(24) + "\n")
    return path.read_text().strip()


def private(path: Path, text: str) -> None:
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
    from server.certs import DEV_HOSTS, make_dev_pki

    every_node = [n.host for name in SERVICE_NAMES for n in nodes(name, REPLICAS)]
    pki = make_dev_pki(stack_dir() / "tls", hosts=(*DEV_HOSTS, *every_node))
    keystore = stack_dir() / "tls" / "server-keystore.pem"
    private(keystore, pki.server_key.read_text() + pki.server_cert.read_text())
    return ServerTls(pki.ca_cert, keystore)


def append(target: Path, template: Path, **values: object) -> None:
    text = template.read_text()
    for key, value in values.items():
        text = text.replace(f"@{key}@", str(value))
    with open(target, "a") as f:
        f.write("\n" + text)


def _stack_of(url: str) -> int:
    """How many nodes of each service the stack whose nodes ``url`` names has."""
    location = url.partition("://")[2].partition("/")[0].partition("?")[0]
    hosts = {part.rpartition(":")[0] for part in location.split(",")}
    replicated = {n.host for name in SERVICE_NAMES for n in nodes(name, REPLICAS)}
    return REPLICAS if hosts & replicated else 1


# The one-node stack's URLs as it was started last.
URLS = urls()
