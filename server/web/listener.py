"""The HTTP listener of a tikk process (aiohttp): where Prometheus scrapes ``/metrics`` and
probes ask ``/healthz`` (the process is alive) and ``/readyz`` (it can do its work: its
backends answer, ``server.web.readiness``).

A server serves it on ``--http HOST:PORT`` (``tikk dev`` by default), over the same TLS as its
gRPC port and under the same exposure rule (``server.transport_security``); dispatchers and
workers serve ``/metrics`` and the probes alone on ``--metrics HOST:PORT``. Under
``--processes N`` only the first member listens, and its ``/metrics`` adds up every member's
(``tikk.metric_sinks``).

With ``--auth`` a scrape presents a token as every gRPC call does (``Authorization: Bearer``,
any role): metric labels name queues and handlers. The probes need none (a kubelet has no
token): they say only whether each backend answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web

from server.auth.authenticator import CredentialView
from server.listen_address import address_taken
from server.web.readiness import Readiness
from tikk.errors import BackendUnavailable, Unauthenticated
from tikk.metric_sinks import PrometheusMetrics
from tikk.settings import Tls

log = logging.getLogger("tikk.server")

_Route = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class HttpSite:
    """A started listener: its port, and how to stop it (with the work it runs beside)."""

    runner: web.AppRunner
    port: int
    scheme: str
    background: list[asyncio.Task[None]] = field(default_factory=list)

    def url(self, host: str) -> str:
        shown = "127.0.0.1" if host in {"", "0.0.0.0", "::"} else host
        return f"{self.scheme}://{shown}:{self.port}/"

    async def stop(self) -> None:
        for task in self.background:
            task.cancel()
        await asyncio.gather(*self.background, return_exceptions=True)
        await self.runner.cleanup()


async def start_http(address: str, app: web.Application, tls: Tls | None = None) -> HttpSite:
    """Serve ``app`` on ``address`` (``HOST:PORT``, port 0: any), with TLS if given.
    Raises ``FailedPrecondition`` naming the address when it cannot be bound."""
    host, _, port = address.rpartition(":")
    host = host[1:-1] if host.startswith("[") else host
    # A page or a scrape in flight gets a few seconds to finish: a stopping server must not
    # wait the default minute for a browser's request.
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=5.0)
    await runner.setup()
    context = _tls_context(tls) if tls is not None else None
    site = web.TCPSite(runner, host or None, int(port), ssl_context=context, reuse_address=True)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise address_taken(address, str(exc)) from None
    bound = runner.addresses[0][1]
    return HttpSite(runner, bound, "https" if context else "http")


def _tls_context(tls: Tls) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(tls.cert_file, tls.key_file)
    return context


def metrics_app(
    metrics: PrometheusMetrics, readiness: Readiness, view: CredentialView | None = None
) -> web.Application:
    """``/metrics``, ``/healthz`` and ``/readyz`` (200 or 503, with each backend's state as
    JSON, from ``readiness``); with ``view``, a scrape needs a valid token. A server adds the
    console's routes (``server.web.console``)."""
    app = web.Application(client_max_size=64 * 1024)

    async def scrape(request: web.Request) -> web.Response:
        body, content_type = metrics.exposition()
        response = web.Response(body=body)
        response.headers["Content-Type"] = content_type
        return response

    async def healthy(request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def ready(request: web.Request) -> web.Response:
        report = await readiness.report()
        return web.json_response(dict(report.states), status=200 if report.ready else 503)

    app.router.add_get("/metrics", scrape if view is None else _token_required(view, scrape))
    app.router.add_get("/healthz", healthy)
    app.router.add_get("/readyz", ready)
    return app


def _token_required(view: CredentialView, handler: _Route) -> _Route:
    async def checked(request: web.Request) -> web.StreamResponse:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        try:
            if scheme.lower() != "bearer" or not token.strip():
                raise Unauthenticated("send Authorization: Bearer <token>")
            await view.authenticate(token.strip(), None)
        except Unauthenticated as exc:
            raise web.HTTPUnauthorized(
                text=f"{exc}\n", headers={"WWW-Authenticate": 'Bearer realm="tikk"'}
            ) from None
        except BackendUnavailable as exc:
            raise web.HTTPServiceUnavailable(text=f"{exc}\n") from None
        return await handler(request)

    return checked


@contextlib.asynccontextmanager
async def metrics_listener(
    address: str, metrics: PrometheusMetrics | None, readiness: Readiness
) -> AsyncIterator[None]:
    """``--metrics HOST:PORT`` of a dispatcher or worker: ``/metrics``, ``/healthz`` and
    ``/readyz`` (judged by ``readiness``, whose checks the process sets once its backends
    are open) while the block runs (nothing when ``metrics`` is None). Its URL is printed
    on stdout."""
    if metrics is None:
        yield
        return
    site = await start_http(address, metrics_app(metrics, readiness))
    print(f"  metrics {site.url(address.rpartition(':')[0])}metrics", flush=True)
    try:
        yield
    finally:
        await site.stop()
