"""Several real tikk servers behind no balancer: one embedded data directory served by ``tikk
server`` processes on ports of their own, beside one ``tikk dispatcher``, which is how the
embedded default runs redundantly (``tikk server`` shares the SQLite files, and only the
dispatcher holds the directory's ``owner.lock``). Clients are given every server's address
(``Cluster.target``); tests kill, pause and restart single servers under them.
"""

from __future__ import annotations

import re
import signal
import urllib.request
from pathlib import Path

from tests.e2e.conftest import Process
from tests.worker_server import free_port

_LISTENING = re.compile(r"listening on")
_METRICS_URL = re.compile(r"metrics (http://\S+/metrics)")
_DISPATCHING = re.compile(r"tikk dispatcher running")
_SHARDS = ("--shards", "16")


class Cluster:
    """``servers`` API servers on ``data_dir``, and a dispatcher unless ``dispatcher`` is
    False (tests of calls alone need none). ``http``: each server also serves ``/metrics``
    (``metric``). ``env`` goes to every process."""

    def __init__(
        self,
        data_dir: Path,
        servers: int = 2,
        *,
        dispatcher: bool = True,
        http: bool = False,
        env: dict[str, str] | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.env = {"PYTHONUNBUFFERED": "1", **(env or {})}
        self.addresses = [f"127.0.0.1:{free_port()}" for _ in range(servers)]
        self.servers: list[Process | None] = [None] * servers
        self.metrics_urls = [""] * servers
        self.dispatcher: Process | None = None
        self._http, self._dispatches = http, dispatcher
        self._retired: list[Process] = []

    @property
    def target(self) -> str:
        """Every server, as a client is given them: ``host:port,host:port``."""
        return ",".join(self.addresses)

    def start(self) -> None:
        """The dispatcher, then every server; returns once each serves."""
        if self._dispatches:
            args = ["dispatcher", "--data-dir", str(self.data_dir), *_SHARDS]
            self.dispatcher = Process(args, self.env)
            self.dispatcher.wait_for(_DISPATCHING, timeout=60)
        for index in range(len(self.addresses)):
            self.start_server(index)

    def start_server(self, index: int) -> None:
        """Start server ``index`` on its port (again, after a kill) and wait until it serves."""
        args = ["server", "--data-dir", str(self.data_dir), "--listen", self.addresses[index]]
        args += ["--http", "127.0.0.1:0" if self._http else "off", *_SHARDS]
        server = Process(args, self.env)
        self.servers[index] = server
        server.wait_for(_LISTENING, timeout=60)
        if self._http:
            self.metrics_urls[index] = server.wait_for(_METRICS_URL, timeout=10).group(1)

    def server(self, index: int) -> Process:
        server = self.servers[index]
        assert server is not None, f"server {index} is not running"
        return server

    def kill9(self, index: int) -> None:
        """``kill -9`` server ``index`` (and reap it)."""
        server = self.server(index)
        server.kill9()
        self._retired.append(server)
        self.servers[index] = None

    def pause(self, index: int) -> None:
        """SIGSTOP server ``index``: its connections stay open and it answers nothing, not
        even a new connection's HTTP/2 handshake, so a client that connects meanwhile has it
        CONNECTING and sends it nothing."""
        self.server(index).proc.send_signal(signal.SIGSTOP)

    def resume(self, index: int) -> None:
        """SIGCONT server ``index`` after ``pause``."""
        self.server(index).proc.send_signal(signal.SIGCONT)

    def metric(self, index: int, name: str) -> float:
        """The sum of every sample of metric ``name`` (Prometheus' name) on server ``index``."""
        with urllib.request.urlopen(self.metrics_urls[index], timeout=10) as answer:
            text = answer.read().decode()
        samples = (line.split() for line in text.splitlines() if line.startswith(name))
        return sum(float(fields[-1]) for fields in samples if fields[0].partition("{")[0] == name)

    def failover_env(self) -> dict[str, str]:
        """What the Go and TypeScript failover tests are given: the servers' addresses
        (``TIKK_FAILOVER_ADDR``) and their processes (``TIKK_FAILOVER_PIDS``), which they
        pause and kill themselves."""
        pids = ",".join(str(self.server(i).proc.pid) for i in range(len(self.addresses)))
        return {"TIKK_FAILOVER_ADDR": self.target, "TIKK_FAILOVER_PIDS": pids}

    def output(self) -> str:
        """What every process printed, for a failure's message."""
        processes = [self.dispatcher, *self.servers, *self._retired]
        return "\n\n".join(f"{p.args}:\n{p.output()}" for p in processes if p is not None)

    def close(self) -> None:
        for server in self.servers:
            if server is not None:
                server.proc.send_signal(signal.SIGCONT)  # a paused one would not stop
                server.stop()
        if self.dispatcher is not None:
            self.dispatcher.stop()
