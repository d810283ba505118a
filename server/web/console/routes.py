"""The console's routes (aiohttp): each reads or acts through ``server.ops``, the same
objects the gRPC services call, so every rule of the API (quotas, the cancel fence, late
writes) holds here too.

Every request goes through ``_session``: it finds the browser's session (opening one without
``--auth``; sending to the login page with it), re-checks its credential, refuses a POST whose
CSRF token does not match, checks the login may call the RPC the route stands for on the
route's namespace (``access``: the API's own rule), and turns a ``TikkError`` into its HTTP
status on a page that says what went wrong. Every read is bounded: a page of tasks or runs,
one task, the queues' backlog, the metrics the server already holds. Which hosts and origins
the listener answers, and the headers of every answer, are ``server.web.browser_guard``'s.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import quote

from aiohttp import web

from server.app import Operations
from server.web.console import access, pages
from server.web.console.bulk_routes import BulkPages
from server.web.console.dead_letter_pages import dead_letters_path
from server.web.console.dead_letter_routes import DeadLetterPages
from server.web.console.responses import (
    ConsolePage,
    clamped_field,
    error_response,
    html_page,
    redirect,
)
from server.web.console.schedule_routes import SchedulePages
from server.web.console.sessions import COOKIE, LOGIN_COOKIE, ConsoleSessions, Session, Viewer
from server.web.console.stats import MetricWindows
from tikk.clock import Clock
from tikk.errors import BackendUnavailable, NotFound, PermissionDenied, TikkError, Unauthenticated
from tikk.model import RunQuery, RunStatus

STATIC = Path(__file__).with_name("static")
_PAGE_SIZE = 50
_HOUR_MS = 3_600_000
_READ_ON = 4


class Console:
    """The console of one server process, over its operations."""

    def __init__(
        self, ops: Operations, sessions: ConsoleSessions, windows: MetricWindows, clock: Clock,
        *, secure_cookie: bool,
    ) -> None:  # fmt: skip
        self._ops = ops
        self._sessions = sessions
        self._windows = windows
        self._clock = clock
        self._secure = secure_cookie

    def add_routes(self, app: web.Application) -> None:
        r = app.router
        r.add_get("/", self._home)
        r.add_get("/console/login", self._login_form)
        r.add_post("/console/login", self._login)
        r.add_post("/console/logout", self._session(self._logout))
        r.add_static("/console/static", STATIC)
        for path, page in [
            ("/console/", self._overview), ("/console/api/overview", self._overview_data),
            ("/console/tasks", self._find_task), ("/console/ns/{ns}/tasks/{task_id}", self._task),
            ("/console/ns/{ns}/runs", self._runs),
            ("/console/ns/{ns}/upcoming", self._upcoming),
        ]:  # fmt: skip
            r.add_get(path, self._session(page))
        r.add_post("/console/ns/{ns}/tasks/{task_id}/{verb}", self._session(self._act))
        SchedulePages(self._ops, self._clock).add_routes(app, self._session)
        DeadLetterPages(self._ops, self._clock).add_routes(app, self._session)
        BulkPages(self._ops, self._clock).add_routes(app, self._session)

    def _session(self, page: ConsolePage) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handler(request: web.Request) -> web.StreamResponse:
            session = self._sessions.find(request.cookies.get(COOKIE))
            if session is None and self._sessions.auth:
                return redirect("/console/login")
            fresh = session is None
            session = session or self._sessions.open()
            viewer: Viewer | None = None
            try:
                viewer = await self._sessions.viewer(session)
                if request.method == "POST":
                    await self._check_csrf(request, session)
                await self._authorize(request, viewer)
                response = await page(request, viewer)
            except Unauthenticated:
                self._sessions.close(session.session_id)
                return redirect("/console/login")
            except TikkError as exc:
                response = error_response(exc, viewer)
            if fresh:
                self._set_cookie(response, session)
            return response

        return handler

    async def _authorize(self, request: web.Request, viewer: Viewer) -> None:
        """``PermissionDenied`` unless the viewer may call the RPC this route (and its verb)
        stands for, on the route's namespace; ``NotFound`` for a verb the route has not."""
        verb = request.match_info.get("verb", "")
        if not verb and "verb" in request.query:
            verb = request.query["verb"]
        elif not verb and request.method == "POST":
            verb = str((await request.post()).get("verb", ""))
        resource = request.match_info.route.resource
        path = resource.canonical if resource is not None else request.path
        rpc = access.rpc_of(request.method, path, verb)
        if viewer.credential is not None:
            access.check(viewer.credential, rpc, request.match_info.get("ns", ""))

    async def _check_csrf(self, request: web.Request, session: Session) -> None:
        form = await request.post()
        if not self._sessions.csrf_matches(session, str(form.get("csrf", ""))):
            raise PermissionDenied("the form is stale or came from another site: reload it")

    def _set_cookie(self, response: web.StreamResponse, session: Session) -> None:
        response.set_cookie(
            COOKIE, session.session_id, httponly=True, samesite="Strict", secure=self._secure,
            path="/",
        )  # fmt: skip

    async def _home(self, request: web.Request) -> web.StreamResponse:
        return redirect("/console/")

    async def _login_form(self, request: web.Request) -> web.StreamResponse:
        if not self._sessions.auth:
            return redirect("/console/")
        return self._login_page()

    def _login_page(self, problem: str = "", status: int = 200) -> web.Response:
        """The login form, with a fresh form token and its cookie."""
        nonce, token = self._sessions.login_form()
        response = html_page(pages.login_page(token, problem), status)
        response.set_cookie(
            LOGIN_COOKIE,
            nonce,
            httponly=True,
            samesite="Strict",
            secure=self._secure,
            path="/console/login",
            max_age=3600,
        )
        return response

    async def _login(self, request: web.Request) -> web.StreamResponse:
        form = await request.post()
        nonce = request.cookies.get(LOGIN_COOKIE, "")
        if not self._sessions.login_form_matches(nonce, str(form.get("csrf", ""))):
            return self._login_page(
                "The form is stale or came from another site: sign in again.", 403
            )
        try:
            session = await self._sessions.login(str(form.get("token", "")).strip())
        except Unauthenticated:
            return self._login_page("That token is not valid.", 401)
        except PermissionDenied as exc:
            return self._login_page(str(exc), 403)
        except BackendUnavailable as exc:
            return self._login_page(str(exc), 503)
        response = redirect("/console/")
        response.del_cookie(LOGIN_COOKIE, path="/console/login")
        self._set_cookie(response, session)
        return response

    async def _logout(self, request: web.Request, viewer: Viewer) -> web.StreamResponse:
        self._sessions.close(request.cookies.get(COOKIE, ""))
        response = redirect("/console/login")
        response.del_cookie(COOKIE, path="/")
        return response

    async def _queue_rows(self, now_ms: int) -> list[list[str]]:
        views = (await self._ops.queues.queues(1_000, "")).items
        last5, last60 = self._windows.queues(5 * 60_000), self._windows.queues(_HOUR_MS)
        return pages.queue_rows(views, last5, last60, now_ms)

    async def _overview(self, request: web.Request, viewer: Viewer) -> web.StreamResponse:
        """Every queue, for a login that may list them (``ListQueues``: read on every
        namespace); another sees the namespaces it may read, since queues are shared."""
        now = self._clock.now_ms()
        if not viewer.may(access.LIST_QUEUES, ""):
            return html_page(pages.namespaces_page(viewer))
        return html_page(pages.overview_page(viewer, await self._queue_rows(now), now))

    async def _overview_data(self, request: web.Request, viewer: Viewer) -> web.StreamResponse:
        """What the overview's script redraws every few seconds."""
        now = self._clock.now_ms()
        rows = await self._queue_rows(now)
        chart = [{"at": at, "p50": p50, "p99": p99} for at, p50, p99 in self._windows.chart()]
        return web.json_response({"now_ms": now, "rows": rows, "chart": chart})

    async def _find_task(self, request: web.Request, viewer: Viewer) -> web.StreamResponse:
        namespace = request.query.get("namespace", "default")
        task_id = request.query.get("task_id", "").strip()
        if task_id:
            return redirect(pages.task_path(namespace, task_id))
        return html_page(pages.find_task_page(viewer, namespace))

    async def _task(self, request: web.Request, viewer: Viewer) -> web.StreamResponse:
        namespace, task_id = request.match_info["ns"], request.match_info["task_id"]
        task = await self._ops.tasks.get(namespace, task_id)
        runs = await self._ops.history.runs_of_task(namespace, task_id, _PAGE_SIZE, "")
        return html_page(pages.task_page(viewer, task, runs))

    async def _act(self, request: web.Request, viewer: Viewer) -> web.StreamResponse:
        namespace, task_id = request.match_info["ns"], request.match_info["task_id"]
        verb = request.match_info["verb"]
        if verb in ("cancel", "stop"):  # stop: a running task too (its worker is told)
            await self._ops.tasks.cancel(namespace, task_id, stop_running=verb == "stop")
        elif verb == "redrive":
            await self._ops.tasks.redrive(namespace, task_id)
        elif verb == "purge":
            await self._ops.tasks.purge(namespace, task_id)
            return redirect(f"{dead_letters_path(namespace)}?notice={quote(task_id + ' purged')}")
        else:
            raise NotFound(f"no action {verb!r} on a task (cancel, stop, redrive, purge)")
        return redirect(pages.task_path(namespace, task_id))

    async def _upcoming(self, request: web.Request, viewer: Viewer) -> web.StreamResponse:
        namespace = request.match_info["ns"]
        minutes = clamped_field(request.query.get("minutes"), 1, 1_440, 60)
        counts = await self._ops.upcoming.coming(namespace, minutes)
        return html_page(pages.upcoming_page(viewer, namespace, counts, minutes))

    async def _runs(self, request: web.Request, viewer: Viewer) -> web.StreamResponse:
        namespace = request.match_info["ns"]
        q = request.query
        queue, status, hours = (
            q.get("queue", ""),
            q.get("status", ""),
            clamped_field(q.get("hours"), 1, 720, 24),
        )
        page = None
        if queue:
            now = self._clock.now_ms()
            chosen = RunStatus[status.upper()] if status.upper() in RunStatus.__members__ else None
            query = RunQuery(namespace, queue, now - hours * _HOUR_MS, now + 1, chosen)
            page = await self._ops.history.runs(query, _PAGE_SIZE, q.get("token", ""))
            # A read passes over a bounded number of runs: one rare among the newest comes
            # back empty with a token. Read on a few times before showing an empty page.
            for _ in range(_READ_ON):
                if page.items or not page.next_token:
                    break
                page = await self._ops.history.runs(query, _PAGE_SIZE, page.next_token)
        return html_page(pages.runs_page(viewer, namespace, queue, status, hours=hours, page=page))
