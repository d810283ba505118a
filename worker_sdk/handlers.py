"""A handler as the Worker knows it: the function, the payload type it declares, and its own
limits (``HandlerSpec``), read from its signature once, when it is registered.

A handler is ``fn(ctx, payload)``, async or plain. The payload's annotation is its type: none,
or ``bytes``, passes the bytes unchanged; ``str`` is UTF-8 text; a dataclass or a pydantic
model, a ``dict`` or a ``list`` is decoded from JSON and checked (``tikk.payload_codec``). What
it returns is encoded the same way (None is no output). A signature that cannot be read (an
annotation naming a type that cannot be found) is refused at registration, not at its first
run.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class HandlerOptions:
    """A handler's own limits; None or empty is no limit.

    ``timeout_s``: how long one run may take before it is stopped and failed (retried per the
    task's policy). ``concurrency``: runs of this handler at once on this worker.
    ``concurrency_per_label``: runs at once per value of a label, e.g. ``{"customer": 1}`` runs
    one task per customer at a time (tasks without the label are not held by it).
    ``rate_per_s``: runs started per second on this worker, evenly spaced. A run waiting for
    any of these holds none of the worker's handler slots, so other handlers go on.
    """

    timeout_s: float | None = None
    concurrency: int | None = None
    concurrency_per_label: Mapping[str, int] = field(default_factory=dict)
    rate_per_s: float | None = None

    def __post_init__(self) -> None:
        if self.timeout_s is not None and not self.timeout_s > 0:
            raise ValueError(f"timeout must be positive (got {self.timeout_s})")
        if self.concurrency is not None and self.concurrency < 1:
            raise ValueError(f"concurrency must be at least one (got {self.concurrency})")
        for label, most in self.concurrency_per_label.items():
            if not label or most < 1:
                raise ValueError(
                    f"concurrency per label needs a label name and a limit of at least one "
                    f"(got {label!r}: {most})"
                )
        if self.rate_per_s is not None and not self.rate_per_s > 0:
            raise ValueError(f"rate must be positive (got {self.rate_per_s} per second)")
        object.__setattr__(self, "concurrency_per_label", dict(self.concurrency_per_label))

    @property
    def gated(self) -> bool:
        """Whether a run may have to wait for these limits."""
        return bool(self.concurrency or self.concurrency_per_label or self.rate_per_s)


@dataclass(frozen=True)
class HandlerSpec:
    """A registered handler: its name, function, payload type and limits."""

    name: str
    fn: Callable[..., Any]
    payload_type: Any
    is_async: bool
    options: HandlerOptions


def handler_spec(name: str, fn: Callable[..., Any], options: HandlerOptions) -> HandlerSpec:
    """The spec of ``fn`` registered as ``name``; ``ValueError`` naming what is wrong."""
    if not name:
        raise ValueError("handler name must not be empty")
    params = list(inspect.signature(fn).parameters.values())
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) < 2 and not any(p.kind is p.VAR_POSITIONAL for p in params):
        raise ValueError(f"handler {name!r} must take (ctx, payload)")
    payload = positional[1] if len(positional) > 1 else None
    return HandlerSpec(
        name=name,
        fn=fn,
        payload_type=_payload_type(name, fn, payload),
        is_async=inspect.iscoroutinefunction(fn),
        options=options,
    )


def _payload_type(name: str, fn: Callable[..., Any], param: inspect.Parameter | None) -> Any:
    """The declared type of the payload parameter; bytes when it declares none."""
    if param is None or param.annotation is inspect.Parameter.empty:
        return bytes
    try:
        hints = typing.get_type_hints(fn)
    except (NameError, TypeError) as exc:
        raise ValueError(f"handler {name!r}: cannot read its payload type ({exc})") from None
    return hints.get(param.name, bytes)
