import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from tikk.v1 import tasks_pb2 as _tasks_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class BulkVerb(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BULK_VERB_UNSPECIFIED: _ClassVar[BulkVerb]
    BULK_VERB_CANCEL: _ClassVar[BulkVerb]
    BULK_VERB_REDRIVE: _ClassVar[BulkVerb]
    BULK_VERB_PURGE: _ClassVar[BulkVerb]
    BULK_VERB_RECOUNT: _ClassVar[BulkVerb]

class BulkActionState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BULK_ACTION_STATE_UNSPECIFIED: _ClassVar[BulkActionState]
    BULK_ACTION_STATE_RUNNING: _ClassVar[BulkActionState]
    BULK_ACTION_STATE_SUCCEEDED: _ClassVar[BulkActionState]
    BULK_ACTION_STATE_STOPPED: _ClassVar[BulkActionState]
    BULK_ACTION_STATE_FAILED: _ClassVar[BulkActionState]
BULK_VERB_UNSPECIFIED: BulkVerb
BULK_VERB_CANCEL: BulkVerb
BULK_VERB_REDRIVE: BulkVerb
BULK_VERB_PURGE: BulkVerb
BULK_VERB_RECOUNT: BulkVerb
BULK_ACTION_STATE_UNSPECIFIED: BulkActionState
BULK_ACTION_STATE_RUNNING: BulkActionState
BULK_ACTION_STATE_SUCCEEDED: BulkActionState
BULK_ACTION_STATE_STOPPED: BulkActionState
BULK_ACTION_STATE_FAILED: BulkActionState

class TaskFilter(_message.Message):
    __slots__ = ("namespace", "queue", "label_selector", "state", "due_after", "due_before", "changed_after", "changed_before", "error_type")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    LABEL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    DUE_AFTER_FIELD_NUMBER: _ClassVar[int]
    DUE_BEFORE_FIELD_NUMBER: _ClassVar[int]
    CHANGED_AFTER_FIELD_NUMBER: _ClassVar[int]
    CHANGED_BEFORE_FIELD_NUMBER: _ClassVar[int]
    ERROR_TYPE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    queue: str
    label_selector: str
    state: _tasks_pb2.TaskState
    due_after: _timestamp_pb2.Timestamp
    due_before: _timestamp_pb2.Timestamp
    changed_after: _timestamp_pb2.Timestamp
    changed_before: _timestamp_pb2.Timestamp
    error_type: str
    def __init__(self, namespace: _Optional[str] = ..., queue: _Optional[str] = ..., label_selector: _Optional[str] = ..., state: _Optional[_Union[_tasks_pb2.TaskState, str]] = ..., due_after: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., due_before: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., changed_after: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., changed_before: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., error_type: _Optional[str] = ...) -> None: ...

class CountTasksRequest(_message.Message):
    __slots__ = ("filter",)
    FILTER_FIELD_NUMBER: _ClassVar[int]
    filter: TaskFilter
    def __init__(self, filter: _Optional[_Union[TaskFilter, _Mapping]] = ...) -> None: ...

class CountTasksResponse(_message.Message):
    __slots__ = ("count", "complete", "read", "sample")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    READ_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_FIELD_NUMBER: _ClassVar[int]
    count: int
    complete: bool
    read: int
    sample: _containers.RepeatedCompositeFieldContainer[_tasks_pb2.Task]
    def __init__(self, count: _Optional[int] = ..., complete: _Optional[bool] = ..., read: _Optional[int] = ..., sample: _Optional[_Iterable[_Union[_tasks_pb2.Task, _Mapping]]] = ...) -> None: ...

class BulkActionRequest(_message.Message):
    __slots__ = ("filter", "dry_run", "action_id")
    FILTER_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    ACTION_ID_FIELD_NUMBER: _ClassVar[int]
    filter: TaskFilter
    dry_run: bool
    action_id: str
    def __init__(self, filter: _Optional[_Union[TaskFilter, _Mapping]] = ..., dry_run: _Optional[bool] = ..., action_id: _Optional[str] = ...) -> None: ...

class BulkAction(_message.Message):
    __slots__ = ("namespace", "id", "verb", "filter", "state", "read", "matched", "acted", "skipped", "failed", "error", "create_time", "update_time", "finish_time", "dry_run", "complete", "sample")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    VERB_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    READ_FIELD_NUMBER: _ClassVar[int]
    MATCHED_FIELD_NUMBER: _ClassVar[int]
    ACTED_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    FINISH_TIME_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    id: str
    verb: BulkVerb
    filter: TaskFilter
    state: BulkActionState
    read: int
    matched: int
    acted: int
    skipped: int
    failed: int
    error: str
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    finish_time: _timestamp_pb2.Timestamp
    dry_run: bool
    complete: bool
    sample: _containers.RepeatedCompositeFieldContainer[_tasks_pb2.Task]
    def __init__(self, namespace: _Optional[str] = ..., id: _Optional[str] = ..., verb: _Optional[_Union[BulkVerb, str]] = ..., filter: _Optional[_Union[TaskFilter, _Mapping]] = ..., state: _Optional[_Union[BulkActionState, str]] = ..., read: _Optional[int] = ..., matched: _Optional[int] = ..., acted: _Optional[int] = ..., skipped: _Optional[int] = ..., failed: _Optional[int] = ..., error: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finish_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., dry_run: _Optional[bool] = ..., complete: _Optional[bool] = ..., sample: _Optional[_Iterable[_Union[_tasks_pb2.Task, _Mapping]]] = ...) -> None: ...

class RecountUsageRequest(_message.Message):
    __slots__ = ("namespace", "action_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    ACTION_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    action_id: str
    def __init__(self, namespace: _Optional[str] = ..., action_id: _Optional[str] = ...) -> None: ...

class GetBulkActionRequest(_message.Message):
    __slots__ = ("namespace", "id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    id: str
    def __init__(self, namespace: _Optional[str] = ..., id: _Optional[str] = ...) -> None: ...

class ListBulkActionsRequest(_message.Message):
    __slots__ = ("namespace", "page_size", "page_token")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    page_size: int
    page_token: str
    def __init__(self, namespace: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListBulkActionsResponse(_message.Message):
    __slots__ = ("actions", "next_page_token")
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    actions: _containers.RepeatedCompositeFieldContainer[BulkAction]
    next_page_token: str
    def __init__(self, actions: _Optional[_Iterable[_Union[BulkAction, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class StopBulkActionRequest(_message.Message):
    __slots__ = ("namespace", "id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    id: str
    def __init__(self, namespace: _Optional[str] = ..., id: _Optional[str] = ...) -> None: ...
