"""Request validation (``server.api.validation`` and the conversions in ``server/api``):
whatever a client puts in a request becomes a domain object or ``InvalidArgument`` naming a
field, never another exception; what is accepted keeps its values (nothing is trimmed)."""

from __future__ import annotations

from typing import Any

from google.protobuf.message import Message
from hypothesis import example, given
from hypothesis import strategies as st

from devtools.fuzz.messages import message
from server.api import validation
from server.api.messages import task_to_proto
from server.api.schedules import new_schedule, schedule_to_proto
from tikk.errors import InvalidArgument
from tikk.model import DEFAULT_NAMESPACE, Task
from tikk.schedules.model import Schedule
from tikk.settings import Limits
from tikk.text_rules import hidden_kind
from tikk.v1 import schedules_pb2, tasks_pb2

LIMITS = Limits()
SHARDS = 64
NOW_MS = 1_790_000_000_000


def _requests(kind: type[Message]) -> st.SearchStrategy[Any]:
    return message(kind.DESCRIPTOR)  # type: ignore[arg-type]


def _task_or_refusal(req: tasks_pb2.CreateTaskRequest) -> Task | None:
    try:
        return validation.create_task(req, LIMITS, SHARDS, NOW_MS)
    except InvalidArgument as exc:
        assert exc.field and exc.reason
        return None


@given(_requests(tasks_pb2.CreateTaskRequest))
@example(tasks_pb2.CreateTaskRequest(queue="q", handler="h", run_at={"seconds": 2**62}))
@example(tasks_pb2.CreateTaskRequest(queue="q", handler="h", delay={"seconds": -1}))
@example(
    tasks_pb2.CreateTaskRequest(queue="q", handler="h", retry_policy={"multiplier": float("nan")})
)
@example(tasks_pb2.CreateTaskRequest(queue="q", handler="h", labels={"k": "\x00"}))
def test_any_create_request_is_a_task_or_refused(req: tasks_pb2.CreateTaskRequest) -> None:
    task = _task_or_refusal(req)
    if task is None:
        return
    assert task.namespace == (req.namespace or DEFAULT_NAMESPACE)
    assert (task.queue, task.handler, task.payload) == (req.queue, req.handler, req.payload)
    assert dict(task.labels) == dict(req.labels)
    assert not req.task_id or task.task_id == req.task_id
    assert task.due_ms >= NOW_MS and 0 <= task.shard < SHARDS
    assert 1 <= task.retry.max_attempts <= LIMITS.max_attempts
    assert task.retry.initial_backoff_ms <= task.retry.max_backoff_ms


_NAME = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_-]{0,20}", fullmatch=True).filter(
    lambda s: not s.endswith("_dlq")
)
# Names: printable text of any script (``tikk.text_rules``: no control, bidi, invisible,
# separator, surrogate or unassigned character; the categories, then the few letters and marks
# that are drawn as nothing).
_TEXT = st.text(
    st.characters(exclude_categories=["Cc", "Cf", "Cs", "Cn", "Zl", "Zp"]).filter(
        lambda c: hidden_kind(c) is None
    ),
    min_size=1,
    max_size=40,
)


@st.composite
def valid_creates(draw: st.DrawFn) -> tasks_pb2.CreateTaskRequest:
    req = tasks_pb2.CreateTaskRequest(
        namespace=draw(st.just("") | _NAME),
        task_id=draw(st.just("") | _NAME),
        queue=draw(_NAME),
        handler=draw(_TEXT),
        payload=draw(st.binary(max_size=100)),
        labels=draw(st.dictionaries(_NAME, _TEXT.filter(str.isprintable), max_size=3)),
    )
    if draw(st.booleans()):
        req.delay.FromMilliseconds(draw(st.integers(0, 10**10)))
    return req


@given(valid_creates())
def test_a_valid_create_round_trips_through_the_task_message(
    req: tasks_pb2.CreateTaskRequest,
) -> None:
    task = _task_or_refusal(req)
    assert task is not None
    out = task_to_proto(task)
    assert (out.queue, out.handler, out.payload) == (req.queue, req.handler, req.payload)
    assert dict(out.labels) == dict(req.labels)
    assert out.namespace == (req.namespace or DEFAULT_NAMESPACE)
    assert out.due_time.ToMilliseconds() == NOW_MS + req.delay.ToMilliseconds()


def _schedule_or_refusal(msg: schedules_pb2.Schedule) -> Schedule | None:
    try:
        return new_schedule(msg, LIMITS, SHARDS, NOW_MS)
    except InvalidArgument as exc:
        assert exc.field and exc.reason
        return None


@given(_requests(schedules_pb2.Schedule))
@example(schedules_pb2.Schedule(id="s", queue="q", handler="h", spec={"cron": "* * * * *,*/1"}))
@example(schedules_pb2.Schedule(id="s", queue="q", handler="h", spec={"timezone": "\x80" * 300}))
def test_any_schedule_is_a_schedule_or_refused(msg: schedules_pb2.Schedule) -> None:
    schedule = _schedule_or_refusal(msg)
    if schedule is None:
        return
    # What was accepted comes back the same through the API's own message.
    again = new_schedule(schedule_to_proto(schedule), LIMITS, SHARDS, NOW_MS)
    assert (again.spec, again.action, again.policy) == (
        schedule.spec, schedule.action, schedule.policy,
    )  # fmt: skip


@given(st.integers(-(2**31), 2**31 - 1))
def test_enum_numbers_are_known_values_or_refused(value: int) -> None:
    for convert in (validation.task_state, validation.run_status, validation.occurrence_outcome):
        try:
            known = convert(value)
        except InvalidArgument as exc:
            assert exc.field in ("state", "status", "outcome")
            continue
        assert known is None if value == 0 else known == value


@given(st.one_of(st.text(max_size=30), st.integers(-(2**80), 2**80).map(str)))
@example("1" * 5_000)  # more digits than int() converts by default
@example("٣")  # a digit, but not an ASCII one
@example(" 1")
def test_expected_versions_are_positive_numbers_or_refused(text: str) -> None:
    try:
        version = validation.expected_version(text)
    except InvalidArgument as exc:
        assert exc.field == "expected_version"
        return
    assert version is None if not text else version is not None and version >= 1
