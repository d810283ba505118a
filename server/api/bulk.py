"""``tikk.v1.BulkService``: counting a filter's tasks, and the bulk verbs over
``server.ops.bulk_actions``."""

from __future__ import annotations

from server.api import validation
from server.api.bulk_fields import (
    action_id,
    action_to_proto,
    count_to_proto,
    preview_to_proto,
    task_filter,
)
from server.api.status import Ctx
from server.ops.bulk_actions import BulkActions, for_verb
from server.ops.task_search import TaskSearch
from tikk.bulk_actions import BulkVerb
from tikk.settings import Settings
from tikk.task_filters import TaskFilter
from tikk.v1 import bulk_pb2, bulk_pb2_grpc


class BulkService(bulk_pb2_grpc.BulkServiceServicer):  # type: ignore[misc]
    def __init__(self, bulk: BulkActions, search: TaskSearch, settings: Settings) -> None:
        self._bulk = bulk
        self._search = search
        self._limits = settings.limits

    async def CountTasks(
        self, request: bulk_pb2.CountTasksRequest, context: Ctx
    ) -> bulk_pb2.CountTasksResponse:
        return count_to_proto(await self._search.count(task_filter(request.filter, self._limits)))

    async def BulkCancelTasks(
        self, request: bulk_pb2.BulkActionRequest, context: Ctx
    ) -> bulk_pb2.BulkAction:
        return await self._verb(BulkVerb.CANCEL, request)

    async def BulkRedriveTasks(
        self, request: bulk_pb2.BulkActionRequest, context: Ctx
    ) -> bulk_pb2.BulkAction:
        return await self._verb(BulkVerb.REDRIVE, request)

    async def BulkPurgeTasks(
        self, request: bulk_pb2.BulkActionRequest, context: Ctx
    ) -> bulk_pb2.BulkAction:
        return await self._verb(BulkVerb.PURGE, request)

    async def _verb(
        self, verb: BulkVerb, request: bulk_pb2.BulkActionRequest
    ) -> bulk_pb2.BulkAction:
        f = task_filter(request.filter, self._limits)
        chosen = action_id(request.action_id)
        if request.dry_run:
            return preview_to_proto(verb, for_verb(verb, f), await self._bulk.preview(verb, f))
        return action_to_proto(await self._bulk.start(verb, f, chosen))

    async def RecountUsage(
        self, request: bulk_pb2.RecountUsageRequest, context: Ctx
    ) -> bulk_pb2.BulkAction:
        ns = validation.namespace(request.namespace)
        chosen = action_id(request.action_id)
        return action_to_proto(await self._bulk.start(BulkVerb.RECOUNT, TaskFilter(ns), chosen))

    async def GetBulkAction(
        self, request: bulk_pb2.GetBulkActionRequest, context: Ctx
    ) -> bulk_pb2.BulkAction:
        ns = validation.namespace(request.namespace)
        return action_to_proto(await self._bulk.get(ns, action_id(request.id) or "-"))

    async def ListBulkActions(
        self, request: bulk_pb2.ListBulkActionsRequest, context: Ctx
    ) -> bulk_pb2.ListBulkActionsResponse:
        ns = validation.namespace(request.namespace)
        size = validation.listing_page_size(request.page_size, self._limits)
        page = await self._bulk.list(ns, size, request.page_token)
        return bulk_pb2.ListBulkActionsResponse(
            actions=[action_to_proto(a) for a in page.items], next_page_token=page.next_token
        )

    async def StopBulkAction(
        self, request: bulk_pb2.StopBulkActionRequest, context: Ctx
    ) -> bulk_pb2.BulkAction:
        ns = validation.namespace(request.namespace)
        return action_to_proto(await self._bulk.stop(ns, action_id(request.id) or "-"))
