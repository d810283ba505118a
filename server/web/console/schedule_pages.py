"""The console's schedule pages: a namespace's schedules, and one schedule with its next fire
times, its occurrence ledger and what may be done with it (pause, resume, trigger, backfill
after a preview)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import UTC, datetime
from urllib.parse import quote
from zoneinfo import ZoneInfo

from server.web.console import access
from server.web.console.pages import (
    csrf_field,
    layout,
    link,
    live,
    table,
    task_path,
    text,
    when,
)
from server.web.console.sessions import Viewer
from tikk.model import Page
from tikk.schedules.model import OccurrenceRecord, Schedule
from tikk.schedules.spec import Occurrence, ScheduleSpec


def schedule_path(namespace: str, schedule_id: str) -> str:
    return f"/console/ns/{quote(namespace, safe='')}/schedules/{quote(schedule_id, safe='')}"


def describe(spec: ScheduleSpec) -> str:
    """``cron 0 9 * * 1-5 (Europe/Oslo)`` or ``every 30 s``."""
    if spec.cron:
        return f"cron {spec.cron} ({spec.timezone})"
    phase = f", phase {spec.phase_ms // 1000} s" if spec.phase_ms else ""
    return f"every {spec.interval_ms / 1000:g} s{phase}"


def local(ms: int | None, zone: str) -> str:
    """``ms`` in UTC and, when the schedule's zone is another, in that zone too."""
    if ms is None:
        return "—"
    if zone == "UTC":
        return when(ms)
    there = datetime.fromtimestamp(ms / 1000, UTC).astimezone(ZoneInfo(zone))
    return f"{when(ms)} ({text(there.strftime('%Y-%m-%d %H:%M:%S %Z'))})"


def schedules_page(viewer: Viewer, namespace: str, page: Page[Schedule]) -> str:
    rows = [
        [link(schedule_path(s.namespace, s.schedule_id), s.schedule_id), text(describe(s.spec)),
         text(f"{s.action.queue} / {s.action.handler}"),
         "paused" if s.paused else ("finished" if s.next_nominal_ms is None else "active"),
         local(s.next_fire_ms, s.spec.timezone), text(s.runs)]
        for s in page.items
    ]  # fmt: skip
    headers = ["schedule", "when", "queue / handler", "state", "next fire", "runs"]
    body = table(headers, rows, "No schedule in this namespace.", "schedules")
    if page.next_token:
        body += f"<p>{link('', 'Next page', token=page.next_token)}</p>"
    return layout(f"Schedules of {namespace}", body, viewer, namespace)


def schedule_page(
    viewer: Viewer, s: Schedule, upcoming: Sequence[Occurrence],
    ledger: Sequence[OccurrenceRecord], backfill: str,
) -> str:  # fmt: skip
    """One schedule: its definition and state, next fire times, ledger, actions."""
    zone = s.spec.timezone
    next_rows = [[local(o.fire_ms, zone), local(o.nominal_ms, zone)] for o in upcoming]
    body = (
        f'<dl class="facts">{_facts(s)}</dl>{_actions(viewer, s)}{backfill}'
        + live("<h2>Next fire times</h2>"
               + table(["fires at", "occurrence (nominal)"], next_rows,
                       "No further occurrence.", "upcoming")
               + "<h2>Occurrences</h2>" + _ledger(ledger, zone))
    )  # fmt: skip
    return layout(f"Schedule {s.schedule_id}", body, viewer, s.namespace)


def _facts(s: Schedule) -> str:
    p, spec = s.policy, s.spec
    last = link(task_path(s.namespace, s.last_task_id), s.last_task_id) if s.last_task_id else "—"
    state = "paused" if s.paused else ("finished" if s.next_nominal_ms is None else "active")
    note = f" — {text(s.pause_note)}" if s.paused and s.pause_note else ""
    facts = [
        ("when", text(describe(spec))), ("time zone", text(spec.timezone)),
        ("bounds", f"{local(spec.start_ms, spec.timezone)} → {local(spec.end_ms, spec.timezone)}"),
        ("max runs", text(spec.max_runs if spec.max_runs is not None else "no cap")),
        ("jitter", f"{spec.jitter_ms} ms"),
        ("queue / handler", text(f"{s.action.queue} / {s.action.handler}")),
        ("catch-up", text(f"{p.catch_up.name.lower()} beyond {p.catch_up_window_ms // 1000} s "
                          f"(at most {p.catch_up_max_runs} runs)")),
        ("overlap", text(p.overlap.name.lower())),
        ("pause after failures", text(p.pause_after_failures or "never")),
        ("state", f'<span class="state {state}">{state}</span>{note}'),
        ("runs", text(s.runs)), ("next fire", local(s.next_fire_ms, spec.timezone)),
        ("last fire", local(s.last_fire_ms, spec.timezone)), ("last task", last),
    ]  # fmt: skip
    return "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts)


