import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TaskState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_STATE_UNSPECIFIED: _ClassVar[TaskState]
    TASK_STATE_SCHEDULED: _ClassVar[TaskState]
    TASK_STATE_DISPATCHED: _ClassVar[TaskState]
    TASK_STATE_SUCCEEDED: _ClassVar[TaskState]
    TASK_STATE_DEAD_LETTERED: _ClassVar[TaskState]
    TASK_STATE_CANCELLED: _ClassVar[TaskState]
TASK_STATE_UNSPECIFIED: TaskState
TASK_STATE_SCHEDULED: TaskState
TASK_STATE_DISPATCHED: TaskState
TASK_STATE_SUCCEEDED: TaskState
TASK_STATE_DEAD_LETTERED: TaskState
TASK_STATE_CANCELLED: TaskState

class RetryPolicy(_message.Message):
    __slots__ = ("max_attempts", "initial_backoff", "multiplier", "max_backoff", "jitter")
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    INITIAL_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    MULTIPLIER_FIELD_NUMBER: _ClassVar[int]
    MAX_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    JITTER_FIELD_NUMBER: _ClassVar[int]
    max_attempts: int
    initial_backoff: _duration_pb2.Duration
    multiplier: float
    max_backoff: _duration_pb2.Duration
    jitter: float
    def __init__(self, max_attempts: _Optional[int] = ..., initial_backoff: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., multiplier: _Optional[float] = ..., max_backoff: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., jitter: _Optional[float] = ...) -> None: ...

