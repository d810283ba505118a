"""A real ``tikk dev`` with its console (``Dev``), and one browser's view of it over plain
HTTP (``ConsoleHttp``): its cookies, the CSRF token of the page it read last, and whatever
``Host`` and ``Origin`` it chooses to send (a hostile page's included), with no redirect
followed."""

from __future__ import annotations

import http.client
import re
import ssl
from dataclasses import dataclass
from http.cookies import SimpleCookie
from pathlib import Path
from urllib.parse import urlencode, urlsplit

from tests.e2e.conftest import Process
from tikk.client import Client, Transport

_CSRF = re.compile(r'name="csrf" value="([^"]+)"')
_LISTENING = re.compile(r"listening on ([\d.]+:\d+)")
_CONSOLE = re.compile(r"metrics (https?://[\d.]+:\d+/)metrics")


class Dev:
    """A ``tikk dev`` with its console, and a client of it."""

    def __init__(self, data_dir: Path, *extra: str) -> None:
        self.log = data_dir / "executions.jsonl"
        self.process = Process(
            [
                "dev",
                "--data-dir",
                str(data_dir),
                "--listen",
                "127.0.0.1:0",
                "--http",
                "127.0.0.1:0",
                *extra,
            ],
            {"TIKK_E2E_LOG": str(self.log), "PYTHONUNBUFFERED": "1"},
        )
        self.address = self.process.wait_for(_LISTENING, timeout=60).group(1)
        self.console = self.process.wait_for(_CONSOLE).group(1) + "console/"

    @property
    def base(self) -> str:
        """``scheme://host:port`` of the console's listener."""
        return self.console.removesuffix("/console/")

    def client(self, namespace: str, token: str = "") -> Client:
        transport = Transport(token=token) if token else None
        return Client(self.address, namespace=namespace, transport=transport)


@dataclass(frozen=True)
class Answer:
    status: int
    headers: http.client.HTTPMessage
    body: str

    @property
    def location(self) -> str:
        return self.headers.get("Location", "")

    def header(self, name: str) -> str:
        return self.headers.get(name, "")


class ConsoleHttp:
    """Requests to the console at ``base`` (``http://127.0.0.1:PORT``), keeping cookies."""

    def __init__(self, base: str, *, context: ssl.SSLContext | None = None) -> None:
        parts = urlsplit(base)
        self.scheme, self.netloc = parts.scheme, parts.netloc
        self._context = context
        self.cookies: dict[str, str] = {}
        self.csrf = ""

    def request(
        self,
        method: str,
        path: str,
        form: dict[str, str] | list[tuple[str, str]] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Answer:
        if self.scheme == "https":
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                self.netloc, timeout=30, context=self._context
            )
        else:
            conn = http.client.HTTPConnection(self.netloc, timeout=30)
        sent = {"Host": self.netloc, **(headers or {})}
        if self.cookies:
            sent["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        body = None
        if form is not None:
            body = urlencode(form)
            sent["Content-Type"] = "application/x-www-form-urlencoded"
        try:
            conn.request(method, path, body=body, headers=sent)
            response = conn.getresponse()
            answer = Answer(response.status, response.headers, response.read().decode())
        finally:
            conn.close()
        for line in answer.headers.get_all("Set-Cookie") or []:
            for name, morsel in SimpleCookie(line).items():
                if morsel.value and morsel["max-age"] != "0":
                    self.cookies[name] = morsel.value
                else:
                    self.cookies.pop(name, None)
        if found := _CSRF.search(answer.body):
            self.csrf = found.group(1)
        return answer

    def get(self, path: str, **headers: str) -> Answer:
        return self.request("GET", path, headers=headers)

    def post(self, path: str, form: dict[str, str] | None = None, **headers: str) -> Answer:
        """A POST carrying the CSRF token of the last page read (unless ``form`` has one)."""
        return self.request("POST", path, {"csrf": self.csrf, **(form or {})}, headers)

    def login(self, token: str) -> Answer:
        """The login form read, then sent with ``token``."""
        self.get("/console/login")
        return self.post("/console/login", {"token": token})
