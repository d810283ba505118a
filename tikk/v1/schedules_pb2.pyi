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

class CatchUpPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CATCH_UP_POLICY_UNSPECIFIED: _ClassVar[CatchUpPolicy]
    CATCH_UP_POLICY_SKIP: _ClassVar[CatchUpPolicy]
    CATCH_UP_POLICY_RUN_ONCE: _ClassVar[CatchUpPolicy]
    CATCH_UP_POLICY_RUN_ALL: _ClassVar[CatchUpPolicy]

class OverlapPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OVERLAP_POLICY_UNSPECIFIED: _ClassVar[OverlapPolicy]
    OVERLAP_POLICY_ALLOW: _ClassVar[OverlapPolicy]
    OVERLAP_POLICY_SKIP: _ClassVar[OverlapPolicy]
    OVERLAP_POLICY_BUFFER_ONE: _ClassVar[OverlapPolicy]
    OVERLAP_POLICY_CANCEL_PREVIOUS: _ClassVar[OverlapPolicy]
CATCH_UP_POLICY_UNSPECIFIED: CatchUpPolicy
CATCH_UP_POLICY_SKIP: CatchUpPolicy
CATCH_UP_POLICY_RUN_ONCE: CatchUpPolicy
CATCH_UP_POLICY_RUN_ALL: CatchUpPolicy
OVERLAP_POLICY_UNSPECIFIED: OverlapPolicy
OVERLAP_POLICY_ALLOW: OverlapPolicy
OVERLAP_POLICY_SKIP: OverlapPolicy
OVERLAP_POLICY_BUFFER_ONE: OverlapPolicy
OVERLAP_POLICY_CANCEL_PREVIOUS: OverlapPolicy

