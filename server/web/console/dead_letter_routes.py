"""The console's dead-letter routes: a bounded, filtered read of a namespace's dead letters
(``TaskOps.dead_letters``, newest first) and the redrive of a selection (``TaskOps.redrive``
each, as the gRPC RedriveTask does)."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlencode

from aiohttp import web

from server.app import Operations
from server.web.console.dead_letter_pages import (
    DeadLetterFilter,
    dead_letters_page,
    dead_letters_path,
)
from server.web.console.responses import SessionWrap, clamped_field, html_page, redirect
from server.web.console.sessions import Viewer
from tikk.clock import Clock
from tikk.errors import InvalidArgument, NotFound, TikkError
from tikk.model import Task
from tikk.queue_contract import MAX_QUEUE_NAME_LENGTH
from tikk.settings import Limits

_SHOWN = 50
# Dead letters one page reads at most while filtering: a filter that matches rarely shows a
# short page and a link to read on, never a read that grows with the dead letters kept.
_READ_AT_MOST = 2_000
_READ_PAGE = 500
_MAX_SELECTED = 200
# The longest error type a run may report (``Limits.max_error_type_length``'s default).
_MAX_ERROR_TYPE = Limits().max_error_type_length


class DeadLetterPages:
    """A namespace's dead letters, and the redrive of a selection of them."""

    def __init__(self, ops: Operations, clock: Clock) -> None:
        self._ops = ops
        self._clock = clock

    def add_routes(self, app: web.Application, session: SessionWrap) -> None:
        app.router.add_get("/console/ns/{ns}/dead-letters", session(self._list))
        app.router.add_post("/console/ns/{ns}/dead-letters/{verb}", session(self._act))

    async def _list(self, request: web.Request, viewer: Viewer) -> web.StreamResponse:
        namespace = request.match_info["ns"]
        chosen = filter_of(request.query)
        found, token = await self._matching(namespace, chosen, request.query.get("token", ""))
        notice = request.query.get("notice", "")[:300]
        return html_page(
            dead_letters_page(viewer, namespace, chosen, found, token=token, notice=notice)
        )

    async def _matching(
        self, namespace: str, chosen: DeadLetterFilter, token: str
    ) -> tuple[list[Task], str]:
        """Up to a page of matches from at most ``_READ_AT_MOST`` dead letters; the token to
        read on ("" when none are left)."""
        since = chosen.since_ms(self._clock.now_ms()) or 0
        found: list[Task] = []
        read = 0
        while read < _READ_AT_MOST and len(found) < _SHOWN:
            # A page's worth first (what an unfiltered view needs), then larger reads.
            size = _SHOWN if not read else _READ_PAGE
            page = await self._ops.tasks.dead_letters(namespace, chosen.queue, size, token)
            read += len(page.items)
            for task in page.items:
                if task.updated_ms < since:
                    return found, ""  # newest first: the rest are older still
                if not chosen.error_type or task.last_error_type == chosen.error_type:
                    found.append(task)
            token = page.next_token
            if not token:
                break
        return found, token

    async def _act(self, request: web.Request, viewer: Viewer) -> web.StreamResponse:
        """Redrive or purge the selected dead letters, each on its own; the page then says
        how many it did and why each other one was not."""
        namespace, verb = request.match_info["ns"], request.match_info["verb"]
        act = {"redrive": self._ops.tasks.redrive, "purge": self._ops.tasks.purge}.get(verb)
        if act is None:
            raise NotFound(f"no action {verb!r} on dead letters (redrive, purge)")
        form = await request.post()
        chosen = [str(v) for v in form.getall("task_id", [])]
        if not chosen or len(chosen) > _MAX_SELECTED:
            raise InvalidArgument("task_id", f"select 1 to {_MAX_SELECTED} dead letters")
        failed: list[str] = []
        for task_id in chosen:
            try:
                await act(namespace, task_id)
            except TikkError as exc:
                failed.append(f"{task_id}: {exc}")
        done = {"redrive": "redriven", "purge": "purged"}[verb]
        notice = f"{len(chosen) - len(failed)} of {len(chosen)} {done}"
        notice += f"; not redriven: {'; '.join(failed)}" if failed else ""
        query = {**filter_of(form).query(), "notice": notice[:300]}
        return redirect(f"{dead_letters_path(namespace)}?{urlencode(query)}")


def filter_of(values: Mapping[str, object]) -> DeadLetterFilter:
    """The filter a query or form names (missing fields: no term). A field longer than any
    stored value could be is ``InvalidArgument`` naming it: a filter may be stored with a
    bulk action, and is shown on every page of it."""
    hours = clamped_field(values.get("hours"), 0, 720, 0)
    queue = str(values.get("queue", "")).strip()
    error_type = str(values.get("error_type", "")).strip()
    for name, value, most in (
        ("queue", queue, MAX_QUEUE_NAME_LENGTH),
        ("error_type", error_type, _MAX_ERROR_TYPE),
    ):
        if len(value) > most:
            raise InvalidArgument(name, f"longer than {most} characters")
    return DeadLetterFilter(queue, error_type, hours)
