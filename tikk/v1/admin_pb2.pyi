from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Quotas(_message.Message):
    __slots__ = ("tasks_per_second", "tasks_stored", "schedules", "import_streams", "task_retention_seconds", "history_retention_seconds")
    TASKS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    TASKS_STORED_FIELD_NUMBER: _ClassVar[int]
    SCHEDULES_FIELD_NUMBER: _ClassVar[int]
    IMPORT_STREAMS_FIELD_NUMBER: _ClassVar[int]
    TASK_RETENTION_SECONDS_FIELD_NUMBER: _ClassVar[int]
    HISTORY_RETENTION_SECONDS_FIELD_NUMBER: _ClassVar[int]
    tasks_per_second: int
    tasks_stored: int
    schedules: int
    import_streams: int
    task_retention_seconds: int
    history_retention_seconds: int
    def __init__(self, tasks_per_second: _Optional[int] = ..., tasks_stored: _Optional[int] = ..., schedules: _Optional[int] = ..., import_streams: _Optional[int] = ..., task_retention_seconds: _Optional[int] = ..., history_retention_seconds: _Optional[int] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("tasks_stored",)
    TASKS_STORED_FIELD_NUMBER: _ClassVar[int]
    tasks_stored: int
    def __init__(self, tasks_stored: _Optional[int] = ...) -> None: ...

class GetNamespaceQuotasRequest(_message.Message):
    __slots__ = ("namespace",)
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    def __init__(self, namespace: _Optional[str] = ...) -> None: ...

class SetNamespaceQuotasRequest(_message.Message):
    __slots__ = ("namespace", "quotas")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    QUOTAS_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    quotas: Quotas
    def __init__(self, namespace: _Optional[str] = ..., quotas: _Optional[_Union[Quotas, _Mapping]] = ...) -> None: ...

class RecountNamespaceUsageRequest(_message.Message):
    __slots__ = ("namespace",)
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    def __init__(self, namespace: _Optional[str] = ...) -> None: ...

class NamespaceQuotasResponse(_message.Message):
    __slots__ = ("namespace", "quotas", "effective", "usage")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    QUOTAS_FIELD_NUMBER: _ClassVar[int]
    EFFECTIVE_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    quotas: Quotas
    effective: Quotas
    usage: Usage
    def __init__(self, namespace: _Optional[str] = ..., quotas: _Optional[_Union[Quotas, _Mapping]] = ..., effective: _Optional[_Union[Quotas, _Mapping]] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ...) -> None: ...
