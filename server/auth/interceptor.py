"""The one server interceptor that checks every call against ``server.auth.policy``.

It wraps each method's handler rather than deciding from the call's details alone, because a
client certificate is only visible on the servicer context, and because a request stream is
checked message by message: the servicer reads messages through a filter that lets one pass
only once the caller is authenticated again as its credential stands now (the view's bound,
as for a unary call: a revocation reaches a stream already open) and the message's namespaces
(or queues) are covered by the credential's current grants. The first message that fails ends
the call with UNAUTHENTICATED (revoked) or PERMISSION_DENIED (not covered); messages before it
were authorized and stay processed.

Refusals are logged at WARNING with the method, the credential's id (never a token or hash)
and the reason, and counted (``tikk.auth.refused`` by status); the caller gets the status
with the same reason. Each refusal is one line, as each refused result is: a caller that
floods the server with refused calls is also what the operator needs to see.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc

from server.api.status import Ctx, code_of, detail_of
from server.auth.authenticator import (
    Admission,
    CredentialView,
    Presented,
    bearer_token,
    certificate_subject,
)
from server.auth.policy import Rule, is_open, rule_of
from server.interceptors.handlers import (
    CallKind,
    MethodInterceptor,
    RpcHandler,
    answers,
    rewrapped,
)
from tikk.credentials import Credential
from tikk.errors import PermissionDenied, TikkError
from tikk.settings import Settings
from tikk.store.credentials import CredentialStore
from tikk.telemetry import Telemetry

log = logging.getLogger("tikk.server.auth")


class AuthInterceptor(MethodInterceptor):
    """Authenticates each call with ``view`` and authorizes it by the policy table."""

    def __init__(self, view: CredentialView, telemetry: Telemetry | None = None) -> None:
        self._view = view
        self._telemetry = telemetry or Telemetry()

    def wrap(self, handler: RpcHandler, method: str) -> RpcHandler:
        if is_open(method):
            return handler
        return _Guard(self._view, method, rule_of(method), self._telemetry).wrap(handler)


class _Guard:
    """The checks of one call of ``method``."""

    def __init__(
        self, view: CredentialView, method: str, rule: Rule | None, telemetry: Telemetry
    ) -> None:
        self._view, self._method, self._rule = view, method, rule
        self._telemetry = telemetry
        # What the call presented when it opened: each message of a stream presents it again.
        self._presented = Presented()
        self._refusal: TikkError | None = None

    async def admit(self, context: Ctx, message: Any = None) -> Admission:
        """Authenticate the caller; then authorize ``message`` (unary) or the role alone (a
        stream, before its first message). Aborts the call if either fails."""
        admission: Admission | None = None
        try:
            self._presented = Presented(
                bearer_token(context.invocation_metadata() or ()),
                certificate_subject(context.auth_context()),
            )
            admission = await self._view.admit(self._presented)
            self._authorize(admission.credential, message)
        except TikkError as exc:
            await self._refuse(context, exc, None if admission is None else admission.credential)
            raise AssertionError("unreachable: abort raises") from exc
        return admission

    def _authorize(self, credential: Credential, message: Any) -> None:
        if self._rule is None:
            raise PermissionDenied(f"{self._method} has no authorization rule; refused")
        if message is None:
            self._rule.check_role(credential)
        else:
            self._rule.check(credential, message)

    async def messages(
        self, requests: AsyncIterator[Any], admission: Admission
    ) -> AsyncIterator[Any]:
        """``requests``, each passed on only after the caller is authenticated again (as its
        credential stands in the view now) and the message is authorized by the credential's
        current grants. A refused one ends the stream with its ``Unauthenticated`` or
        ``PermissionDenied`` (``BackendUnavailable`` when the view cannot be brought up to
        date), recorded for ``abort_if_refused``."""
        assert self._rule is not None  # admit refused a method without one
        async for message in requests:
            try:
                admission = await self._view.admit(self._presented, admission)
                self._rule.check(admission.credential, message)
            except TikkError as exc:
                self._log(exc, admission.credential)
                self._refusal = exc
                raise
            yield message

    def ours(self, exc: TikkError) -> None:
        """Re-raise ``exc`` unless it is the refusal of a message of this call."""
        if exc is not self._refusal:
            raise exc

    async def abort_if_refused(self, context: Ctx) -> None:
        """End the call with the refusal's status if a message was refused. Done here, in
        the call's own task once the servicer let go: an abort from a task of the servicer's
        that reads the stream can collide with an answer being sent and be lost."""
        if self._refusal is not None:
            await context.abort(code_of(self._refusal), detail_of(self._refusal))

    async def _refuse(self, context: Ctx, exc: TikkError, credential: Credential | None) -> None:
        self._log(exc, credential)
        await context.abort(code_of(exc), detail_of(exc))

    def _log(self, exc: TikkError, credential: Credential | None) -> None:
        """One line at WARNING (the default level shows it) and a count, by status."""
        who = f"credential {credential.credential_id}" if credential else "caller"
        code = code_of(exc)
        log.warning("refused %s for %s (%s): %s", self._method, who, code.name, exc)
        self._telemetry.auth_refused(self._method, code.name.lower())

    def wrap(self, handler: RpcHandler) -> RpcHandler:
        """``handler`` with the checks in front of its behaviour."""
        wrappers = {
            CallKind.UNARY_UNARY: self._unary, CallKind.UNARY_STREAM: self._unary_in_stream_out,
            CallKind.STREAM_UNARY: self._stream_in,
            CallKind.STREAM_STREAM: self._stream_in_stream_out,
        }  # fmt: skip
        return rewrapped(handler, lambda inner, kind: wrappers[kind](inner))

    def _unary(self, inner: Any) -> Any:
        async def behavior(request: Any, context: Ctx) -> Any:
            await self.admit(context, request)
            return await inner(request, context)

        return behavior

    def _stream_in(self, inner: Any) -> Any:
        async def behavior(requests: AsyncIterator[Any], context: Ctx) -> Any:
            admission = await self.admit(context)
            answer = None
            try:
                answer = await inner(self.messages(requests, admission), context)
            except TikkError as exc:
                self.ours(exc)
            await self.abort_if_refused(context)
            return answer

        return behavior

    def _unary_in_stream_out(self, inner: Any) -> Any:
        async def behavior(request: Any, context: Ctx) -> AsyncIterator[Any]:
            await self.admit(context, request)
            async for answer in answers(inner(request, context)):
                yield answer

        return behavior

    def _stream_in_stream_out(self, inner: Any) -> Any:
        async def behavior(requests: AsyncIterator[Any], context: Ctx) -> AsyncIterator[Any]:
            admission = await self.admit(context)
            checked = self.messages(requests, admission)
            try:
                async for answer in answers(inner(checked, context)):
                    yield answer
            except TikkError as exc:
                self.ours(exc)
            await self.abort_if_refused(context)

        return behavior


def auth_interceptors(
    settings: Settings, credentials: CredentialStore | None, telemetry: Telemetry | None = None
) -> list[grpc.aio.ServerInterceptor[Any, Any]]:
    """The interceptors of a server: the check of every call when ``settings`` turn
    authentication on (``credentials`` is then the opened store; refusals are counted in
    ``telemetry``), else none."""
    if not settings.security.auth:
        return []
    if credentials is None:
        raise ValueError("authentication is on but no credential store was opened")
    return [AuthInterceptor(CredentialView(credentials), telemetry)]
