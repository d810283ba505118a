"""The console's bulk routes: every dead letter a filter selects redriven or purged as one
action of ``server.ops.bulk_actions`` (the same the gRPC BulkService starts, resumed by any
server after a crash), counted and confirmed first; its progress, and a stop.

The count reads at most ``_COUNT_AT_MOST`` tasks, so a page answers in bounded time however
many dead letters are kept; past that it says "at least", and the action itself goes on to
the end. The action id is chosen when the count is shown and sent with the confirmation, so
a form sent twice starts one action.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from aiohttp import web

from server.app import Operations
from server.ops.bulk_actions import for_verb
from server.web.console import bulk_pages
from server.web.console.dead_letter_pages import DeadLetterFilter
from server.web.console.dead_letter_routes import filter_of
from server.web.console.responses import SessionWrap, html_page, redirect
from server.web.console.sessions import Viewer
from tikk.clock import Clock
from tikk.errors import NotFound
from tikk.model import TaskState
from tikk.task_filters import TaskFilter

_COUNT_AT_MOST = 20_000
_PAGE_SIZE = 50


class BulkPages:
    """The count before a bulk action on dead letters, the start, the progress, the stop."""

    def __init__(self, ops: Operations, clock: Clock) -> None:
        self._ops = ops
        self._clock = clock

    def add_routes(self, app: web.Application, session: SessionWrap) -> None:
        r = app.router
        r.add_get("/console/ns/{ns}/dead-letters/all", session(self._preview))
        r.add_get("/console/ns/{ns}/bulk", session(self._list))
        r.add_post("/console/ns/{ns}/bulk", session(self._start))
        r.add_get("/console/ns/{ns}/bulk/{action_id}", session(self._one))
        r.add_post("/console/ns/{ns}/bulk/{action_id}/stop", session(self._stop))

    async def _preview(self, request: web.Request, viewer: Viewer) -> web.StreamResponse:
        namespace = request.match_info["ns"]
        word, chosen = _verb_of(request.query), filter_of(request.query)
        verb = bulk_pages.VERBS[word]
        wanted = for_verb(verb, self._task_filter(namespace, chosen))
        self._ops.search.check(wanted)
        count = await self._ops.search.count(wanted, most_read=_COUNT_AT_MOST)
        action_id = f"console-{self._clock.now_ms():013d}-{os.urandom(4).hex()}"
        found = bulk_pages.BulkPreview(namespace, word, chosen, count, action_id)
        return html_page(bulk_pages.preview_page(viewer, found))

    async def _start(self, request: web.Request, viewer: Viewer) -> web.StreamResponse:
        namespace = request.match_info["ns"]
        form = await request.post()
        verb = bulk_pages.VERBS[_verb_of(form)]
        f = self._task_filter(namespace, filter_of(form))
        action = await self._ops.bulk.start(verb, f, str(form.get("action_id", "")))
        return redirect(bulk_pages.bulk_path(namespace, action.action_id))

    async def _one(self, request: web.Request, viewer: Viewer) -> web.StreamResponse:
        namespace = request.match_info["ns"]
        action = await self._ops.bulk.get(namespace, request.match_info["action_id"])
        return html_page(bulk_pages.action_page(viewer, action))

    async def _stop(self, request: web.Request, viewer: Viewer) -> web.StreamResponse:
        namespace, action_id = request.match_info["ns"], request.match_info["action_id"]
        await self._ops.bulk.stop(namespace, action_id)
        return redirect(bulk_pages.bulk_path(namespace, action_id))

    async def _list(self, request: web.Request, viewer: Viewer) -> web.StreamResponse:
        namespace = request.match_info["ns"]
        page = await self._ops.bulk.list(namespace, _PAGE_SIZE, request.query.get("token", ""))
        return html_page(bulk_pages.actions_page(viewer, namespace, page))

    def _task_filter(self, namespace: str, chosen: DeadLetterFilter) -> TaskFilter:
        """The dead-letter filter as the bulk action's: ``hours`` becomes a fixed instant."""
        return TaskFilter(
            namespace, queue=chosen.queue, state=TaskState.DEAD_LETTERED,
            changed_from_ms=chosen.since_ms(self._clock.now_ms()), error_type=chosen.error_type,
        )  # fmt: skip


def _verb_of(values: Mapping[str, object]) -> str:
    word = str(values.get("verb", ""))
    if word not in bulk_pages.VERBS:
        raise NotFound(f"no bulk action {word!r} on dead letters (redrive, purge)")
    return word
