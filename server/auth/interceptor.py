"""The one server interceptor that checks every call against ``server.auth.policy``.

It wraps each method's handler rather than deciding from the call's details alone, because a
client certificate is only visible on the servicer context, and because a request stream is
checked message by message: the servicer reads messages through a filter that lets one pass
only once its namespaces (or queues) are covered, and ends the call with PERMISSION_DENIED at
the first that is not. Messages before it were authorized and stay processed.

Refusals are logged with the method, the credential's id (never a token or hash) and the
reason; the caller gets UNAUTHENTICATED or PERMISSION_DENIED with the same reason.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc

from server.api.status import Ctx, code_of
from server.auth.authenticator import CredentialView, bearer_token, certificate_subject
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

log = logging.getLogger("tikk.server.auth")


class AuthInterceptor(MethodInterceptor):
    """Authenticates each call with ``view`` and authorizes it by the policy table."""

    def __init__(self, view: CredentialView) -> None:
        self._view = view

    def wrap(self, handler: RpcHandler, method: str) -> RpcHandler:
        if is_open(method):
            return handler
        return _Guard(self._view, method, rule_of(method)).wrap(handler)


class _Guard:
    """The checks of one call of ``method``."""

    def __init__(self, view: CredentialView, method: str, rule: Rule | None) -> None:
        self._view, self._method, self._rule = view, method, rule
        self._refusal: PermissionDenied | None = None

    async def admit(self, context: Ctx, message: Any = None) -> Credential:
        """Authenticate the caller; then authorize ``message`` (unary) or the role alone (a
        stream, before its first message). Aborts the call if either fails."""
        try:
            credential = await self._view.authenticate(
                bearer_token(context.invocation_metadata() or ()),
                certificate_subject(context.auth_context()),
            )
            if self._rule is None:
                raise PermissionDenied(f"{self._method} has no authorization rule; refused")
            if message is None:
                self._rule.check_role(credential)
            else:
                self._rule.check(credential, message)
        except TikkError as exc:
            await self._refuse(context, exc, None)
            raise AssertionError("unreachable: abort raises") from exc
        return credential

    async def messages(
        self, requests: AsyncIterator[Any], credential: Credential
    ) -> AsyncIterator[Any]:
        """``requests``, each passed on only after it is authorized. A refused one ends the
        stream with ``PermissionDenied``, recorded for ``abort_if_refused``."""
        assert self._rule is not None  # admit refused a method without one
        async for message in requests:
            try:
                self._rule.check(credential, message)
            except PermissionDenied as exc:
                self._log(exc, credential)
                self._refusal = exc
                raise
            yield message

    def ours(self, exc: PermissionDenied) -> None:
        """Re-raise ``exc`` unless it is the refusal of a message of this call."""
        if exc is not self._refusal:
            raise exc

    async def abort_if_refused(self, context: Ctx) -> None:
        """End the call with PERMISSION_DENIED if a message was refused. Done here, in the
        call's own task once the servicer let go: an abort from a task of the servicer's
        that reads the stream can collide with an answer being sent and be lost."""
        if self._refusal is not None:
            await context.abort(code_of(self._refusal), str(self._refusal))

    async def _refuse(self, context: Ctx, exc: TikkError, credential: Credential | None) -> None:
        self._log(exc, credential)
        await context.abort(code_of(exc), str(exc))

    def _log(self, exc: TikkError, credential: Credential | None) -> None:
        who = f"credential {credential.credential_id}" if credential else "caller"
        log.info("refused %s for %s: %s", self._method, who, exc)

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
            credential = await self.admit(context)
            answer = None
            try:
                answer = await inner(self.messages(requests, credential), context)
            except PermissionDenied as exc:
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
            credential = await self.admit(context)
            checked = self.messages(requests, credential)
            try:
                async for answer in answers(inner(checked, context)):
                    yield answer
            except PermissionDenied as exc:
                self.ours(exc)
            await self.abort_if_refused(context)

        return behavior


def auth_interceptors(
    settings: Settings, credentials: CredentialStore | None
) -> list[grpc.aio.ServerInterceptor[Any, Any]]:
    """The interceptors of a server: the check of every call when ``settings`` turn
    authentication on (``credentials`` is then the opened store), else none."""
    if not settings.security.auth:
        return []
    if credentials is None:
        raise ValueError("authentication is on but no credential store was opened")
    return [AuthInterceptor(CredentialView(credentials))]
