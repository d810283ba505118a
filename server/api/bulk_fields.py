"""The protobuf form of task filters and bulk actions (``tikk.v1.bulk``), both ways: a
filter in, checked field by field (``InvalidArgument`` naming ``filter.<field>``); an
action or a count out."""

from __future__ import annotations

import re

from server.api import validation
from server.api.messages import task_to_proto
from server.ops.task_search import Count
from tikk.bulk_actions import BulkAction, BulkVerb
from tikk.errors import InvalidArgument
from tikk.label_selectors import LabelSelector, parse_selector
from tikk.model import TaskState
from tikk.settings import Limits
from tikk.task_filters import TaskFilter
from tikk.timestamps import to_timestamp
from tikk.v1 import bulk_pb2

_ACTION_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")


def task_filter(f: bulk_pb2.TaskFilter, limits: Limits) -> TaskFilter:
    """The filter ``f`` writes; ``InvalidArgument`` naming the first field that is wrong."""
    at = validation.optional_timestamp_ms
    return TaskFilter(
        namespace=validation.namespace(f.namespace, "filter.namespace"),
        queue=validation.queue(f.queue, limits, "filter.queue") if f.queue else "",
        labels=label_selector(f.label_selector, "filter.label_selector"),
        state=_state(f.state),
        due_from_ms=at(f, "due_after", "filter.due_after"),
        due_until_ms=at(f, "due_before", "filter.due_before"),
        changed_from_ms=at(f, "changed_after", "filter.changed_after"),
        changed_until_ms=at(f, "changed_before", "filter.changed_before"),
        error_type=_error_type(f.error_type, limits),
    )


def action_id(value: str) -> str:
    if value and not _ACTION_ID.fullmatch(value):
        raise InvalidArgument("action_id", "must be 1-128 of A-Z a-z 0-9 . _ -")
    return value


def label_selector(text: str, field: str = "label_selector") -> LabelSelector | None:
    """The selector ``text`` writes, None if it is empty; errors name ``field``."""
    if not text:
        return None
    try:
        return parse_selector(text)
    except InvalidArgument as exc:
        raise InvalidArgument(field, exc.reason) from None


def _state(value: int) -> TaskState | None:
    try:
        return validation.task_state(value)
    except InvalidArgument as exc:
        raise InvalidArgument("filter.state", exc.reason) from None


def _error_type(value: str, limits: Limits) -> str:
    if len(value) > limits.max_error_type_length:
        raise InvalidArgument("filter.error_type", "longer than any stored error type")
    return value


def filter_to_proto(f: TaskFilter) -> bulk_pb2.TaskFilter:
    msg = bulk_pb2.TaskFilter(
        namespace=f.namespace, queue=f.queue, label_selector=str(f.labels or ""),
        error_type=f.error_type,
    )  # fmt: skip
    msg.state = int(f.state) if f.state else 0  # type: ignore[assignment]
    spans = [
        ("due_after", f.due_from_ms), ("due_before", f.due_until_ms),
        ("changed_after", f.changed_from_ms), ("changed_before", f.changed_until_ms),
    ]  # fmt: skip
    for name, ms in spans:
        if ms is not None:
            getattr(msg, name).CopyFrom(to_timestamp(ms))
    return msg


def action_to_proto(a: BulkAction) -> bulk_pb2.BulkAction:
    p = a.progress
    msg = bulk_pb2.BulkAction(
        namespace=a.namespace, id=a.action_id, verb=int(a.verb),  # type: ignore[arg-type]
        filter=filter_to_proto(a.filter), state=int(a.state),  # type: ignore[arg-type]
        read=p.read, matched=p.matched, acted=p.acted, skipped=p.skipped, failed=p.failed,
        error=p.error, create_time=to_timestamp(a.created_ms),
        update_time=to_timestamp(a.updated_ms),
    )  # fmt: skip
    if a.finished_ms is not None:
        msg.finish_time.CopyFrom(to_timestamp(a.finished_ms))
    return msg


def preview_to_proto(verb: BulkVerb, f: TaskFilter, count: Count) -> bulk_pb2.BulkAction:
    """A dry run's answer: the count as ``matched``, nothing stored."""
    return bulk_pb2.BulkAction(
        namespace=f.namespace, verb=int(verb), filter=filter_to_proto(f),  # type: ignore[arg-type]
        read=count.read, matched=count.matched, dry_run=True, complete=count.complete,
        sample=[task_to_proto(t) for t in count.sample],
    )  # fmt: skip


def count_to_proto(count: Count) -> bulk_pb2.CountTasksResponse:
    return bulk_pb2.CountTasksResponse(
        count=count.matched, complete=count.complete, read=count.read,
        sample=[task_to_proto(t) for t in count.sample],
    )  # fmt: skip
