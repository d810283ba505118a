"""Starting, stopping and probing the local stack's nodes (``devtools.stack`` says what and
where they are): each node's configuration written from ``infra/``, its command line, and
when it really answers.

The one-node stack and the replicated one (three of each service) are configured from the
same templates; what differs is a node's address, its peers, and its sizing (``Sizing``): the
replicated stack's nine JVMs must fit beside tikk on a 2-core, 24 GiB machine, so each node
gets a smaller heap, smaller memtables and caches, and fewer threads, and runs with the quick
compiler only (``C1_ONLY``). Measured on such a machine, all nine idle hold about 3.9 GB and
14 % of one core.

In the replicated stack every service survives the loss of one node: Cassandra holds the
keyspace (and the logins, in ``system_auth``) on all three at replication factor 3 and
answers at ``LOCAL_QUORUM``; Kafka's topics have three replicas, a write is acknowledged by
two (``min.insync.replicas``), and a broker silent 4 s loses its leaderships; ZooKeeper is an
ensemble of three, so a session outlives its server's death.
"""

from __future__ import annotations

import logging
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from devtools.stack import (
    AUTH,
    CONTROLLER_PORT,
    CQL_PORT,
    INFRA,
    KAFKA_PORT,
    PLAIN,
    REPLICAS,
    SERVICE_NAMES,
    SSL_STORAGE_PORT,
    STORAGE_PORT,
    USER,
    ZK_PORT,
    Service,
    StackError,
    append,
    classpath,
    java,
    nodes,
    password,
    private,
    render,
    replicated_dir,
    server_tls,
    stack_dir,
    stack_port,
    tls_ca,
    topology_dir,
    variant,
)

# ZooKeeper's quorum and election ports (each server on its own address).
ZK_QUORUM_PORT, ZK_ELECTION_PORT = stack_port("ZK_QUORUM", 12888), stack_port("ZK_ELECTION", 13888)
# Cassandra's tokens per node in the replicated stack: spread evenly and interleaved, given
# up front, so three empty nodes start at once without streaming.
_TOKENS_PER_NODE = 8


@dataclass(frozen=True)
class Sizing:
    """What one node may use."""

    cassandra_heap: str
    memtable_heap: str
    memtable_offheap: str
    file_cache: str
    key_cache: str
    concurrent_reads: int
    concurrent_writes: int
    commitlog_segment: str
    kafka_heap: str
    kafka_io_threads: int
    zookeeper_heap: str
    jit: tuple[str, ...] = ()


# Only the quick compiler (C1) for the replicated stack's JVMs: on two cores nine JVMs that
# each spend tens of seconds in the optimising compiler (C2) after every start, and a fault
# run restarts some of them, left tikk minutes late; see the README's replicated stack.
C1_ONLY = ("-XX:TieredStopAtLevel=1",)
ONE_NODE = Sizing("1g", "256MiB", "64MiB", "64MiB", "16MiB", 8, 16, "16MiB", "768m", 4, "256m")
REPLICA = Sizing(
    "512m", "64MiB", "32MiB", "32MiB", "8MiB", 4, 8, "8MiB", "512m", 2, "256m", jit=C1_ONLY
)


def sizing(node: Service) -> Sizing:
    return ONE_NODE if not node.index else REPLICA


def _count(node: Service) -> int:
    return 1 if not node.index else REPLICAS


# ZooKeeper


