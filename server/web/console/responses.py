"""The console's HTTP answers: a page, a redirect, an error page with the status a
``TikkError`` maps to."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from server.web.console import pages
from server.web.console.sessions import Viewer
from tikk.errors import (
    BackendUnavailable,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    TikkError,
)

# What a page of the console is, and the wrapper that gives it its viewer (``routes``).
ConsolePage = Callable[[web.Request, Viewer], Awaitable[web.StreamResponse]]
SessionWrap = Callable[[ConsolePage], Callable[[web.Request], Awaitable[web.StreamResponse]]]

_STATUS_OF: list[tuple[type[TikkError], type[web.HTTPException]]] = [
    (NotFound, web.HTTPNotFound), (PermissionDenied, web.HTTPForbidden),
    (InvalidArgument, web.HTTPBadRequest), (FailedPrecondition, web.HTTPConflict),
    (BackendUnavailable, web.HTTPServiceUnavailable),
]  # fmt: skip


def clamped_field(given: object, low: int, high: int, default: int) -> int:
    """A whole number of a query or form field, kept within ``low..high``; ``default`` when
    the field is absent or not a number (a view's window, never an error page)."""
    try:
        return min(high, max(low, int(str(given or default))))
    except ValueError:
        return default


def html_page(body: str, status: int = 200) -> web.Response:
    """A page (its security headers are the listener's: ``server.web.browser_guard``)."""
    return web.Response(text=body, status=status, content_type="text/html")


def redirect(to: str) -> web.Response:
    """See ``to`` (after a POST, so that a reload does not act again)."""
    return web.Response(status=303, headers={"Location": to})


def error_response(exc: TikkError, viewer: Viewer | None) -> web.Response:
    """What went wrong, under the status its kind of error maps to."""
    status = next((s for kind, s in _STATUS_OF if isinstance(exc, kind)), web.HTTPBadRequest)
    return html_page(pages.error_page(viewer, status().reason, str(exc)), status.status_code)
