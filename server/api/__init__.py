"""The gRPC API of tikk.v1: one module per service, each with the protobuf conversions it needs.

``tasks``, ``history``, ``worker`` and ``schedules`` hold the servicers; ``messages`` the
conversions more than one of them uses; ``validation`` turns request messages into domain
objects (or ``InvalidArgument`` naming the field); ``status`` maps tikk errors to gRPC status
codes. Below this package the server works on domain objects only.
"""
