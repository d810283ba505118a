"""Server reflection, as both versions: ``grpc.reflection.v1`` (what grpcurl and most tools
ask first) beside ``grpc.reflection.v1alpha`` (what ``grpcio-reflection`` serves).

The two versions' messages are the same, field for field, so one servicer answers both: the
v1 service is the v1alpha servicer's method registered under the v1 name, reading and
writing the v1alpha message classes (identical on the wire).
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc
from grpc_reflection.v1alpha._async import ReflectionServicer

V1_SERVICE = "grpc.reflection.v1.ServerReflection"


def serve_reflection(server: grpc.aio.Server, services: Sequence[str]) -> None:
    """Answer reflection about ``services`` (and the reflection services themselves) in both
    versions on ``server``."""
    servicer = ReflectionServicer([*services, reflection.SERVICE_NAME, V1_SERVICE])
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(servicer, server)
    v1 = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(V1_SERVICE, {"ServerReflectionInfo": v1}),)
    )
