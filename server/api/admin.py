"""``tikk.v1.AdminService``: per-namespace quotas, read and replaced by an admin, and the
repair of a namespace's usage count.

A change is stored at once; this process reads it at its next call, the others within their
quota cache (``QuotaSettings.cache_ms``), none needing a restart.
"""

from __future__ import annotations

from server.api import validation
from server.api.status import Ctx, maps_errors
from server.quotas import QuotaGate
from tikk.clock import Clock
from tikk.store.quotas import QUOTA_NAMES, NamespaceQuotas
from tikk.v1 import admin_pb2, admin_pb2_grpc


class AdminService(admin_pb2_grpc.AdminServiceServicer):  # type: ignore[misc]
    def __init__(self, quotas: QuotaGate, clock: Clock) -> None:
        self._quotas = quotas
        self._clock = clock

    @maps_errors
    async def GetNamespaceQuotas(
        self, request: admin_pb2.GetNamespaceQuotasRequest, context: Ctx
    ) -> admin_pb2.NamespaceQuotasResponse:
        return await self._answer(validation.namespace(request.namespace))

    @maps_errors
    async def SetNamespaceQuotas(
        self, request: admin_pb2.SetNamespaceQuotasRequest, context: Ctx
    ) -> admin_pb2.NamespaceQuotasResponse:
        ns = validation.namespace(request.namespace)
        quotas = quotas_from_proto(request.quotas)
        await self._quotas.store.put(ns, quotas, self._clock.now_ms())
        self._quotas.forget(ns)
        return await self._answer(ns)

    @maps_errors
    async def RecountNamespaceUsage(
        self, request: admin_pb2.RecountNamespaceUsageRequest, context: Ctx
    ) -> admin_pb2.NamespaceQuotasResponse:
        ns = validation.namespace(request.namespace)
        await self._quotas.store.recount(ns)
        return await self._answer(ns)

    async def _answer(self, namespace: str) -> admin_pb2.NamespaceQuotasResponse:
        store = self._quotas.store
        own = await store.get(namespace)
        usage = await store.usage(namespace)
        return admin_pb2.NamespaceQuotasResponse(
            namespace=namespace,
            quotas=quotas_to_proto(own),
            effective=quotas_to_proto(await self._quotas.quotas(namespace)),
            usage=admin_pb2.Usage(tasks_stored=usage.tasks_stored),
        )


def quotas_from_proto(msg: admin_pb2.Quotas) -> NamespaceQuotas:
    """The quotas set in ``msg`` (an unset field is no quota); negative values are refused."""
    values = {
        name: validation.quota_value(getattr(msg, name), f"quotas.{name}")
        for name in QUOTA_NAMES
        if msg.HasField(name)
    }
    return NamespaceQuotas(**values)


def quotas_to_proto(quotas: NamespaceQuotas) -> admin_pb2.Quotas:
    values = {n: getattr(quotas, n) for n in QUOTA_NAMES if getattr(quotas, n) is not None}
    return admin_pb2.Quotas(**values)
