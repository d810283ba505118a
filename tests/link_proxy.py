"""A TCP relay on loopback in front of a real service, to drop its links (a network failure)
or to make it reachable only from a given moment on."""

from __future__ import annotations

import contextlib
import socket
import threading


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := src.recv(65536):
            dst.sendall(data)
    _close(src)
    _close(dst)


class LinkProxy:
    """A TCP relay on loopback in front of the real ZooKeeper. ``cut()`` drops every relayed
    connection and refuses new ones, like a network failure; ``restore()`` heals it."""

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.rpartition(":")
        self._upstream = (host, int(port))
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.05)  # so that the accept loop notices close()
        self.address = f"127.0.0.1:{self._server.getsockname()[1]}"
        self._open, self._closed = threading.Event(), threading.Event()
        self._open.set()
        self._lock = threading.Lock()
        self._links: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed
            if not self._open.is_set():
                _close(conn)
                continue
            try:
                upstream = socket.create_connection(self._upstream)
            except OSError:
                _close(conn)
                continue
            with self._lock:
                self._links += [conn, upstream]
            for src, dst in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=_pump, args=(src, dst), daemon=True).start()

    def cut(self) -> None:
        self._open.clear()
        with self._lock:
            links, self._links = self._links, []
        for sock in links:
            _close(sock)

    def restore(self) -> None:
        self._open.set()

    def close(self) -> None:
        self.cut()
        self._closed.set()
        self._server.close()
