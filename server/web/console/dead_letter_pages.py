"""The console's dead letters: a namespace's, filtered by queue, error type and age, each with
its last error, redriven one at a time or a selection at once (the count asked first)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote

from server.web.console import access
from server.web.console.pages import (
    action_form,
    csrf_field,
    filter_form,
    layout,
    link,
    next_link,
    table,
    task_path,
    text,
    when,
)
from server.web.console.sessions import Viewer
from tikk.model import Task

_ERROR_LIMIT = 2_000
_HOUR_MS = 3_600_000


@dataclass(frozen=True)
class DeadLetterFilter:
    """What the page shows: a queue ("" all), an error type ("" any), the last ``hours``."""

    queue: str = ""
    error_type: str = ""
    hours: int = 0

    def query(self) -> dict[str, str]:
        return {"queue": self.queue, "error_type": self.error_type, "hours": str(self.hours)}

    def since_ms(self, now_ms: int) -> int | None:
        """The oldest give-up instant the filter keeps, None for any."""
        return now_ms - self.hours * _HOUR_MS if self.hours else None


def dead_letters_path(namespace: str) -> str:
    return f"/console/ns/{quote(namespace, safe='')}/dead-letters"


def dead_letters_page(
    viewer: Viewer, namespace: str, chosen: DeadLetterFilter, found: Sequence[Task], *,
    token: str, notice: str,
) -> str:  # fmt: skip
    """The matching dead letters of one bounded read, a checkbox each for the bulk redrive."""
    # Redrive and purge (one, a selection, or every match) are an admin's, as over gRPC.
    may_act = viewer.may(access.REDRIVE_TASK, namespace) and viewer.may(
        access.PURGE_DEAD_LETTER, namespace
    )
    rows = [_row(viewer, t, may_act) for t in found]
    headers = [*([""] if may_act else []), "task", "queue", "handler", "attempts", "given up",
               "last error", ""]  # fmt: skip
    body = (
        (f'<p class="notice">{text(notice)}</p>' if notice else "")
        + _filters(namespace, chosen)
        + (_bulk(viewer, namespace, chosen) + _every_match(namespace, chosen)
           if may_act and found else "")
        + table(headers, rows, "No dead letter matches.", "dead-letters")
        + next_link(token, **chosen.query())
    )  # fmt: skip
    return layout(f"Dead letters of {namespace}", body, viewer, namespace)


def _row(viewer: Viewer, t: Task, may_act: bool) -> list[str]:
    pick = (
        f"<input type='checkbox' name='task_id' value='{text(t.task_id)}' form='bulk' "
        f"aria-label='select {text(t.task_id)}'>"
    )
    return [
        *([pick] if may_act else []),
        link(task_path(t.namespace, t.task_id), t.task_id), text(t.queue), text(t.handler),
        text(t.attempt), when(t.updated_ms),
        text(f"{t.last_error_type}: {t.last_error_message}", _ERROR_LIMIT),
        action_form(viewer, t, "redrive", "Redrive", f"Run {t.task_id} again now?")
        + action_form(viewer, t, "purge", "Purge", f"Delete {t.task_id} for good? Its runs stay "
                      "in the history.")
        if may_act else "",
    ]  # fmt: skip


def _filters(namespace: str, chosen: DeadLetterFilter) -> str:
    extra = (
        f"<label>Error type <input name='error_type' value='{text(chosen.error_type)}' "
        "placeholder='e.g. TimeoutError'></label>"
        f"<label>Last hours (0: all) <input name='hours' type='number' min='0' max='720' "
        f"value='{chosen.hours}'></label>"
    )
    return filter_form(dead_letters_path(namespace), chosen.queue, extra)


def _bulk(viewer: Viewer, namespace: str, chosen: DeadLetterFilter) -> str:
    """The form the rows' checkboxes belong to: two buttons, each asking with the count of
    the selection first (the script); Purge posts to its own action."""
    back = "".join(
        f"<input type='hidden' name='{k}' value='{text(v)}'>" for k, v in chosen.query().items()
    )
    path = html.escape(dead_letters_path(namespace))
    purge_question = "Delete {n} selected dead letter(s) for good? Their runs stay in the history."
    return (
        f"<form id='bulk' method='post' action='{path}/redrive' class='bulk actions'>"
        f"{csrf_field(viewer)}{back}"
        "<button class='redrive' data-confirm-count='Redrive {n} selected dead letter(s) now?'>"
        "Redrive selected</button>"
        f"<button class='cancel' formaction='{path}/purge' "
        f"data-confirm-count='{text(purge_question)}'>Purge selected</button></form>"
    )


def _every_match(namespace: str, chosen: DeadLetterFilter) -> str:
    """Links to act on every dead letter the filter selects, beyond this page: one
    server-side action each, after a page that counts them (``bulk_pages``)."""
    path = dead_letters_path(namespace) + "/all"
    return (
        f"<p class='bulk-all'>Every match of this filter, not only this page: "
        f"{link(path, 'Redrive every match…', **chosen.query(), verb='redrive')} · "
        f"{link(path, 'Purge every match…', **chosen.query(), verb='purge')}</p>"
    )
