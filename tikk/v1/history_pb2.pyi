import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from tikk.v1 import tasks_pb2 as _tasks_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RunStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_STATUS_UNSPECIFIED: _ClassVar[RunStatus]
    RUN_STATUS_SUCCEEDED: _ClassVar[RunStatus]
    RUN_STATUS_FAILED: _ClassVar[RunStatus]
    RUN_STATUS_DEAD_LETTERED: _ClassVar[RunStatus]
    RUN_STATUS_CANCELLED: _ClassVar[RunStatus]

class OccurrenceOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OCCURRENCE_OUTCOME_UNSPECIFIED: _ClassVar[OccurrenceOutcome]
    OCCURRENCE_OUTCOME_FIRED: _ClassVar[OccurrenceOutcome]
    OCCURRENCE_OUTCOME_SKIPPED_OVERLAP: _ClassVar[OccurrenceOutcome]
    OCCURRENCE_OUTCOME_MISSED: _ClassVar[OccurrenceOutcome]
    OCCURRENCE_OUTCOME_SKIPPED_PAUSED: _ClassVar[OccurrenceOutcome]
    OCCURRENCE_OUTCOME_BACKFILLED: _ClassVar[OccurrenceOutcome]
    OCCURRENCE_OUTCOME_TRIGGERED: _ClassVar[OccurrenceOutcome]
RUN_STATUS_UNSPECIFIED: RunStatus
RUN_STATUS_SUCCEEDED: RunStatus
RUN_STATUS_FAILED: RunStatus
RUN_STATUS_DEAD_LETTERED: RunStatus
RUN_STATUS_CANCELLED: RunStatus
OCCURRENCE_OUTCOME_UNSPECIFIED: OccurrenceOutcome
OCCURRENCE_OUTCOME_FIRED: OccurrenceOutcome
OCCURRENCE_OUTCOME_SKIPPED_OVERLAP: OccurrenceOutcome
OCCURRENCE_OUTCOME_MISSED: OccurrenceOutcome
OCCURRENCE_OUTCOME_SKIPPED_PAUSED: OccurrenceOutcome
OCCURRENCE_OUTCOME_BACKFILLED: OccurrenceOutcome
OCCURRENCE_OUTCOME_TRIGGERED: OccurrenceOutcome

class Run(_message.Message):
    __slots__ = ("namespace", "run_id", "task_id", "queue", "handler", "attempt", "status", "scheduled_time", "fired_time", "start_time", "finish_time", "worker_id", "error_type", "error_message", "output", "idempotency_key", "due_time", "record_time", "traceback")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    HANDLER_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_TIME_FIELD_NUMBER: _ClassVar[int]
    FIRED_TIME_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    FINISH_TIME_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_TYPE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    DUE_TIME_FIELD_NUMBER: _ClassVar[int]
    RECORD_TIME_FIELD_NUMBER: _ClassVar[int]
    TRACEBACK_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    run_id: str
    task_id: str
    queue: str
    handler: str
    attempt: int
    status: RunStatus
    scheduled_time: _timestamp_pb2.Timestamp
    fired_time: _timestamp_pb2.Timestamp
    start_time: _timestamp_pb2.Timestamp
    finish_time: _timestamp_pb2.Timestamp
    worker_id: str
    error_type: str
    error_message: str
    output: bytes
    idempotency_key: str
    due_time: _timestamp_pb2.Timestamp
    record_time: _timestamp_pb2.Timestamp
    traceback: str
    def __init__(self, namespace: _Optional[str] = ..., run_id: _Optional[str] = ..., task_id: _Optional[str] = ..., queue: _Optional[str] = ..., handler: _Optional[str] = ..., attempt: _Optional[int] = ..., status: _Optional[_Union[RunStatus, str]] = ..., scheduled_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., fired_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finish_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., worker_id: _Optional[str] = ..., error_type: _Optional[str] = ..., error_message: _Optional[str] = ..., output: _Optional[bytes] = ..., idempotency_key: _Optional[str] = ..., due_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., record_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., traceback: _Optional[str] = ...) -> None: ...