def start_zookeeper(node: Service, auth: bool) -> None:
    conf = node.home / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    data = node.home / "data"
    data.mkdir(parents=True, exist_ok=True)
    cfg = conf / "zoo.cfg"
    render(INFRA / "zookeeper" / "zoo.cfg", cfg, DATA=data, ZK_PORT=ZK_PORT, HOST=node.host)
    if node.index:
        servers = "\n".join(
            f"server.{peer.index}={peer.host}:{ZK_QUORUM_PORT}:{ZK_ELECTION_PORT}"
            for peer in nodes("zookeeper", REPLICAS)
        )
        append(cfg, INFRA / "zookeeper" / "ensemble.cfg", SERVERS=servers)
        (data / "myid").write_text(f"{node.index}\n")
    if auth:
        password("zookeeper")  # the digest identity is the first client's: made up front
        append(cfg, INFRA / "zookeeper" / "auth.cfg")
    shutil.copy(INFRA / "zookeeper" / "logback.xml", conf / "logback.xml")
    heap = sizing(node).zookeeper_heap
    node.spawn(
        [
            java(),
            *sizing(node).jit,
            "-Xms64m",
            f"-Xmx{heap}",
            f"-Dzookeeper.log.dir={node.home / 'logs'}",
            "-cp",
            classpath(conf, node.lib / "*"),
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            str(cfg),
        ]
    )


def zookeeper_mode(node: Service) -> str:
    """``standalone``, ``leader`` or ``follower`` once the server serves requests, else ""
    ("ruok" answers imok even when the database failed to load; "srvr" reports the mode
    only once the server really serves)."""
    try:
        with socket.create_connection((node.host, ZK_PORT), timeout=1) as sock:
            sock.sendall(b"srvr")
            answer = sock.recv(4096).decode(errors="replace")
    except OSError:
        return ""
    mode = next((line for line in answer.splitlines() if line.startswith("Mode:")), "")
    return mode.partition(":")[2].strip()


def zookeeper_ready(node: Service) -> bool:
    return bool(zookeeper_mode(node))


# Kafka


def _kafka_java_opts(node: Service) -> list[str]:
    return [
        java(),
        *sizing(node).jit,
        "-Xms256m",
        f"-Xmx{sizing(node).kafka_heap}",
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        "-Djava.awt.headless=true",
        f"-Dkafka.logs.dir={node.home / 'logs'}",
        f"-Dlog4j2.configurationFile=file:{node.home / 'conf' / 'log4j2.properties'}",
        "-cp",
        str(node.lib / "*"),
    ]


def _kafka_properties(node: Service, auth: bool) -> str:
    """The node's server.properties (it holds the broker's own password when ``auth``)."""
    listeners = (INFRA / "kafka" / f"listeners-{AUTH if auth else PLAIN}.properties").read_text()
    if auth:
        tls = server_tls()
        listeners = listeners.replace("@KEYSTORE@", str(tls.keystore)).replace("@CA@", str(tls.ca))
        listeners = listeners.replace("@BROKER_PASSWORD@", password("kafka-broker"))
    peers = nodes("kafka", _count(node))
    voters = ",".join(f"{p.index or 1}@{p.host}:{CONTROLLER_PORT}" for p in peers)
    replicas = len(peers)
    values = {
        "LISTENERS": listeners,
        "DATA": node.home / "data",
        "KAFKA_PORT": KAFKA_PORT,
        "CONTROLLER_PORT": CONTROLLER_PORT,
        "HOST": node.host,
        "NODE_ID": node.index or 1,
        "VOTERS": voters,
        "REPLICAS": replicas,
        "MIN_ISR": min(2, replicas),
        "IO_THREADS": sizing(node).kafka_io_threads,
    }
    text = (INFRA / "kafka" / "server.properties").read_text()
    for key, value in values.items():  # the listeners first: they hold placeholders too
        text = text.replace(f"@{key}@", str(value))
    return text


def start_kafka(node: Service, auth: bool) -> None:
    conf, data = node.home / "conf", node.home / "data"
    conf.mkdir(parents=True, exist_ok=True)
    props = conf / "server.properties"
    private(props, _kafka_properties(node, auth))
    shutil.copy(INFRA / "kafka" / "log4j2.properties", conf / "log4j2.properties")
    scram_marker = node.home / "scram-users"
    if auth and (data / "meta.properties").exists() and not scram_marker.exists():
        # Formatted by the open variant: SCRAM users can only be added by a new format.
        print(f"{node.label:<12} switching to authentication: its data starts afresh", flush=True)
        shutil.rmtree(data)
    if not (data / "meta.properties").exists():
        _format_kafka(node, props, auth)
        if auth:
            scram_marker.touch()
    node.spawn([*_kafka_java_opts(node), "kafka.Kafka", str(props)])