class Task(_message.Message):
    __slots__ = ("namespace", "id", "queue", "handler", "payload", "labels", "retry_policy", "state", "attempt", "due_time", "scheduled_time", "create_time", "update_time", "idempotency_key", "last_error_type", "last_error_message", "shard", "schedule_id", "start_timeout", "execution_timeout")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    HANDLER_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    RETRY_POLICY_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    DUE_TIME_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_TIME_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_TYPE_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    START_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    id: str
    queue: str
    handler: str
    payload: bytes
    labels: _containers.ScalarMap[str, str]
    retry_policy: RetryPolicy
    state: TaskState
    attempt: int
    due_time: _timestamp_pb2.Timestamp
    scheduled_time: _timestamp_pb2.Timestamp
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    idempotency_key: str
    last_error_type: str
    last_error_message: str
    shard: int
    schedule_id: str
    start_timeout: _duration_pb2.Duration
    execution_timeout: _duration_pb2.Duration
    def __init__(self, namespace: _Optional[str] = ..., id: _Optional[str] = ..., queue: _Optional[str] = ..., handler: _Optional[str] = ..., payload: _Optional[bytes] = ..., labels: _Optional[_Mapping[str, str]] = ..., retry_policy: _Optional[_Union[RetryPolicy, _Mapping]] = ..., state: _Optional[_Union[TaskState, str]] = ..., attempt: _Optional[int] = ..., due_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., scheduled_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., idempotency_key: _Optional[str] = ..., last_error_type: _Optional[str] = ..., last_error_message: _Optional[str] = ..., shard: _Optional[int] = ..., schedule_id: _Optional[str] = ..., start_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., execution_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class CreateTaskRequest(_message.Message):
    __slots__ = ("namespace", "task_id", "queue", "handler", "payload", "labels", "retry_policy", "run_at", "delay", "start_timeout", "execution_timeout")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    HANDLER_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    RETRY_POLICY_FIELD_NUMBER: _ClassVar[int]
    RUN_AT_FIELD_NUMBER: _ClassVar[int]
    DELAY_FIELD_NUMBER: _ClassVar[int]
    START_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    task_id: str
    queue: str
    handler: str
    payload: bytes
    labels: _containers.ScalarMap[str, str]
    retry_policy: RetryPolicy
    run_at: _timestamp_pb2.Timestamp
    delay: _duration_pb2.Duration
    start_timeout: _duration_pb2.Duration
    execution_timeout: _duration_pb2.Duration
    def __init__(self, namespace: _Optional[str] = ..., task_id: _Optional[str] = ..., queue: _Optional[str] = ..., handler: _Optional[str] = ..., payload: _Optional[bytes] = ..., labels: _Optional[_Mapping[str, str]] = ..., retry_policy: _Optional[_Union[RetryPolicy, _Mapping]] = ..., run_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., start_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., execution_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class CreateTaskResponse(_message.Message):
    __slots__ = ("task", "created")
    TASK_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    task: Task
    created: bool
    def __init__(self, task: _Optional[_Union[Task, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class CreateTasksRequest(_message.Message):
    __slots__ = ("tasks",)
    TASKS_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[CreateTaskRequest]
    def __init__(self, tasks: _Optional[_Iterable[_Union[CreateTaskRequest, _Mapping]]] = ...) -> None: ...

class CreateTasksItemResult(_message.Message):
    __slots__ = ("index", "code", "message", "task_id", "created")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    index: int
    code: int
    message: str
    task_id: str
    created: bool
    def __init__(self, index: _Optional[int] = ..., code: _Optional[int] = ..., message: _Optional[str] = ..., task_id: _Optional[str] = ..., created: _Optional[bool] = ...) -> None: ...

class CreateTasksResponse(_message.Message):
    __slots__ = ("results", "accepted", "rejected")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[CreateTasksItemResult]
    accepted: int
    rejected: int
    def __init__(self, results: _Optional[_Iterable[_Union[CreateTasksItemResult, _Mapping]]] = ..., accepted: _Optional[int] = ..., rejected: _Optional[int] = ...) -> None: ...

class ImportTasksRequest(_message.Message):
    __slots__ = ("tasks", "batch_id")
    TASKS_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[CreateTaskRequest]
    batch_id: int
    def __init__(self, tasks: _Optional[_Iterable[_Union[CreateTaskRequest, _Mapping]]] = ..., batch_id: _Optional[int] = ...) -> None: ...

class ImportTasksResponse(_message.Message):
    __slots__ = ("batch_id", "results", "accepted", "rejected", "code", "message")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    batch_id: int
    results: _containers.RepeatedCompositeFieldContainer[CreateTasksItemResult]
    accepted: int
    rejected: int
    code: int
    message: str
    def __init__(self, batch_id: _Optional[int] = ..., results: _Optional[_Iterable[_Union[CreateTasksItemResult, _Mapping]]] = ..., accepted: _Optional[int] = ..., rejected: _Optional[int] = ..., code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class GetTaskRequest(_message.Message):
    __slots__ = ("namespace", "task_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    task_id: str
    def __init__(self, namespace: _Optional[str] = ..., task_id: _Optional[str] = ...) -> None: ...

class CancelTaskRequest(_message.Message):
    __slots__ = ("namespace", "task_id", "stop_running")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    STOP_RUNNING_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    task_id: str
    stop_running: bool
    def __init__(self, namespace: _Optional[str] = ..., task_id: _Optional[str] = ..., stop_running: _Optional[bool] = ...) -> None: ...

class RescheduleTaskRequest(_message.Message):
    __slots__ = ("namespace", "task_id", "run_at", "delay", "payload")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_AT_FIELD_NUMBER: _ClassVar[int]
    DELAY_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    task_id: str
    run_at: _timestamp_pb2.Timestamp
    delay: _duration_pb2.Duration
    payload: bytes
    def __init__(self, namespace: _Optional[str] = ..., task_id: _Optional[str] = ..., run_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., payload: _Optional[bytes] = ...) -> None: ...

class ListTasksRequest(_message.Message):
    __slots__ = ("namespace", "queue", "state", "page_size", "page_token", "label_selector")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    LABEL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    queue: str
    state: TaskState
    page_size: int
    page_token: str
    label_selector: str
    def __init__(self, namespace: _Optional[str] = ..., queue: _Optional[str] = ..., state: _Optional[_Union[TaskState, str]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., label_selector: _Optional[str] = ...) -> None: ...

class ListTasksResponse(_message.Message):
    __slots__ = ("tasks", "next_page_token")
    TASKS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[Task]
    next_page_token: str
    def __init__(self, tasks: _Optional[_Iterable[_Union[Task, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListQueuesRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class QueueInfo(_message.Message):
    __slots__ = ("name", "waiting", "oldest_waiting_age", "consumers", "paused", "paused_time", "max_per_second", "skip_older_than", "held", "held_more")
    NAME_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    OLDEST_WAITING_AGE_FIELD_NUMBER: _ClassVar[int]
    CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    PAUSED_TIME_FIELD_NUMBER: _ClassVar[int]
    MAX_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    SKIP_OLDER_THAN_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    HELD_MORE_FIELD_NUMBER: _ClassVar[int]
    name: str
    waiting: int
    oldest_waiting_age: _duration_pb2.Duration
    consumers: int
    paused: bool
    paused_time: _timestamp_pb2.Timestamp
    max_per_second: float
    skip_older_than: _duration_pb2.Duration
    held: int
    held_more: bool
    def __init__(self, name: _Optional[str] = ..., waiting: _Optional[int] = ..., oldest_waiting_age: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., consumers: _Optional[int] = ..., paused: _Optional[bool] = ..., paused_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., max_per_second: _Optional[float] = ..., skip_older_than: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., held: _Optional[int] = ..., held_more: _Optional[bool] = ...) -> None: ...

class UpdateQueueRequest(_message.Message):
    __slots__ = ("name", "paused", "max_per_second", "skip_older_than")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    MAX_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    SKIP_OLDER_THAN_FIELD_NUMBER: _ClassVar[int]
    name: str
    paused: bool
    max_per_second: float
    skip_older_than: _duration_pb2.Duration
    def __init__(self, name: _Optional[str] = ..., paused: _Optional[bool] = ..., max_per_second: _Optional[float] = ..., skip_older_than: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ListQueuesResponse(_message.Message):
    __slots__ = ("queues", "next_page_token")
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[QueueInfo]
    next_page_token: str
    def __init__(self, queues: _Optional[_Iterable[_Union[QueueInfo, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...