class ListTaskRunsRequest(_message.Message):
    __slots__ = ("namespace", "task_id", "page_size", "page_token")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    task_id: str
    page_size: int
    page_token: str
    def __init__(self, namespace: _Optional[str] = ..., task_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListRunsRequest(_message.Message):
    __slots__ = ("namespace", "queue", "status", "start_time", "end_time", "page_size", "page_token")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    queue: str
    status: RunStatus
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    page_size: int
    page_token: str
    def __init__(self, namespace: _Optional[str] = ..., queue: _Optional[str] = ..., status: _Optional[_Union[RunStatus, str]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListRunsResponse(_message.Message):
    __slots__ = ("runs", "next_page_token")
    RUNS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[Run]
    next_page_token: str
    def __init__(self, runs: _Optional[_Iterable[_Union[Run, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetRunRequest(_message.Message):
    __slots__ = ("namespace", "run_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    run_id: str
    def __init__(self, namespace: _Optional[str] = ..., run_id: _Optional[str] = ...) -> None: ...

class ListDeadLettersRequest(_message.Message):
    __slots__ = ("namespace", "queue", "page_size", "page_token")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    queue: str
    page_size: int
    page_token: str
    def __init__(self, namespace: _Optional[str] = ..., queue: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListDeadLettersResponse(_message.Message):
    __slots__ = ("tasks", "next_page_token")
    TASKS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[_tasks_pb2.Task]
    next_page_token: str
    def __init__(self, tasks: _Optional[_Iterable[_Union[_tasks_pb2.Task, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class RedriveTaskRequest(_message.Message):
    __slots__ = ("namespace", "task_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    task_id: str
    def __init__(self, namespace: _Optional[str] = ..., task_id: _Optional[str] = ...) -> None: ...

class PurgeDeadLetterRequest(_message.Message):
    __slots__ = ("namespace", "task_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    task_id: str
    def __init__(self, namespace: _Optional[str] = ..., task_id: _Optional[str] = ...) -> None: ...

class ScheduleOccurrence(_message.Message):
    __slots__ = ("namespace", "schedule_id", "nominal_time", "fire_time", "outcome", "decide_time", "lateness", "task_id", "reason")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    NOMINAL_TIME_FIELD_NUMBER: _ClassVar[int]
    FIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    DECIDE_TIME_FIELD_NUMBER: _ClassVar[int]
    LATENESS_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    schedule_id: str
    nominal_time: _timestamp_pb2.Timestamp
    fire_time: _timestamp_pb2.Timestamp
    outcome: OccurrenceOutcome
    decide_time: _timestamp_pb2.Timestamp
    lateness: _duration_pb2.Duration
    task_id: str
    reason: str
    def __init__(self, namespace: _Optional[str] = ..., schedule_id: _Optional[str] = ..., nominal_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., fire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., outcome: _Optional[_Union[OccurrenceOutcome, str]] = ..., decide_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., lateness: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., task_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class ListScheduleOccurrencesRequest(_message.Message):
    __slots__ = ("namespace", "schedule_id", "start_time", "end_time", "outcome", "page_size", "page_token")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    schedule_id: str
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    outcome: OccurrenceOutcome
    page_size: int
    page_token: str
    def __init__(self, namespace: _Optional[str] = ..., schedule_id: _Optional[str] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., outcome: _Optional[_Union[OccurrenceOutcome, str]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListScheduleOccurrencesResponse(_message.Message):
    __slots__ = ("occurrences", "next_page_token")
    OCCURRENCES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    occurrences: _containers.RepeatedCompositeFieldContainer[ScheduleOccurrence]
    next_page_token: str
    def __init__(self, occurrences: _Optional[_Iterable[_Union[ScheduleOccurrence, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...