def _kafka_cluster_id(node: Service) -> str:
    """The cluster id the node's storage is formatted with: one for the three nodes of the
    replicated stack (kept beside them), a new one for the one-node stack."""
    if not node.index:
        return new_cluster_id()
    kept = replicated_dir() / "kafka-cluster-id"
    if not kept.exists():
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.write_text(new_cluster_id())
    return kept.read_text().strip()


def new_cluster_id() -> str:
    """A random cluster id the storage tool's argument parser cannot mistake for an option.

    One base64 id in 64 starts with '-', which the parser reads as a flag; Kafka's own
    generator draws again in that case, and so does this one.
    """
    import base64
    import uuid

    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _format_kafka(node: Service, props: Any, auth: bool) -> None:
    conf = node.home / "conf"
    args = ["format", "-t", _kafka_cluster_id(node), "-c", str(props), "--ignore-formatted"]
    if auth:
        # The users' passwords go through an argument file (read by the java launcher), never
        # the command line other users of this host can list.
        users = "".join(
            f"--add-scram\nSCRAM-SHA-256=[name={user},password={password(secret)}]\n"
            for user, secret in ((USER, "kafka"), ("broker", "kafka-broker"))
        )
        argfile = conf / "scram-users.args"
        private(argfile, users)
        args.append(f"@{argfile}")
    try:
        done = subprocess.run(
            [*_kafka_java_opts(node), "kafka.tools.StorageTool", *args],
            capture_output=True,
            text=True,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    finally:
        (conf / "scram-users.args").unlink(missing_ok=True)
    if done.returncode != 0:
        raise StackError(f"formatting {node.label}'s storage failed:\n{done.stdout}{done.stderr}")


def kafka_ready(node: Service) -> bool:
    log = node.log
    return log.exists() and "Kafka Server started" in log.read_text(errors="replace")


# Cassandra


def cassandra_tokens(node: Service) -> list[int]:
    """The node's tokens in the replicated stack: ``_TOKENS_PER_NODE`` each, evenly spaced
    over the ring and interleaved between the nodes."""
    total = REPLICAS * _TOKENS_PER_NODE
    step = 2**64 // total
    return [-(2**63) + (k * REPLICAS + node.index - 1) * step for k in range(_TOKENS_PER_NODE)]


def start_cassandra(node: Service, auth: bool) -> None:
    node.spawn(_cassandra_command(node, _cassandra_conf(node, auth)))


def _cassandra_conf(node: Service, auth: bool) -> Any:
    """The node's configuration folder, written from ``infra/cassandra``."""
    conf = node.home / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    size = sizing(node)
    tokens = cassandra_tokens(node) if node.index else []
    seeds = nodes("cassandra", _count(node))[0].host
    render(
        INFRA / "cassandra" / "cassandra.yaml",
        conf / "cassandra.yaml",
        CQL_PORT=CQL_PORT,
        STORAGE_PORT=STORAGE_PORT,
        SSL_STORAGE_PORT=SSL_STORAGE_PORT,
        HOST=node.host,
        SEEDS=seeds,
        NUM_TOKENS=len(tokens) or 1,
        INITIAL_TOKEN=f"initial_token: {','.join(map(str, tokens))}" if tokens else "",
        HINTS="true" if node.index else "false",
        COMMITLOG_SEGMENT=size.commitlog_segment,
        MEMTABLE_HEAP=size.memtable_heap,
        MEMTABLE_OFFHEAP=size.memtable_offheap,
        CONCURRENT_READS=size.concurrent_reads,
        CONCURRENT_WRITES=size.concurrent_writes,
        KEY_CACHE=size.key_cache,
        FILE_CACHE=size.file_cache,
    )
    if auth:
        tls = server_tls()
        append(
            conf / "cassandra.yaml",
            INFRA / "cassandra" / "auth.yaml",
            KEYSTORE=tls.keystore,
            CA=tls.ca,
        )
    shutil.copy(INFRA / "cassandra" / "logback.xml", conf / "logback.xml")
    return conf


def _cassandra_command(node: Service, conf: Any) -> list[str]:
    options = (INFRA / "cassandra" / "jvm17-server.options").read_text().split("\n")
    # One option per line; "--add-exports X" is one option written with a space.
    jvm_flags = [line.strip().replace(" ", "=", 1) for line in options if line.startswith("-")]
    jamm = next(iter(sorted(node.lib.glob("jamm-*.jar"))), None)
    if jamm is None:
        raise StackError(f"jamm agent jar missing from {node.lib}; delete the folder and retry")
    heap = sizing(node).cassandra_heap
    # Neither -Dcassandra.test.flush_local_schema_changes=false nor -Dcassandra.unsafesystem:
    # with either, a node killed with -9 came back without the keyspaces made before (the
    # schema reached neither its sstables nor its commit log). Without them a migration
    # takes about 1.5 s longer (5.1 against 6.3-7.8 s for 21 steps on one node).
    return [
        java(),
        *sizing(node).jit,
        f"-Xms{heap}",
        f"-Xmx{heap}",
        "-Xss256k",
        "-XX:+UseG1GC",
        *(["-XX:MaxDirectMemorySize=256m"] if node.index else []),
        "-da:net.openhft...",
        "-Djava.net.preferIPv4Stack=true",
        f"-javaagent:{jamm}",
        *jvm_flags,
        f"-Dcassandra.config=file://{conf / 'cassandra.yaml'}",
        f"-Dcassandra.storagedir={node.home / 'data'}",
        f"-Dcassandra.logdir={node.home / 'logs'}",
        f"-Dlogback.configurationFile={conf / 'logback.xml'}",
        "-Dcassandra-foreground=yes",
        "-Dcassandra.skip_wait_for_gossip_to_settle=0",
        "-Dcassandra.ring_delay_ms=1000",
        "-Dcassandra.superuser_setup_delay_ms=0",
        "-cp",
        classpath(conf, node.lib / "*"),
        "org.apache.cassandra.service.CassandraDaemon",
    ]


def cassandra_ready(node: Service) -> bool:
    # The native transport is bound last in start-up: a CQL port that accepts means ready.
    log = node.log
    if not (log.exists() and "Startup complete" in log.read_text(errors="replace")):
        return False
    try:
        socket.create_connection((node.host, CQL_PORT), timeout=1).close()
    except OSError:
        return False
    return True


# The replicated stack's own superuser (the built-in one's row was written at replication
# factor 1, and a superuser may not rewrite its own status).
STACK_ADMIN = "stack_admin"


def cassandra_roles(count: int = 1) -> None:
    """Give the authenticated Cassandra its ``tikk`` role (all permissions on all keyspaces)
    and replace the built-in superuser's well-known password with a generated one; in the
    replicated stack first keep the logins on every node (``system_auth`` at replication
    factor 3, and a superuser of its own written there whole), so that a login outlives the
    loss of a node. Idempotent: run at every start."""
    # The expected refusals (trying which login works) are no news on the terminal.
    logging.getLogger("cassandra").setLevel(logging.CRITICAL)
    admin = _cassandra_admin(password("cassandra-admin"), count)
    try:
        if count > 1:
            admin = _logins_on_every_node(admin, count)
        admin.execute(
            f"CREATE ROLE IF NOT EXISTS {USER} WITH LOGIN = true AND PASSWORD = %s",
            (password("cassandra"),),
        )
        admin.execute(f"GRANT ALL PERMISSIONS ON ALL KEYSPACES TO {USER}")
    finally:
        admin.cluster.shutdown()


def _roles_once_the_ring_agrees(count: int, within_s: float = 60.0) -> None:
    """``cassandra_roles``, tried again while a node that just started (or started again)
    does not see the others up yet: until gossip agrees, its writes at ``LOCAL_QUORUM`` are
    Unavailable although every node answers."""
    from cassandra import Unavailable
    from cassandra.cluster import NoHostAvailable

    deadline = time.monotonic() + within_s
    while True:
        try:
            cassandra_roles(count)
            return
        except NoHostAvailable as exc:
            errors = list(exc.errors.values())
            if time.monotonic() > deadline or not all(isinstance(e, Unavailable) for e in errors):
                raise
            print("cassandra    the ring does not agree yet; setting the logins again", flush=True)
            time.sleep(2.0)


def _logins_on_every_node(admin: Any, count: int) -> Any:
    """``system_auth`` on every node, and a session of ``STACK_ADMIN``, made there if need
    be; the built-in superuser may no longer log in."""
    admin.execute(
        "ALTER KEYSPACE system_auth WITH replication = "
        f"{{'class': 'SimpleStrategy', 'replication_factor': {count}}}"
    )
    admin.execute(
        f"CREATE ROLE IF NOT EXISTS {STACK_ADMIN} WITH SUPERUSER = true AND LOGIN = true "
        "AND PASSWORD = %s",
        (password("cassandra-admin"),),
    )
    admin.cluster.shutdown()
    own = _cassandra_session(STACK_ADMIN, password("cassandra-admin"), count)
    own.execute("ALTER ROLE cassandra WITH LOGIN = false")
    return own


def _cassandra_admin(admin_password: str, count: int) -> Any:
    """A session of a superuser: the replicated stack's own, or the built-in one, with
    ``admin_password`` set on a fresh node."""
    from cassandra.cluster import NoHostAvailable

    logins = [(STACK_ADMIN, admin_password)] if count > 1 else []
    logins.append(("cassandra", admin_password))
    deadline = time.monotonic() + 60
    while True:  # a fresh node creates its default superuser a moment after it serves
        for user, secret in logins:
            try:
                return _cassandra_session(user, secret, count)
            except NoHostAvailable:
                pass
        try:
            admin = _cassandra_session("cassandra", "cassandra", count)  # the documented default
            admin.execute("ALTER ROLE cassandra WITH PASSWORD = %s", (admin_password,))
            return admin
        except NoHostAvailable as exc:
            if time.monotonic() > deadline:
                raise StackError(f"cassandra: no superuser to set up roles with: {exc}") from None
            time.sleep(1)


def _cassandra_session(user: str, secret: str, count: int) -> Any:
    import ssl

    from cassandra.auth import PlainTextAuthProvider
    from cassandra.cluster import Cluster

    ssl_context = ssl.create_default_context(cafile=str(tls_ca()))
    hosts = [n.host for n in nodes("cassandra", count)]
    cluster = Cluster(
        hosts,
        port=CQL_PORT,
        protocol_version=5,
        auth_provider=PlainTextAuthProvider(user, secret),
        ssl_context=ssl_context,
    )
    return cluster.connect()


# The stack


_STARTERS: dict[str, tuple[Callable[[Service, bool], None], Callable[[Service], bool], int]] = {
    "zookeeper": (start_zookeeper, zookeeper_ready, 60),
    "kafka": (start_kafka, kafka_ready, 90),
    "cassandra": (start_cassandra, cassandra_ready, 180),
}


def up(
    names: list[str] | None = None, *, fresh: bool = False, plain: bool = False, count: int = 1
) -> None:
    """Start the services (all by default; authenticated unless ``plain``) with ``count``
    nodes each (1 or ``REPLICAS``) and wait until each node answers. A node running in the
    other variant is restarted; one running already is left as it is. The nodes of a service
    start together (a replicated Cassandra's three must, to agree on the ring)."""
    unknown = set(names or []) - set(SERVICE_NAMES)
    if unknown:
        raise StackError(f"unknown service(s): {', '.join(sorted(unknown))}")
    kind = PLAIN if plain else AUTH
    switching = variant(count) != kind
    for name in SERVICE_NAMES:
        nodes(name, 1)[0].fetch()
    topology_dir(count).mkdir(parents=True, exist_ok=True)
    for name in [n for n in SERVICE_NAMES if names is None or n in names]:
        start, ready, timeout_s = _STARTERS[name]
        began = time.monotonic()
        started = []
        for node in nodes(name, count):
            if not fresh and not switching and node.pid() is not None and ready(node):
                print(f"{node.label:<12} already running (pid {node.pid()}), log {node.log}")
                continue
            node.stop()
            if fresh:
                shutil.rmtree(node.home, ignore_errors=True)
            start(node, not plain)
            started.append(node)
        for node in started:  # the first, Cassandra's seed, first
            _wait_or_again(node, ready, timeout_s, not plain)
        if name == "cassandra" and not plain:
            _roles_once_the_ring_agrees(count)
        for node in started:
            took = time.monotonic() - began
            print(
                f"{node.label:<12} up in {took:5.1f}s (pid {node.pid()}), log {node.log}",
                flush=True,
            )
    (topology_dir(count) / "variant").write_text(kind + "\n")


def start_node(node: Service) -> None:
    """Start one node again (after a crash, say) in the variant its stack runs in, and wait
    until it answers. One that does not answer in time is killed before ``StackError`` is
    raised: left running, it would hold the node's ports against the next start, and its pid
    file would name that start's process, not it, so no ``down`` would stop it."""
    start, ready, timeout_s = _STARTERS[node.name]
    start(node, variant(_count(node)) == AUTH)
    try:
        _wait(node, ready, timeout_s)
    except StackError:
        node.kill()
        raise


def _wait_or_again(
    node: Service, ready: Callable[[Service], bool], timeout_s: float, auth: bool
) -> None:
    """Wait until ``node`` answers. A Cassandra node that was part of the ring before asks
    the seed for it as it starts (its shadow round) and exits when the seed does not answer
    within a few seconds: the three start together, so on a busy machine the seed may come
    too late. Such a node is started once more, after the seed answered."""
    try:
        _wait(node, ready, timeout_s)
    except StackError:
        if node.name != "cassandra" or node.index == 1 or node.pid() is not None:
            raise
        print(f"{node.label:<12} found no seed answering yet; starting it again", flush=True)
        seed = nodes(node.name, _count(node))[0]
        if seed.pid() is not None:
            _wait(seed, ready, timeout_s)
        start, _, _ = _STARTERS[node.name]
        start(node, auth)
        _wait(node, ready, timeout_s)


def _wait(node: Service, ready: Callable[[Service], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ready(node):
            return
        if node.pid() is None:
            raise StackError(f"{node.label} exited during start-up:\n{node.tail()}")
        time.sleep(0.5)
    raise StackError(f"{node.label} not ready after {timeout_s}s:\n{node.tail()}")


def down(count: int | None = None) -> None:
    """Stop every node ``up`` started: of both stacks, or of the one of ``count`` nodes."""
    for each in (1, REPLICAS) if count is None else (count,):
        for name in reversed(SERVICE_NAMES):
            for node in nodes(name, each):
                if node.pid() is not None:
                    node.stop()
                    print(f"{node.label:<12} stopped")


def status(count: int = 1) -> bool:
    """Print each node's health (for ZooKeeper its role); whether all are up."""
    all_up = True
    print(f"variant      {variant(count)}   ({stack_dir() if count == 1 else replicated_dir()})")
    for name in SERVICE_NAMES:
        _, ready, _ = _STARTERS[name]
        for node in nodes(name, count):
            pid = node.pid()
            state = "up" if pid and ready(node) else ("starting" if pid else "down")
            if state == "up" and name == "zookeeper":
                state = zookeeper_mode(node) or state
            all_up &= state not in ("starting", "down")
            where = f"{node.host}"
            print(
                f"{node.label:<12} {state:<10} {where:<11} "
                f"{('pid ' + str(pid)) if pid else '':<11} log {node.log}"
            )
    return all_up
