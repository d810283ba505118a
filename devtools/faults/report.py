"""The readable report of a run: the same for every mode."""

from __future__ import annotations

from dataclasses import dataclass

from devtools.faults.checker import CheckResult
from devtools.faults.lateness import ACCEPTED_LATE_MS, LATE_MS, KillRecovery, Percentiles
from devtools.faults.records import FaultKind

# How many offending ids a section lists before it only counts.
SHOWN = 15


@dataclass(frozen=True)
class RunInfo:
    """What the report says about the run itself."""

    mode: str
    seed: int
    wall_s: float
    workdir: str
    planned_tasks: int
    rate_per_s: float
    notes: tuple[str, ...] = ()
    # Why the run ended before its drain was done (the figures are then provisional).
    incomplete: str | None = None


def _ms(value: int | None) -> str:
    return "-" if value is None else f"{value:,} ms"


def _pct(p: Percentiles) -> str:
    if p.count == 0:
        return "no starts"
    return f"p50 {_ms(p.p50)}, p99 {_ms(p.p99)}, max {_ms(p.max)} ({p.count:,} runs)"


def _ids(ids: tuple[str, ...]) -> str:
    shown = ", ".join(ids[:SHOWN])
    return shown + (f" ... (+{len(ids) - SHOWN})" if len(ids) > SHOWN else "")


def _tally(counts: tuple[tuple[str, int], ...]) -> str:
    return ", ".join(f"{k} {n}" for k, n in counts) or "-"


def recovery_line(r: KillRecovery) -> str:
    line = (
        f"  {r.kind!s:<17} x{r.count:<3} first start after it within {_ms(r.max_resume_ms)};"
        f" worst lateness of what came due {_ms(r.max_delay_ms)}"
    )
    if r.isolated == 0:
        line += " (none isolated)"
    elif r.isolated < r.count:
        line += f" ({_ms(r.max_isolated_delay_ms)} over the {r.isolated} isolated)"
    if r.kind in (FaultKind.STOP_CASSANDRA, FaultKind.STOP_KAFKA):
        line += f"; caught up {_ms(r.max_catch_up_ms)} after it ended"
    if r.redelivered:
        line += (
            f"; {r.redelivered} in-flight runs run again,"
            f" the last {_ms(r.max_redelivery_ms)} after the kill"
        )
    return line


def _violations(r: CheckResult) -> list[str]:
    lines = [f"  lost:                 {len(r.lost)}  {_ids(r.lost)}"]
    if r.lost:
        lines.append(f"    final states: {_tally(r.lost_states)}; due near: {_tally(r.lost_near)}")
    lines.append(f"  early:                {len(r.early)}")
    lines += [
        f"    {e.start.task_id} attempt {e.start.attempt} started {e.by_ms} ms before due"
        for e in r.early[:SHOWN]
    ]
    lines.append(f"  cancelled but ran:    {len(r.cancelled_but_ran)}  {_ids(r.cancelled_but_ran)}")
    lines.append(f"  key inconsistent:     {len(r.key_inconsistent)}  {_ids(r.key_inconsistent)}")
    lines.append(f"  retry/DLQ inexact:    {len(r.dead_letter_inexact)}")
    lines += [
        f"    {i.task_id} ({i.kind}): expected {i.expected}; found {i.found}"
        for i in r.dead_letter_inexact[:SHOWN]
    ]
    lines.append(f"  crashed on its own:   {len(r.crashes)}")
    for c in r.crashes[:SHOWN]:
        lines.append(
            f"    {c.role} exited with code {c.code} at {c.at_ms} (restarted; log {c.log})"
        )
        if c.last_line:
            lines.append(f"      its last line: {c.last_line}")
    return lines


def _observations(r: CheckResult) -> list[str]:
    d = r.duplicates
    by_fault = _tally(d.by_fault)
    unfinished = _ids(tuple(f"{f.task_id}={f.state}" for f in r.unfinished))
    return [
        f"  duplicates:           {d.total} extra starts over {d.runs_affected} runs"
        f" (by fault: {by_fault})",
        f"  unexpected dead letters: {len(r.unexpected_dead_letters)}"
        f"  {_ids(r.unexpected_dead_letters)}",
        f"  not finished as meant:   {len(r.unfinished)}  {unfinished}",
        f"  lateness due → handler start, inside faults:  {_pct(r.lateness_inside)}",
        f"  lateness due → handler start, outside faults: {_pct(r.lateness_outside)}",
    ]


def _share(n: int, of: int) -> str:
    return f"{n:,} ({100 * n / of:.2f} %)" if of else f"{n:,}"


def _whole_run(r: CheckResult) -> list[str]:
    """Lateness of every attempt and the violations per accepted task: the figures that say
    what faults cost when they come often, which the isolated ones above leave out."""
    w, per = r.whole_run, r.accepted
    lines = [
        f"  lateness due → handler start, every attempt: {_pct(w.lateness)}",
        f"    more than {LATE_MS // 1000} s late: {_share(w.late, w.lateness.count)}",
        f"    due → fired (dispatchers, store):        {_pct(w.dispatch)}",
        f"    fired → handler start (queue, workers):  {_pct(w.delivery)}",
        "    by the last fault begun before the due time:",
        *[f"      {kind:<17} {_pct(p)}" for kind, p in w.by_last_fault],
        f"  per accepted task ({per:,}): lost {_share(len(r.lost), per)},"
        f" early starts {_share(len(r.early), per)},"
        f" cancelled but ran {_share(len(r.cancelled_but_ran), per)},",
        f"    duplicate starts {_share(r.duplicates.total, per)}",
        f"  accepted more than {ACCEPTED_LATE_MS // 1000} s after their due time:"
        f" {_share(w.accepted_after_due, per)}",
    ]
    if w.fault_every_ms is not None:
        lines.append(f"  faults began every {w.fault_every_ms / 1000:.1f} s on average")
    return lines


def _at_rate(rate_per_s: float) -> str:
    return f" at {rate_per_s:g}/s" if rate_per_s else ""


def render(r: CheckResult, info: RunInfo) -> str:
    """The report as text: the run, the workload, the faults, violations, observations."""
    faults = ", ".join(f"{k} x{n}" for k, n in r.fault_counts) or "none"
    verdict = "FAILED: " + "; ".join(r.failures) if r.failed else "PASSED: no violation found"
    if info.incomplete is not None:
        verdict = f"INCOMPLETE ({info.incomplete}); figures provisional. {verdict}"
    lines = [
        f"=== tikk fault suite, mode {info.mode}, seed {info.seed} ===",
        f"wall time {info.wall_s:.0f} s; records and logs in {info.workdir}",
        f"workload: {info.planned_tasks:,} tasks planned{_at_rate(info.rate_per_s)};"
        f" {r.created:,} create requests sent, {r.accepted:,} accepted"
        f" ({r.accepted_after_retry} after an indeterminate attempt), {r.refused} refused,"
        f" {r.indeterminate} never settled",
        f"cancels: {r.cancels_ok} ok, {r.cancels_refused} refused,"
        f" {r.cancels_indeterminate} indeterminate; bulk cancels left {r.bulk_cancelled} of"
        f" {r.bulk_batched} batched tasks cancelled; handler starts: {r.starts:,}",
        f"faults: {faults}",
        "violations:",
        *_violations(r),
        "observations:",
        *_observations(r),
        "whole run:",
        *_whole_run(r),
        "recovery per fault kind:",
        *[recovery_line(k) for k in r.recovery],
        *[f"note: {n}" for n in info.notes],
        verdict,
    ]
    return "\n".join(line.rstrip() for line in lines)
