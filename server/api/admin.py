"""``tikk.v1.AdminService``: per-namespace quotas, read and replaced by an admin, and the
repair of a namespace's usage count, over ``server.ops.admin``."""

from __future__ import annotations

from server.api import validation
from server.api.status import Ctx
from server.ops.admin import AdminOps, QuotaReport
from tikk.quotas import QUOTA_NAMES, NamespaceQuotas, check_quota
from tikk.v1 import admin_pb2, admin_pb2_grpc


class AdminService(admin_pb2_grpc.AdminServiceServicer):  # type: ignore[misc]
    def __init__(self, admin: AdminOps) -> None:
        self._admin = admin

    async def GetNamespaceQuotas(
        self, request: admin_pb2.GetNamespaceQuotasRequest, context: Ctx
    ) -> admin_pb2.NamespaceQuotasResponse:
        return _report(await self._admin.quotas(validation.namespace(request.namespace)))

    async def SetNamespaceQuotas(
        self, request: admin_pb2.SetNamespaceQuotasRequest, context: Ctx
    ) -> admin_pb2.NamespaceQuotasResponse:
        ns = validation.namespace(request.namespace)
        return _report(await self._admin.set_quotas(ns, quotas_from_proto(request.quotas)))

    async def RecountNamespaceUsage(
        self, request: admin_pb2.RecountNamespaceUsageRequest, context: Ctx
    ) -> admin_pb2.NamespaceQuotasResponse:
        return _report(await self._admin.recount(validation.namespace(request.namespace)))


def _report(r: QuotaReport) -> admin_pb2.NamespaceQuotasResponse:
    return admin_pb2.NamespaceQuotasResponse(
        namespace=r.namespace,
        quotas=quotas_to_proto(r.own),
        effective=quotas_to_proto(r.effective),
        usage=admin_pb2.Usage(tasks_stored=r.usage.tasks_stored),
    )


def quotas_from_proto(msg: admin_pb2.Quotas) -> NamespaceQuotas:
    """The quotas set in ``msg`` (an unset field is no quota); a negative value, or a
    retention over ``MAX_RETENTION_SECONDS``, is refused naming its field."""
    values = {
        name: check_quota(name, getattr(msg, name), f"quotas.{name}")
        for name in QUOTA_NAMES
        if msg.HasField(name)
    }
    return NamespaceQuotas(**values)


def quotas_to_proto(quotas: NamespaceQuotas) -> admin_pb2.Quotas:
    values = {n: getattr(quotas, n) for n in QUOTA_NAMES if getattr(quotas, n) is not None}
    return admin_pb2.Quotas(**values)
