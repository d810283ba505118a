"""The console's schedule routes: reads and actions through ``ScheduleOps`` and
``HistoryOps``, as the gRPC ScheduleService makes them."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from aiohttp import web

from server.app import Operations
from server.web.console import schedule_pages
from server.web.console.responses import SessionWrap, html_page, redirect
from server.web.console.sessions import Viewer
from tikk.clock import Clock
from tikk.errors import InvalidArgument, NotFound
from tikk.schedules.model import OccurrenceQuery

_PAGE_SIZE = 50
_NEXT = 10
_LEDGER_MS = 7 * 24 * 3_600_000


class SchedulePages:
    """A namespace's schedules, one schedule, and its pause, resume, trigger and backfill."""

    def __init__(self, ops: Operations, clock: Clock) -> None:
        self._ops = ops
        self._clock = clock

    def add_routes(self, app: web.Application, session: SessionWrap) -> None:
        base = "/console/ns/{ns}/schedules"
        app.router.add_get(base, session(self._list))
        app.router.add_get(base + "/{sid}", session(self._one))
        app.router.add_post(base + "/{sid}/{verb}", session(self._act))

    async def _list(self, request: web.Request, viewer: Viewer) -> web.StreamResponse:
        namespace = request.match_info["ns"]
        token = request.query.get("token", "")
        page = await self._ops.schedules.list_schedules(namespace, _PAGE_SIZE, token)
        return html_page(schedule_pages.schedules_page(viewer, namespace, page))

    async def _one(self, request: web.Request, viewer: Viewer) -> web.StreamResponse:
        namespace, sid = request.match_info["ns"], request.match_info["sid"]
        s = await self._ops.schedules.get(namespace, sid)
        _, upcoming = await self._ops.schedules.upcoming(
            namespace, sid, after_ms=None, count=_NEXT, until_ms=None
        )
        now = self._clock.now_ms()
        query = OccurrenceQuery(namespace, sid, now - _LEDGER_MS, now + 1)
        ledger = await self._ops.history.occurrences(query, _PAGE_SIZE, "")
        backfill = ""
        if "from" in request.query:
            start, end = _instant(request.query, "from"), _instant(request.query, "to")
            found = await self._ops.schedules.backfill_preview(namespace, sid, start, end)
            backfill = schedule_pages.backfill_preview(viewer, s, start, end, found)
        page = schedule_pages.schedule_page(viewer, s, upcoming, ledger.items, backfill)
        return html_page(page)

    async def _act(self, request: web.Request, viewer: Viewer) -> web.StreamResponse:
        namespace, sid = request.match_info["ns"], request.match_info["sid"]
        form = await request.post()
        verb, ops = request.match_info["verb"], self._ops.schedules
        if verb == "pause":
            await ops.pause(namespace, sid, str(form.get("note", ""))[:500])
        elif verb == "resume":
            await ops.resume(namespace, sid)
        elif verb == "trigger":
            await ops.trigger(namespace, sid)
        elif verb == "backfill":
            start, end = _whole(form.get("start_ms")), _whole(form.get("end_ms"))
            await ops.backfill(namespace, sid, start, end)
        else:
            raise NotFound(f"no action {verb!r} on a schedule (pause, resume, trigger, backfill)")
        return redirect(schedule_pages.schedule_path(namespace, sid))


def _instant(query: Mapping[str, str], name: str) -> int:
    """A ``datetime-local`` field read as UTC, in ms; ``InvalidArgument`` naming it."""
    raw = query.get(name, "")
    try:
        return int(datetime.fromisoformat(raw).replace(tzinfo=UTC).timestamp() * 1000)
    except ValueError:
        raise InvalidArgument(name, f"expected a date and time, got {raw[:40]!r}") from None


def _whole(value: object) -> int:
    try:
        return int(str(value))
    except ValueError:
        raise InvalidArgument("backfill", "the range was lost: preview it again") from None