def _actions(viewer: Viewer, s: Schedule) -> str:
    """The actions this login may take (pause, resume and backfill are an admin's, trigger a
    writer's, as over gRPC)."""
    path, ns = schedule_path(s.namespace, s.schedule_id), s.namespace
    forms = []
    if s.paused and viewer.may(access.RESUME_SCHEDULE, ns):
        forms.append(_post(viewer, f"{path}/resume", "Resume", "Resume this schedule?"))
    elif not s.paused and viewer.may(access.PAUSE_SCHEDULE, ns):
        forms.append(
            _post(
                viewer,
                f"{path}/pause",
                "Pause",
                "Pause this schedule? Its occurrences are skipped while it is paused.",
                "<input name='note' placeholder='why (optional)'>",
            )
        )
    if viewer.may(access.TRIGGER_SCHEDULE, ns):
        forms.append(_post(viewer, f"{path}/trigger", "Trigger now", "Run one occurrence now?"))
    if not viewer.may(access.BACKFILL_SCHEDULE, ns):
        if forms:
            return f'<div class="actions">{"".join(forms)}</div>'
        return '<p class="hint">Read-only: this login may not act on the schedule.</p>'
    backfill = (
        f"<form method='get' action='{html.escape(path)}' class='filter'>"
        "<label>Backfill from (UTC) <input name='from' type='datetime-local' step='1' "
        "required></label>"
        "<label>to <input name='to' type='datetime-local' step='1' required></label>"
        "<button>Preview backfill</button></form>"
    )
    return f'<div class="actions">{"".join(forms)}</div>{backfill}'


def _post(viewer: Viewer, action: str, label: str, question: str, extra: str = "") -> str:
    return (
        f'<form method="post" action="{html.escape(action)}" class="inline" '
        f'data-confirm="{text(question)}">{csrf_field(viewer)}{extra}'
        f"<button>{text(label)}</button></form>"
    )


def backfill_preview(
    viewer: Viewer, s: Schedule, start_ms: int, end_ms: int, found: Sequence[Occurrence]
) -> str:
    """What a backfill of [start, end) would run, and the button that runs it."""
    rows = [[local(o.nominal_ms, s.spec.timezone)] for o in found]
    run = ""
    if found and viewer.may(access.BACKFILL_SCHEDULE, s.namespace):
        fields = (
            f"<input type='hidden' name='start_ms' value='{start_ms}'>"
            f"<input type='hidden' name='end_ms' value='{end_ms}'>"
        )
        run = _post(viewer, f"{schedule_path(s.namespace, s.schedule_id)}/backfill",
                    f"Backfill {len(found)} occurrence(s)",
                    f"Run {len(found)} occurrence(s) now? Those that already ran are skipped.",
                    fields)  # fmt: skip
    return (
        f'<section class="preview"><h2>Backfill {when(start_ms)} → {when(end_ms)}: '
        f"{len(found)} occurrence(s)</h2>"
        + table(["occurrence (nominal)"], rows, "The range holds no occurrence.", "backfill")
        + run + "</section>"
    )  # fmt: skip


def _ledger(records: Sequence[OccurrenceRecord], zone: str) -> str:
    rows = [
        [local(r.nominal_ms, zone), f'<span class="outcome">{r.outcome.name.lower()}</span>',
         when(r.decided_ms), f"{r.lateness_ms:,} ms",
         link(task_path(r.namespace, r.task_id), r.task_id) if r.task_id else "—",
         text(r.reason or "—")]
        for r in records
    ]  # fmt: skip
    headers = ["occurrence", "outcome", "decided", "late by", "task", "reason"]
    return table(headers, rows, "No occurrence decided in the last 7 days.", "ledger")
