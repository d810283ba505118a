"""The console's bulk actions as HTML: the count of what a filter selects and the question
before acting on all of it, one action's progress, and a namespace's actions."""

from __future__ import annotations

import html
from dataclasses import dataclass
from urllib.parse import quote

from server.ops.task_search import Count
from server.web.console import access
from server.web.console.dead_letter_pages import DeadLetterFilter, dead_letters_path
from server.web.console.pages import (
    csrf_field,
    layout,
    link,
    live,
    next_link,
    table,
    task_path,
    text,
    when,
)
from server.web.console.sessions import Viewer
from tikk.bulk_actions import BulkAction, BulkState, BulkVerb
from tikk.model import Page

# What the console offers on dead letters: the form's word for each verb.
VERBS = {"redrive": BulkVerb.REDRIVE, "purge": BulkVerb.PURGE}
_SAMPLE_SHOWN = 10


def bulk_path(namespace: str, action_id: str = "") -> str:
    base = f"/console/ns/{quote(namespace, safe='')}/bulk"
    return f"{base}/{quote(action_id, safe='')}" if action_id else base


@dataclass(frozen=True)
class BulkPreview:
    """What the count before a bulk action found: ``word`` is the verb as the form names it
    (``VERBS``), ``action_id`` the id the confirmation starts the action under."""

    namespace: str
    word: str
    chosen: DeadLetterFilter
    count: Count
    action_id: str


def preview_page(viewer: Viewer, p: BulkPreview) -> str:
    """How many dead letters the filter selects, the first few, and the question."""
    described, count = _described(p.chosen), p.count
    if count.complete:
        found = f"{count.matched:,} dead letter(s) match {described}."
    else:
        found = (
            f"At least {count.matched:,} dead letters match {described} (the count stopped "
            f"after reading {count.read:,}; the action goes on to the end)."
        )
    sample = [
        [link(task_path(t.namespace, t.task_id), t.task_id), text(t.queue),
         text(f"{t.last_error_type}: {t.last_error_message}")]
        for t in count.sample[:_SAMPLE_SHOWN]
    ]  # fmt: skip
    back = link(dead_letters_path(p.namespace), "Back to the dead letters", **p.chosen.query())
    body = (
        f'<p class="count">{text(found, 1_000)}</p>'
        + (_confirm(viewer, p) if count.matched else "")
        + table(["task", "queue", "last error"], sample, "Nothing to act on.", "sample")
        + f"<p>{back}</p>"
    )
    return layout(f"{p.word.capitalize()} every match in {p.namespace}", body, viewer, p.namespace)


def _described(chosen: DeadLetterFilter) -> str:
    terms = [f"queue {chosen.queue}"] if chosen.queue else ["any queue"]
    terms += [f"error type {chosen.error_type}"] if chosen.error_type else []
    terms += [f"given up in the last {chosen.hours} hour(s)"] if chosen.hours else []
    return ", ".join(terms)


def _confirm(viewer: Viewer, p: BulkPreview) -> str:
    fields = {**p.chosen.query(), "verb": p.word, "action_id": p.action_id}
    hidden = "".join(
        f"<input type='hidden' name='{k}' value='{text(v)}'>" for k, v in fields.items()
    )
    many = f"{p.count.matched:,}" if p.count.complete else f"at least {p.count.matched:,}"
    question = (
        f"Redrive {many} dead letter(s) now, from attempt 1?" if p.word == "redrive"
        else f"Delete {many} dead letter(s) for good? Their runs stay in the history."
    )  # fmt: skip
    button = "cancel" if p.word == "purge" else "redrive"
    return (
        f"<form method='post' action='{html.escape(bulk_path(p.namespace))}' class='actions' "
        f"data-confirm='{text(question)}'>{csrf_field(viewer)}{hidden}"
        f"<button class='{button}'>{text(p.word.capitalize())} every match</button></form>"
    )


def action_page(viewer: Viewer, action: BulkAction) -> str:
    """One action: what it acts on, where it stands, and Stop while it runs."""
    p = action.progress
    facts = [
        ("action id", f"<code>{text(action.action_id)}</code>"),
        ("verb", text(action.verb.name.lower())),
        ("filter", f"<code>{text(action.filter.describe(), 1_000)}</code>"),
        ("state", _state(action.state)),
        ("started / finished", f"{when(action.created_ms)} / {when(action.finished_ms or 0)}"),
        ("read / matched", f"{p.read:,} / {p.matched:,}"),
        ("acted / skipped / failed", f"{p.acted:,} / {p.skipped:,} / {p.failed:,}"),
        ("error", text(p.error or "—", 2_000)),
    ]  # fmt: skip
    dl = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts)
    stop = ""
    if action.state is BulkState.RUNNING and viewer.may(access.STOP_BULK_ACTION, action.namespace):
        path = html.escape(bulk_path(action.namespace, action.action_id) + "/stop")
        stop = (
            f"<form method='post' action='{path}' class='actions' "
            "data-confirm='Stop this action after the task it is at?'>"
            f"{csrf_field(viewer)}<button class='cancel'>Stop</button></form>"
        )  # fmt: skip
    body = live(f'<dl class="facts">{dl}</dl>{stop}') + (
        f"<p>{link(bulk_path(action.namespace), 'Every bulk action of the namespace')}</p>"
    )
    return layout(f"Bulk action {action.action_id}", body, viewer, action.namespace)


def _state(state: BulkState) -> str:
    return f'<span class="state {state.name.lower()}">{state.name}</span>'


def actions_page(viewer: Viewer, namespace: str, page: Page[BulkAction]) -> str:
    """A namespace's bulk actions (from the API, the CLI or this console), a page of them."""
    rows = [
        [link(bulk_path(a.namespace, a.action_id), a.action_id), text(a.verb.name.lower()),
         _state(a.state), f"{a.progress.acted:,} of {a.progress.matched:,}",
         when(a.created_ms), when(a.finished_ms or 0)]
        for a in page.items
    ]  # fmt: skip
    headers = ["action", "verb", "state", "acted", "started", "finished"]
    body = live(table(headers, rows, "No bulk action in this namespace.", "bulk-actions"))
    return layout(f"Bulk actions of {namespace}", body + next_link(page.next_token), viewer,
                  namespace)  # fmt: skip
