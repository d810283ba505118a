"""The interceptor on a real gRPC server: a method with no rule is refused even to a valid
credential (fail closed), and open services need none."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from server.auth.authenticator import CredentialView
from server.auth.interceptor import AuthInterceptor
from tikk.credentials import Credential, Grant, issue_secret, new_credential_id
from tikk.store.sqlite.credentials import SqliteCredentialStore
from tikk.v1 import tasks_pb2


async def _echo(request: tasks_pb2.GetTaskRequest, context: Any) -> tasks_pb2.Task:
    return tasks_pb2.Task(namespace=request.namespace, id=request.task_id)


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[grpc.aio.Channel, str]]:
    """A server with an admin credential, a method no rule names, and health; a channel to
    it and the admin's token."""
    store = SqliteCredentialStore(str(tmp_path / "tikk.db"))
    await store.start()
    credential_id = new_credential_id()
    issued = issue_secret(credential_id)
    grants = (Grant.parse("admin:*"), Grant.parse("worker:*"))
    await store.create(
        Credential(credential_id, "admin", issued.salt, issued.secret_hash, grants, 0)
    )
    server = grpc.aio.server(interceptors=[AuthInterceptor(CredentialView(store))])
    handler = grpc.unary_unary_rpc_method_handler(
        _echo,
        request_deserializer=tasks_pb2.GetTaskRequest.FromString,
        response_serializer=tasks_pb2.Task.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        [grpc.method_handlers_generic_handler("tikk.v1.Unruled", {"Do": handler})]
    )
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)  # type: ignore[attr-defined]
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    yield channel, issued.token
    await channel.close(None)
    await server.stop(None)
    await store.close()


async def test_a_method_without_a_rule_is_refused_to_everyone(
    served: tuple[grpc.aio.Channel, str],
) -> None:
    channel, token = served
    call = channel.unary_unary(
        "/tikk.v1.Unruled/Do",
        request_serializer=tasks_pb2.GetTaskRequest.SerializeToString,
        response_deserializer=tasks_pb2.Task.FromString,
    )
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await call(
            tasks_pb2.GetTaskRequest(namespace="a"),
            metadata=(("authorization", f"Bearer {token}"),),
        )
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "no authorization rule" in (refused.value.details() or "")
    with pytest.raises(grpc.aio.AioRpcError) as anonymous:
        await call(tasks_pb2.GetTaskRequest(namespace="a"))
    assert anonymous.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_health_needs_no_credential(served: tuple[grpc.aio.Channel, str]) -> None:
    channel, _ = served
    answer = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    assert answer.status == health_pb2.HealthCheckResponse.SERVING
