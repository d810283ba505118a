"""Each message of a request stream is checked against the credential as it stands now, on a
real gRPC server with the auth interceptor; the view's clock moves only when the test moves
it. A revocation ends a stream opened before it, changed grants apply to the next message,
and a refusal is logged at WARNING and counted."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

import grpc
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider

import tikk.credentials
from server.auth.authenticator import CredentialView
from server.auth.interceptor import AuthInterceptor
from tikk.credentials import Credential, Grant, issue_secret, new_credential_id
from tikk.store.credentials import CredentialStore
from tikk.telemetry import OtelTelemetry, Providers
from tikk.v1 import tasks_pb2

IMPORT = "/tikk.v1.TaskService/ImportTasks"
# The view is used as loaded for FRESH_S, and never after MAX_AGE_S (server.auth.authenticator).
FRESH_S, MAX_AGE_S = 2.0, 5.0


class Ticks:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Credentials:
    """The credential store as the view reads it (``list_all``); the test changes what it
    holds as an operator would: revoking, or granting otherwise."""

    held: list[Credential] = field(default_factory=list)

    async def list_all(self) -> Sequence[Credential]:
        return list(self.held)

    def change(self, credential_id: str, **fields: Any) -> None:
        self.held = [replace(c, **fields) if c.credential_id == credential_id else c
                     for c in self.held]  # fmt: skip


@dataclass
class Served:
    channel: grpc.aio.Channel
    store: Credentials
    ticks: Ticks
    credential_id: str
    token: str
    handled: list[int]
    metrics: InMemoryMetricReader

    def reload(self) -> None:
        """Let the view grow too old: the next message waits for a reload of the store."""
        self.ticks.now += MAX_AGE_S + 1

    def open_import(self) -> Any:
        # Written and read by the test (the type stubs know only the iterator form).
        stream: Any = self.channel.stream_stream(
            IMPORT,
            request_serializer=tasks_pb2.ImportTasksRequest.SerializeToString,
            response_deserializer=tasks_pb2.ImportTasksResponse.FromString,
        )
        return stream(metadata=(("authorization", f"Bearer {self.token}"),), timeout=15)

    def refusals(self) -> dict[tuple[str, str], int]:
        """``tikk.auth.refused`` by (method, code)."""
        data = self.metrics.get_metrics_data()
        points: list[Any] = [
            point
            for rm in (data.resource_metrics if data else ())
            for sm in rm.scope_metrics
            for metric in sm.metrics
            if metric.name == "tikk.auth.refused"
            for point in metric.data.data_points
        ]
        return {(p.attributes["method"], p.attributes["code"]): p.value for p in points}


def _batch(batch_id: int, namespace: str = "a") -> tasks_pb2.ImportTasksRequest:
    task = tasks_pb2.CreateTaskRequest(namespace=namespace, queue="q", handler="h")
    return tasks_pb2.ImportTasksRequest(tasks=[task], batch_id=batch_id)


async def _status_at_end(call: Any) -> grpc.StatusCode:
    """The status of a stream ``call``, once the answers it still sends are read (the status
    comes after them)."""
    try:
        while await call.read() is not grpc.aio.EOF:  # type: ignore[attr-defined]
            pass
    except grpc.aio.AioRpcError:
        pass  # the status is read below
    code: grpc.StatusCode = await call.code()
    return code


@pytest.fixture
def telemetry() -> Iterator[tuple[OtelTelemetry, InMemoryMetricReader]]:
    reader = InMemoryMetricReader()
    providers = Providers(TracerProvider(), MeterProvider(metric_readers=[reader]))
    yield OtelTelemetry(providers, owns_providers=False), reader
    providers.shutdown()


@pytest.fixture
async def served(
    telemetry: tuple[OtelTelemetry, InMemoryMetricReader],
) -> AsyncIterator[Served]:
    """A server whose ImportTasks handles each batch it is given (its id noted in
    ``handled``), behind the auth interceptor; a writer on namespace ``a`` to call it."""
    credential_id = new_credential_id()
    issued = issue_secret(credential_id)
    grants = (Grant.parse("write:a"),)
    store = Credentials([Credential(credential_id, "w", issued.salt, issued.secret_hash,
                                    grants, 0)])  # fmt: skip
    ticks = Ticks()
    view = CredentialView(cast(CredentialStore, store), fresh_s=FRESH_S, max_age_s=MAX_AGE_S,
                          monotonic=ticks)  # fmt: skip
    handled: list[int] = []

    async def imports(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
        async for batch in requests:
            handled.append(batch.batch_id)
            yield tasks_pb2.ImportTasksResponse(batch_id=batch.batch_id, accepted=1)

    server = grpc.aio.server(interceptors=[AuthInterceptor(view, telemetry[0])])
    handler = grpc.stream_stream_rpc_method_handler(
        imports,
        request_deserializer=tasks_pb2.ImportTasksRequest.FromString,
        response_serializer=tasks_pb2.ImportTasksResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        [grpc.method_handlers_generic_handler("tikk.v1.TaskService", {"ImportTasks": handler})]
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    yield Served(channel, store, ticks, credential_id, issued.token, handled, telemetry[1])
    await channel.close(None)
    await server.stop(None)


async def test_a_revocation_ends_a_stream_opened_before_it(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="tikk.server.auth")
    call = served.open_import()
    await call.write(_batch(1))
    assert (await call.read()).batch_id == 1
    served.store.change(served.credential_id, revoked_ms=1)
    served.reload()
    await call.write(_batch(2))
    await call.done_writing()  # so that a stream that took the batch ends at once
    assert await _status_at_end(call) == grpc.StatusCode.UNAUTHENTICATED
    assert "invalid or revoked credential" in (await call.details() or "")
    assert served.handled == [1]  # the batch before the revocation stays; the next never ran
    refused = [r for r in caplog.records if r.getMessage().startswith("refused ")]
    assert [r.levelno for r in refused] == [logging.WARNING]
    assert [r.getMessage() for r in refused] == [
        f"refused {IMPORT} for credential {served.credential_id} (UNAUTHENTICATED): "
        "invalid or revoked credential"
    ]
    assert served.token not in caplog.text
    assert served.refusals() == {(IMPORT, "unauthenticated"): 1}


async def test_changed_grants_apply_to_the_next_message_of_a_stream(served: Served) -> None:
    call = served.open_import()
    await call.write(_batch(1, "a"))
    assert (await call.read()).batch_id == 1
    served.store.change(served.credential_id, grants=(Grant.parse("write:b"),))
    served.reload()
    await call.write(_batch(2, "b"))  # granted since the stream opened
    assert (await call.read()).batch_id == 2
    await call.write(_batch(3, "a"))  # no longer granted
    await call.done_writing()
    assert await _status_at_end(call) == grpc.StatusCode.PERMISSION_DENIED
    assert "role write on namespace 'a' is not granted" in (await call.details() or "")
    assert served.handled == [1, 2]
    assert served.refusals() == {(IMPORT, "permission_denied"): 1}


async def test_a_stream_checks_the_token_again_only_after_a_reload(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    hashed: list[int] = []
    real = tikk.credentials.hash_secret

    def counted(salt: bytes, secret: str) -> bytes:
        hashed.append(1)
        return real(salt, secret)

    monkeypatch.setattr(tikk.credentials, "hash_secret", counted)
    call = served.open_import()
    for batch_id in range(1, 6):
        await call.write(_batch(batch_id))
        assert (await call.read()).batch_id == batch_id
    assert len(hashed) == 1  # the call's admission; the view did not change since
    served.reload()
    await call.write(_batch(6))
    assert (await call.read()).batch_id == 6
    assert len(hashed) == 2  # once against the new snapshot
    await call.done_writing()
    assert await call.code() == grpc.StatusCode.OK
