"""The console's pages as HTML: domain objects in, text out, every value escaped and bounded.

No template engine and no script from elsewhere: a page is a few functions of plain Python
over ``html.escape``, the one stylesheet and the one script are files of the package
(``static/``), and a page works without the script (it only refreshes and asks before
acting).
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from urllib.parse import quote, urlencode

from server.ops.queues import HELD_COUNT_MOST, QueueView
from server.web.console import access
from server.web.console.sessions import Viewer
from server.web.console.stats import QueueFigures
from tikk.model import Page, RunRecord, Task, TaskState
from tikk.ready_queue import QueueBacklog
from tikk.store.due_counts import DueCount

_TEXT_LIMIT = 2_000
_SHOWN_LIMIT = 200
# A traceback is shown whole: the server caps it (Limits.max_traceback_length).
_TRACE_LIMIT = 64 * 1024


def text(value: object, limit: int = _SHOWN_LIMIT) -> str:
    """``value`` as escaped HTML text, cut to ``limit`` characters (marked)."""
    shown = str(value)
    if len(shown) > limit:
        shown = shown[:limit] + f"… ({len(shown) - limit} more characters)"
    return html.escape(shown, quote=True)


def when(ms: int) -> str:
    if ms <= 0:
        return "—"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def millis(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f} ms"


def link(path: str, label: str, **query: str) -> str:
    target = path + ("?" + urlencode(query) if query else "")
    return f'<a href="{html.escape(target)}">{text(label)}</a>'


def task_path(namespace: str, task_id: str) -> str:
    return f"/console/ns/{quote(namespace, safe='')}/tasks/{quote(task_id, safe='')}"


def layout(title: str, body: str, viewer: Viewer | None, namespace: str = "") -> str:
    """A whole page: header with navigation and who is signed in, then ``body``."""
    nav = ""
    if viewer is not None:
        ns = namespace or "default"
        base = "/console/ns/" + quote(ns, safe="")
        nav = (
            '<nav><a href="/console/">Overview</a>'
            f"{link(base + '/dead-letters', 'Dead letters')}"
            f"{link(base + '/upcoming', 'Upcoming')}"
            f"{link(base + '/runs', 'Run history')}"
            f"{link(base + '/schedules', 'Schedules')}"
            f"{link(base + '/bulk', 'Bulk actions')}"
            f"{link('/console/tasks', 'Find a task', namespace=ns)}"
            f'<span class="who">{text(viewer.name)}</span>'
            f"{_logout(viewer)}</nav>"
        )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{text(title)} · tikk</title>"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="stylesheet" href="/console/static/console.css">'
        '<script src="/console/static/console.js" defer></script></head><body>'
        f'<header><a class="brand" href="/console/">tikk</a>{nav}</header>'
        f"<main><h1>{text(title)}</h1>{body}</main></body></html>"
    )


def _logout(viewer: Viewer) -> str:
    if viewer.credential is None:
        return ""
    return (
        '<form method="post" action="/console/logout" class="inline">'
        f"{csrf_field(viewer)}<button>Sign out</button></form>"
    )


def csrf_field(viewer: Viewer) -> str:
    return f'<input type="hidden" name="csrf" value="{html.escape(viewer.csrf)}">'


def login_page(form_token: str, problem: str = "") -> str:
    """The login form; ``form_token`` is the HMAC of its cookie (``ConsoleSessions``)."""
    shown = f'<p class="error">{text(problem)}</p>' if problem else ""
    body = (
        f"{shown}<form method='post' action='/console/login' class='login'>"
        f'<input type="hidden" name="csrf" value="{html.escape(form_token)}">'
        "<label>Token <input type='password' name='token' autocomplete='off' "
        "required autofocus></label><button>Sign in</button></form>"
        "<p>Use a token made with <code>tikk auth create</code>: the console allows what the "
        "token's grants allow.</p>"
    )
    return layout("Sign in", body, None)


def error_page(viewer: Viewer | None, status: str, message: str) -> str:
    return layout(status, f'<p class="error">{text(message, _TEXT_LIMIT)}</p>', viewer)


def table(
    headers: Sequence[str], rows: Iterable[Sequence[str]], empty: str, css: str = "",
    *, live: bool = False,
) -> str:  # fmt: skip
    """A table whose cells are already HTML; ``empty`` said instead when there is no row
    (under the headers, if ``live``: a script fills it later)."""
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    if not body and not live:
        return f'<p class="empty">{text(empty)}</p>'
    head = "".join(f"<th>{text(h)}</th>" for h in headers)
    note = f'<p class="empty">{text(empty)}</p>' if not body else ""
    return (
        f'<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>' + note
    )


def queue_rows(
    views: Sequence[QueueView],
    last5: dict[str, QueueFigures],
    last60: dict[str, QueueFigures],
    now_ms: int,
) -> list[list[str]]:
    """The overview's table, a row per queue that waits, ran or has settings (the page and
    its script's refresh show the same rows); a paused or rate-limited queue says so under
    its name, with the tasks held back."""
    known = {v.backlog.queue: v for v in views}
    queues = sorted(set(known) | set(last5) | set(last60))
    rows = []
    for q in queues:
        view = known.get(q)
        row = queue_row(q, view.backlog if view else None, last5.get(q), last60.get(q), now_ms)
        if view is not None and (note := _hold_note(view)):
            row[0] += f'<br><span class="hold">{text(note)}</span>'
        rows.append(row)
    return rows


def _hold_note(view: QueueView) -> str:
    c = view.control
    held = "10,000+" if view.held > HELD_COUNT_MOST else f"{view.held:,}"
    parts = ["paused"] if c.paused else []
    parts += [f"at most {c.rate_per_s:g}/s"] if c.rate_per_s else []
    return " · ".join([*parts, f"{held} held"]) if parts or view.held else ""


def overview_page(viewer: Viewer, rows: Sequence[Sequence[str]], now_ms: int) -> str:
    """Per queue (``queue_rows``): what waits, how old, runs and failures per second, start
    lateness over 5 and 60 minutes (as far back as the server has run); then the live chart
    (drawn by the script from ``/console/api/overview``)."""
    headers = ["queue", "waiting", "oldest", "runs/s (5 min)", "failures/s (5 min)",
               "start p50 / p99 (5 min)", "start p50 / p99 (60 min)"]  # fmt: skip
    body = (
        '<section id="queues" data-live="/console/api/overview">'
        f"{table(headers, rows, 'No queue has had a task yet.', 'queues', live=True)}</section>"
        "<h2>Due → handler start, every queue, over the last hour</h2>"
        '<svg id="lateness-chart" viewBox="0 0 600 160" role="img" '
        'aria-label="start lateness p50 and p99 per minute"></svg>'
        '<p class="legend"><span class="p50">p50</span> <span class="p99">p99</span> '
        f"(refreshed every 5 s; as of {when(now_ms)})</p>"
    )
    return layout("Overview", body, viewer)


def namespaces_page(viewer: Viewer) -> str:
    """The overview of a login that may not list the queues (they are shared by every
    namespace): the namespaces it may read, each with its pages."""
    rows = [
        [
            text(ns),
            " · ".join(
                link(f"/console/ns/{quote(ns, safe='')}/{part}", label)
                for part, label in _NAMESPACE_PAGES
            ),
        ]
        for ns in viewer.namespaces()
    ]
    body = (
        '<p class="hint">Queues are shared by every namespace, so their backlog and lateness '
        "are shown to logins that may read every namespace. Yours:</p>"
        + table(["namespace", "pages"], rows, "This login may read no namespace.", "namespaces")
    )
    return layout("Overview", body, viewer, next(iter(viewer.namespaces()), ""))


_NAMESPACE_PAGES = [
    ("dead-letters", "Dead letters"),
    ("upcoming", "Upcoming"),
    ("runs", "Run history"),
    ("schedules", "Schedules"),
    ("bulk", "Bulk actions"),
]


def queue_row(
    queue: str, backlog: QueueBacklog | None, f5: QueueFigures | None, f60: QueueFigures | None,
    now_ms: int,
) -> list[str]:  # fmt: skip
    oldest = backlog.oldest_enqueued_ms if backlog else None
    age = "—" if oldest is None else millis(max(0, now_ms - oldest))
    return [
        text(queue),
        text(backlog.waiting if backlog else 0),
        age,
        f"{f5.runs_per_s:.1f}" if f5 else "—",
        f"{f5.failures_per_s:.1f}" if f5 else "—",
        f"{millis(f5.p50_ms)} / {millis(f5.p99_ms)}" if f5 else "—",
        f"{millis(f60.p50_ms)} / {millis(f60.p99_ms)}" if f60 else "—",
    ]


def find_task_page(viewer: Viewer, namespace: str) -> str:
    body = (
        "<form method='get' action='/console/tasks' class='find'>"
        f"<label>Namespace <input name='namespace' value='{text(namespace)}'></label>"
        "<label>Task id <input name='task_id' required autofocus></label>"
        "<button>Show</button></form>"
    )
    return layout("Find a task", body, viewer, namespace)


def task_page(viewer: Viewer, task: Task, runs: Page[RunRecord]) -> str:
    """A task: where it stands, its every run, and what the viewer may do with it."""
    facts = [
        ("namespace", text(task.namespace)), ("task id", text(task.task_id)),
        ("state", f'<span class="state {task.state.name.lower()}">{task.state.name}</span>'),
        ("queue / handler", f"{text(task.queue)} / {text(task.handler)}"),
        ("attempt", f"{task.attempt} of {task.retry.max_attempts}"),
        ("due", when(task.due_ms)), ("scheduled for", when(task.scheduled_ms)),
        ("idempotency key", f"<code>{text(task.idempotency_key)}</code>"),
        ("created / updated", f"{when(task.created_ms)} / {when(task.updated_ms)}"),
        ("labels", text(", ".join(f"{k}={v}" for k, v in sorted(task.labels.items())) or "—")),
        ("schedule", text(task.schedule_id or "—")),
        ("last error", text(f"{task.last_error_type}: {task.last_error_message}"
                            if task.last_error_type else "—", _TEXT_LIMIT)),
        ("payload", f"<pre>{text(_payload(task.payload), _TEXT_LIMIT)}</pre>"),
    ]  # fmt: skip
    dl = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts)
    body = live(f'<dl class="facts">{dl}</dl>{_task_actions(viewer, task)}<h2>Runs</h2>'
                + runs_table(runs.items, with_task=False))  # fmt: skip
    return layout(f"Task {task.task_id}", body, viewer, task.namespace)


def live(html_text: str) -> str:
    """A part of a page the script reads again every few seconds and swaps in place (only
    parts without a field a person types in: a reload would lose it)."""
    return f'<section id="live" data-refresh="5">{html_text}</section>'


def _payload(payload: bytes) -> str:
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError:
        return payload.hex()


def _task_actions(viewer: Viewer, task: Task) -> str:
    """The actions the task's state allows and this login may take: cancel and stop are a
    writer's, redrive and purge an admin's, as over gRPC."""
    offered = {
        TaskState.SCHEDULED: [("cancel", "Cancel", "Cancel this task? It will not run.")],
        TaskState.DISPATCHED: [
            (
                "stop",
                "Stop",
                "Stop this run and cancel the task? Its worker "
                "is told to stop it, and it is not retried.",
            )
        ],
        TaskState.DEAD_LETTERED: [
            ("redrive", "Redrive", "Run this task again now, from attempt 1?"),
            ("purge", "Purge", "Delete this task for good? Its runs stay in the history."),
        ],
    }.get(task.state, [])
    verbs = access.ROUTES[("POST", "/console/ns/{ns}/tasks/{task_id}/{verb}")]
    actions = [a for a in offered if viewer.may(verbs[a[0]], task.namespace)]
    if offered and not actions:
        return '<p class="hint">Read-only: this login may not act on the task.</p>'
    return "".join(action_form(viewer, task, *a) for a in actions)


def action_form(viewer: Viewer, task: Task, verb: str, label: str, question: str) -> str:
    path = f"{task_path(task.namespace, task.task_id)}/{verb}"
    return (
        f'<form method="post" action="{html.escape(path)}" class="inline" '
        f'data-confirm="{text(question)}">{csrf_field(viewer)}'
        f'<button class="{verb}">{text(label)}</button></form>'
    )


def runs_table(runs: Sequence[RunRecord], *, with_task: bool) -> str:
    first_traced = next((r for r in runs if r.traceback), None)
    headers = [*(["task"] if with_task else []), "attempt", "status", "due", "started",
               "start lateness", "duration", "worker", "error"]  # fmt: skip
    rows = [
        [
            *([link(task_path(r.namespace, r.task_id), r.task_id)] if with_task else []),
            text(r.attempt), f'<span class="status {r.status.name.lower()}">{r.status.name}</span>',
            when(r.due_ms), when(r.started_ms), millis(max(0, r.started_ms - r.due_ms)),
            millis(max(0, r.finished_ms - r.started_ms)), text(r.worker_id),
            error_cell(r, opened=not with_task and r is first_traced),
        ]
        for r in runs
    ]  # fmt: skip
    return table(headers, rows, "No run recorded.", "runs")


def error_cell(r: RunRecord, *, opened: bool) -> str:
    """A run's error, and under it the traceback the worker reported, folded unless
    ``opened`` (the newest failure on a task's page is what a person came to read)."""
    error = text(f"{r.error_type}: {r.error_message}" if r.error_type else "", _TEXT_LIMIT)
    if not r.traceback:
        return error
    return (
        f'<details class="trace"{" open" if opened else ""}><summary>{error}</summary>'
        f"<pre>{text(r.traceback, _TRACE_LIMIT)}</pre></details>"
    )


def filter_form(action: str, queue: str, extra: str = "") -> str:
    return (
        f"<form method='get' action='{html.escape(action)}' class='filter'>"
        f"<label>Queue <input name='queue' value='{text(queue)}'></label>{extra}"
        "<button>Filter</button></form>"
    )


def next_link(token: str, **query: str) -> str:
    return f"<p>{link('', 'Next page', **query, token=token)}</p>" if token else ""


def runs_page(viewer: Viewer, namespace: str, queue: str, status: str, *, hours: int,
              page: Page[RunRecord] | None) -> str:  # fmt: skip
    options = "".join(
        f"<option value='{s}'{' selected' if s == status else ''}>{s or 'any'}</option>"
        for s in ("", "succeeded", "failed", "dead_lettered", "cancelled")
    )
    extra = (
        f"<label>Status <select name='status'>{options}</select></label>"
        f"<label>Last hours <input name='hours' type='number' min='1' max='720' "
        f"value='{hours}'></label>"
    )
    form = filter_form(f"/console/ns/{quote(namespace, safe='')}/runs", queue, extra)
    if page is None:
        found = '<p class="hint">Choose a queue to search its runs.</p>'
    else:
        found = live(runs_table(page.items, with_task=True) if page.items or not page.next_token
                     else '<p class="empty">None of the runs read so far matches; the next '
                     "page reads further back.</p>")  # fmt: skip
        found += next_link(page.next_token, queue=queue, status=status, hours=str(hours))
    return layout(f"Run history of {namespace}", form + found, viewer, namespace)


_MAX_QUEUE_COLUMNS = 8


def upcoming_page(viewer: Viewer, namespace: str, counts: Sequence[DueCount], minutes: int) -> str:
    """Tasks due in each of the coming minutes, per queue (the busiest queues each a column,
    the rest together), with a bar of each minute's total."""
    per_queue: dict[str, int] = {}
    for c in counts:
        per_queue[c.queue] = per_queue.get(c.queue, 0) + c.tasks
    shown = sorted(per_queue, key=lambda q: (-per_queue[q], q))[:_MAX_QUEUE_COLUMNS]
    rest = len(per_queue) > len(shown)
    by_minute: dict[int, dict[str, int]] = {}
    for c in counts:
        column = c.queue if c.queue in shown else "other queues"
        row = by_minute.setdefault(c.minute, {})
        row[column] = row.get(column, 0) + c.tasks
    top = max((sum(r.values()) for r in by_minute.values()), default=1)
    columns = [*shown, *(["other queues"] if rest else [])]
    rows = [
        [when(m * 60_000)[:16] + "Z", *(text(r.get(q, 0)) for q in columns),
         text(sum(r.values())), _bar(sum(r.values()), top)]
        for m, r in sorted(by_minute.items())
    ]  # fmt: skip
    form = (
        f"<form method='get' class='filter'><label>Minutes ahead <input name='minutes' "
        f"type='number' min='1' max='1440' value='{minutes}'></label><button>Show</button></form>"
    )
    total = sum(per_queue.values())
    body = (
        form + f"<p>{total:,} task(s) due in the next {minutes} minute(s), by the minute they "
        "are due (as created; a schedule's occurrences count once they fire).</p>"
        + live(table(["minute", *columns, "total", ""], rows, "Nothing is due in this window.",
                     "upcoming-minutes"))
    )  # fmt: skip
    return layout(f"Upcoming in {namespace}", body, viewer, namespace)


def _bar(value: int, top: int) -> str:
    width = max(1, round(200 * value / top)) if value else 0
    return f'<span class="bar w{width // 10}" title="{value}"></span>'