class ScheduleSpec(_message.Message):
    __slots__ = ("cron", "interval", "phase", "timezone", "start_time", "end_time", "max_runs", "jitter")
    CRON_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    TIMEZONE_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    MAX_RUNS_FIELD_NUMBER: _ClassVar[int]
    JITTER_FIELD_NUMBER: _ClassVar[int]
    cron: str
    interval: _duration_pb2.Duration
    phase: _duration_pb2.Duration
    timezone: str
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    max_runs: int
    jitter: _duration_pb2.Duration
    def __init__(self, cron: _Optional[str] = ..., interval: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., phase: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., timezone: _Optional[str] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., max_runs: _Optional[int] = ..., jitter: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class SchedulePolicy(_message.Message):
    __slots__ = ("catch_up_window", "catch_up", "catch_up_max_runs", "overlap", "pause_after_failures")
    CATCH_UP_WINDOW_FIELD_NUMBER: _ClassVar[int]
    CATCH_UP_FIELD_NUMBER: _ClassVar[int]
    CATCH_UP_MAX_RUNS_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_FIELD_NUMBER: _ClassVar[int]
    PAUSE_AFTER_FAILURES_FIELD_NUMBER: _ClassVar[int]
    catch_up_window: _duration_pb2.Duration
    catch_up: CatchUpPolicy
    catch_up_max_runs: int
    overlap: OverlapPolicy
    pause_after_failures: int
    def __init__(self, catch_up_window: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., catch_up: _Optional[_Union[CatchUpPolicy, str]] = ..., catch_up_max_runs: _Optional[int] = ..., overlap: _Optional[_Union[OverlapPolicy, str]] = ..., pause_after_failures: _Optional[int] = ...) -> None: ...

class Schedule(_message.Message):
    __slots__ = ("namespace", "id", "spec", "queue", "handler", "payload", "labels", "retry_policy", "policy", "paused", "pause_note", "runs", "consecutive_failures", "next_nominal_time", "next_fire_time", "last_fire_time", "create_time", "update_time", "version")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    HANDLER_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    RETRY_POLICY_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    PAUSE_NOTE_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    CONSECUTIVE_FAILURES_FIELD_NUMBER: _ClassVar[int]
    NEXT_NOMINAL_TIME_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    LAST_FIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    id: str
    spec: ScheduleSpec
    queue: str
    handler: str
    payload: bytes
    labels: _containers.ScalarMap[str, str]
    retry_policy: _tasks_pb2.RetryPolicy
    policy: SchedulePolicy
    paused: bool
    pause_note: str
    runs: int
    consecutive_failures: int
    next_nominal_time: _timestamp_pb2.Timestamp
    next_fire_time: _timestamp_pb2.Timestamp
    last_fire_time: _timestamp_pb2.Timestamp
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    version: str
    def __init__(self, namespace: _Optional[str] = ..., id: _Optional[str] = ..., spec: _Optional[_Union[ScheduleSpec, _Mapping]] = ..., queue: _Optional[str] = ..., handler: _Optional[str] = ..., payload: _Optional[bytes] = ..., labels: _Optional[_Mapping[str, str]] = ..., retry_policy: _Optional[_Union[_tasks_pb2.RetryPolicy, _Mapping]] = ..., policy: _Optional[_Union[SchedulePolicy, _Mapping]] = ..., paused: _Optional[bool] = ..., pause_note: _Optional[str] = ..., runs: _Optional[int] = ..., consecutive_failures: _Optional[int] = ..., next_nominal_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., next_fire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_fire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., version: _Optional[str] = ...) -> None: ...

class CreateScheduleRequest(_message.Message):
    __slots__ = ("schedule",)
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: Schedule
    def __init__(self, schedule: _Optional[_Union[Schedule, _Mapping]] = ...) -> None: ...

class GetScheduleRequest(_message.Message):
    __slots__ = ("namespace", "schedule_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    schedule_id: str
    def __init__(self, namespace: _Optional[str] = ..., schedule_id: _Optional[str] = ...) -> None: ...

class ListSchedulesRequest(_message.Message):
    __slots__ = ("namespace", "page_size", "page_token")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    page_size: int
    page_token: str
    def __init__(self, namespace: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListSchedulesResponse(_message.Message):
    __slots__ = ("schedules", "next_page_token")
    SCHEDULES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    schedules: _containers.RepeatedCompositeFieldContainer[Schedule]
    next_page_token: str
    def __init__(self, schedules: _Optional[_Iterable[_Union[Schedule, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class UpdateScheduleRequest(_message.Message):
    __slots__ = ("schedule", "expected_version")
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    schedule: Schedule
    expected_version: str
    def __init__(self, schedule: _Optional[_Union[Schedule, _Mapping]] = ..., expected_version: _Optional[str] = ...) -> None: ...

class DeleteScheduleRequest(_message.Message):
    __slots__ = ("namespace", "schedule_id", "expected_version")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    schedule_id: str
    expected_version: str
    def __init__(self, namespace: _Optional[str] = ..., schedule_id: _Optional[str] = ..., expected_version: _Optional[str] = ...) -> None: ...

class DeleteScheduleResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PauseScheduleRequest(_message.Message):
    __slots__ = ("namespace", "schedule_id", "note")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    schedule_id: str
    note: str
    def __init__(self, namespace: _Optional[str] = ..., schedule_id: _Optional[str] = ..., note: _Optional[str] = ...) -> None: ...

class ResumeScheduleRequest(_message.Message):
    __slots__ = ("namespace", "schedule_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    schedule_id: str
    def __init__(self, namespace: _Optional[str] = ..., schedule_id: _Optional[str] = ...) -> None: ...

class TriggerScheduleRequest(_message.Message):
    __slots__ = ("namespace", "schedule_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    schedule_id: str
    def __init__(self, namespace: _Optional[str] = ..., schedule_id: _Optional[str] = ...) -> None: ...

class TriggerScheduleResponse(_message.Message):
    __slots__ = ("task",)
    TASK_FIELD_NUMBER: _ClassVar[int]
    task: _tasks_pb2.Task
    def __init__(self, task: _Optional[_Union[_tasks_pb2.Task, _Mapping]] = ...) -> None: ...

class BackfillScheduleRequest(_message.Message):
    __slots__ = ("namespace", "schedule_id", "start_time", "end_time", "dry_run")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    schedule_id: str
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    dry_run: bool
    def __init__(self, namespace: _Optional[str] = ..., schedule_id: _Optional[str] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class BackfillScheduleResponse(_message.Message):
    __slots__ = ("created", "existing", "occurrences")
    CREATED_FIELD_NUMBER: _ClassVar[int]
    EXISTING_FIELD_NUMBER: _ClassVar[int]
    OCCURRENCES_FIELD_NUMBER: _ClassVar[int]
    created: int
    existing: int
    occurrences: _containers.RepeatedCompositeFieldContainer[PreviewedOccurrence]
    def __init__(self, created: _Optional[int] = ..., existing: _Optional[int] = ..., occurrences: _Optional[_Iterable[_Union[PreviewedOccurrence, _Mapping]]] = ...) -> None: ...

class PreviewScheduleRequest(_message.Message):
    __slots__ = ("schedule", "spec", "after_time", "count", "until_time")
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    AFTER_TIME_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    UNTIL_TIME_FIELD_NUMBER: _ClassVar[int]
    schedule: GetScheduleRequest
    spec: ScheduleSpec
    after_time: _timestamp_pb2.Timestamp
    count: int
    until_time: _timestamp_pb2.Timestamp
    def __init__(self, schedule: _Optional[_Union[GetScheduleRequest, _Mapping]] = ..., spec: _Optional[_Union[ScheduleSpec, _Mapping]] = ..., after_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., count: _Optional[int] = ..., until_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class PreviewedOccurrence(_message.Message):
    __slots__ = ("nominal_time", "fire_time", "local_time")
    NOMINAL_TIME_FIELD_NUMBER: _ClassVar[int]
    FIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    LOCAL_TIME_FIELD_NUMBER: _ClassVar[int]
    nominal_time: _timestamp_pb2.Timestamp
    fire_time: _timestamp_pb2.Timestamp
    local_time: str
    def __init__(self, nominal_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., fire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., local_time: _Optional[str] = ...) -> None: ...

class PreviewScheduleResponse(_message.Message):
    __slots__ = ("occurrences",)
    OCCURRENCES_FIELD_NUMBER: _ClassVar[int]
    occurrences: _containers.RepeatedCompositeFieldContainer[PreviewedOccurrence]
    def __init__(self, occurrences: _Optional[_Iterable[_Union[PreviewedOccurrence, _Mapping]]] = ...) -> None: ...
