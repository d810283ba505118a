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

class ResultKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESULT_KIND_UNSPECIFIED: _ClassVar[ResultKind]
    RESULT_KIND_SUCCEEDED: _ClassVar[ResultKind]
    RESULT_KIND_FAILED: _ClassVar[ResultKind]
    RESULT_KIND_RETRY: _ClassVar[ResultKind]
    RESULT_KIND_FAILED_PERMANENTLY: _ClassVar[ResultKind]
    RESULT_KIND_STARTED: _ClassVar[ResultKind]
    RESULT_KIND_CANCELLED: _ClassVar[ResultKind]
RESULT_KIND_UNSPECIFIED: ResultKind
RESULT_KIND_SUCCEEDED: ResultKind
RESULT_KIND_FAILED: ResultKind
RESULT_KIND_RETRY: ResultKind
RESULT_KIND_FAILED_PERMANENTLY: ResultKind
RESULT_KIND_STARTED: ResultKind
RESULT_KIND_CANCELLED: ResultKind

class Delivery(_message.Message):
    __slots__ = ("namespace", "task_id", "queue", "handler", "payload", "labels", "attempt", "max_attempts", "scheduled_time", "due_time", "fired_time", "idempotency_key", "trace_context", "start_timeout", "token", "execution_timeout")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class TraceContextEntry(_message.Message):
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
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_TIME_FIELD_NUMBER: _ClassVar[int]
    DUE_TIME_FIELD_NUMBER: _ClassVar[int]
    FIRED_TIME_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    TRACE_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    START_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    task_id: str
    queue: str
    handler: str
    payload: bytes
    labels: _containers.ScalarMap[str, str]
    attempt: int
    max_attempts: int
    scheduled_time: _timestamp_pb2.Timestamp
    due_time: _timestamp_pb2.Timestamp
    fired_time: _timestamp_pb2.Timestamp
    idempotency_key: str
    trace_context: _containers.ScalarMap[str, str]
    start_timeout: _duration_pb2.Duration
    token: str
    execution_timeout: _duration_pb2.Duration
    def __init__(self, namespace: _Optional[str] = ..., task_id: _Optional[str] = ..., queue: _Optional[str] = ..., handler: _Optional[str] = ..., payload: _Optional[bytes] = ..., labels: _Optional[_Mapping[str, str]] = ..., attempt: _Optional[int] = ..., max_attempts: _Optional[int] = ..., scheduled_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., due_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., fired_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., idempotency_key: _Optional[str] = ..., trace_context: _Optional[_Mapping[str, str]] = ..., start_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., token: _Optional[str] = ..., execution_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class DeadLetterRecord(_message.Message):
    __slots__ = ("delivery", "error_type", "error_message", "dead_lettered_time")
    DELIVERY_FIELD_NUMBER: _ClassVar[int]
    ERROR_TYPE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERED_TIME_FIELD_NUMBER: _ClassVar[int]
    delivery: Delivery
    error_type: str
    error_message: str
    dead_lettered_time: _timestamp_pb2.Timestamp
    def __init__(self, delivery: _Optional[_Union[Delivery, _Mapping]] = ..., error_type: _Optional[str] = ..., error_message: _Optional[str] = ..., dead_lettered_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class RunResult(_message.Message):
    __slots__ = ("run_id", "delivery", "kind", "start_time", "finish_time", "worker_id", "error_type", "error_message", "output", "retry_after", "traceback")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    FINISH_TIME_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_TYPE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    TRACEBACK_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    delivery: Delivery
    kind: ResultKind
    start_time: _timestamp_pb2.Timestamp
    finish_time: _timestamp_pb2.Timestamp
    worker_id: str
    error_type: str
    error_message: str
    output: bytes
    retry_after: _duration_pb2.Duration
    traceback: str
    def __init__(self, run_id: _Optional[str] = ..., delivery: _Optional[_Union[Delivery, _Mapping]] = ..., kind: _Optional[_Union[ResultKind, str]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finish_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., worker_id: _Optional[str] = ..., error_type: _Optional[str] = ..., error_message: _Optional[str] = ..., output: _Optional[bytes] = ..., retry_after: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., traceback: _Optional[str] = ...) -> None: ...

class ResultAck(_message.Message):
    __slots__ = ("run_id", "code", "message")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    code: int
    message: str
    def __init__(self, run_id: _Optional[str] = ..., code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class RunResultBatch(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[RunResult]
    def __init__(self, results: _Optional[_Iterable[_Union[RunResult, _Mapping]]] = ...) -> None: ...

class ResultAckBatch(_message.Message):
    __slots__ = ("acks",)
    ACKS_FIELD_NUMBER: _ClassVar[int]
    acks: _containers.RepeatedCompositeFieldContainer[ResultAck]
    def __init__(self, acks: _Optional[_Iterable[_Union[ResultAck, _Mapping]]] = ...) -> None: ...

class GetWorkerConfigRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetWorkerConfigResponse(_message.Message):
    __slots__ = ("queue_url", "visibility_timeout", "server_time")
    QUEUE_URL_FIELD_NUMBER: _ClassVar[int]
    VISIBILITY_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    SERVER_TIME_FIELD_NUMBER: _ClassVar[int]
    queue_url: str
    visibility_timeout: _duration_pb2.Duration
    server_time: _timestamp_pb2.Timestamp
    def __init__(self, queue_url: _Optional[str] = ..., visibility_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., server_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class RunningAttempt(_message.Message):
    __slots__ = ("namespace", "task_id", "queue", "attempt", "due_time")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    DUE_TIME_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    task_id: str
    queue: str
    attempt: int
    due_time: _timestamp_pb2.Timestamp
    def __init__(self, namespace: _Optional[str] = ..., task_id: _Optional[str] = ..., queue: _Optional[str] = ..., attempt: _Optional[int] = ..., due_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class CheckCancellationsRequest(_message.Message):
    __slots__ = ("runs",)
    RUNS_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[RunningAttempt]
    def __init__(self, runs: _Optional[_Iterable[_Union[RunningAttempt, _Mapping]]] = ...) -> None: ...

class CheckCancellationsResponse(_message.Message):
    __slots__ = ("cancelled",)
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    cancelled: _containers.RepeatedCompositeFieldContainer[RunningAttempt]
    def __init__(self, cancelled: _Optional[_Iterable[_Union[RunningAttempt, _Mapping]]] = ...) -> None: ...
