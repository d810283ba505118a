"""Every server-wide setting from the config file and the environment, described once.

A setting is a field of one of the settings' dataclasses (request limits, deadlines, quota
defaults, the dispatcher's timing, the default retry policy, ...). It is read from, in order of
precedence: the environment (``TIKK_<SECTION>_<FIELD>``, e.g. ``TIKK_LIMITS_MAX_PAYLOAD_BYTES``),
the config file (``--config``, table ``[<section>]``, key ``<field>``), the built-in default.
The command-line flags of a few (``--visibility-timeout``, ``--session-timeout``, ``--shards``)
come first. A duration (a field ending ``_ms`` or ``_s``) may be written ``"90s"``, ``"5m"`` or
as a number in the field's unit. An unknown section or key, or a value of the wrong type, is
refused naming it and the file or variable: a typo never falls back to a default silently.

``reference()`` is the README's table of them all (a test keeps the two the same).
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from tikk.errors import InvalidArgument
from tikk.model import RetryPolicy
from tikk.quotas import NamespaceQuotas
from tikk.settings import (
    MAX_DURATION_MS,
    Deadlines,
    DispatchSettings,
    Limits,
    QuotaSettings,
    Settings,
)

ENV_PREFIX = "TIKK_"


@dataclass(frozen=True)
class Section:
    """A table of the config file: the dataclass whose fields it sets, what it is for, and
    how the ``Settings`` hold it (read, write)."""

    name: str
    kind: type
    about: str
    get: Callable[[Settings], Any]
    put: Callable[[Settings, Any], Settings]
    skip: tuple[str, ...] = ()


def _server_part(s: Settings) -> Settings:
    return s


SECTIONS: tuple[Section, ...] = (
    Section("server", Settings, "one server-wide value each", _server_part,
            lambda s, v: v,
            skip=("store_url", "history_url", "queue_url", "ownership_url", "shard_count",
                  "listen", "http", "limits", "deadlines", "dispatch", "quotas", "security",
                  "ownership_session_timeout_ms", "visibility_timeout_ms")),
    Section("limits", Limits, "what a request may hold (over a limit: INVALID_ARGUMENT)",
            lambda s: s.limits, lambda s, v: replace(s, limits=v), skip=("default_retry",)),
    Section("default_retry", RetryPolicy, "the retry policy of a task that sets none",
            lambda s: s.limits.default_retry,
            lambda s, v: replace(s, limits=replace(s.limits, default_retry=v))),
    Section("deadlines", Deadlines, "how long the server gives a call",
            lambda s: s.deadlines, lambda s, v: replace(s, deadlines=v)),
    Section("quotas", QuotaSettings, "how namespace quotas are applied",
            lambda s: s.quotas, lambda s, v: replace(s, quotas=v),
            skip=("defaults",)),
    Section("quota_defaults", NamespaceQuotas, "quotas of a namespace that has none of its own",
            lambda s: s.quotas.defaults,
            lambda s, v: replace(s, quotas=replace(s.quotas, defaults=v))),
    Section("dispatcher", DispatchSettings, "the dispatcher's timing",
            lambda s: s.dispatch, lambda s, v: replace(s, dispatch=v),
            skip=("late_write_grace_s",)),
)  # fmt: skip


def tunable_fields(section: Section) -> list[dataclasses.Field[Any]]:
    """The fields of ``section`` that are plain values (numbers, flags), not skipped."""
    return [
        f for f in fields(section.kind)
        if f.name not in section.skip and _base_type(f) in (int, float, bool)
    ]  # fmt: skip


def _base_type(f: dataclasses.Field[Any]) -> type | None:
    text = str(f.type).replace(" ", "")
    for name, kind in (("int", int), ("float", float), ("bool", bool)):
        if text in (name, f"{name}|None"):
            return kind
    return None


def apply(base: Settings, document: Mapping[str, Any], source: str,
          env: Mapping[str, str] | None = None) -> Settings:  # fmt: skip
    """``base`` with the config file's tables (``document``, read from ``source``) and then
    the environment's ``TIKK_<SECTION>_<FIELD>`` variables applied."""
    env = os.environ if env is None else env
    known = {s.name for s in SECTIONS} | {"backends"}
    unknown = sorted(set(document) - known)
    if unknown:
        tables = ", ".join(sorted(known))
        raise InvalidArgument("--config", f"{source}: unknown table [{unknown[0]}] ({tables})")
    settings = base
    for section in SECTIONS:
        values = _from_file(section, document.get(section.name, {}), source)
        values.update(_from_env(section, env))
        if values:
            try:
                part = replace(section.get(settings), **values)
            except ValueError as exc:  # a combination its dataclass refuses
                raise InvalidArgument("--config", f"[{section.name}]: {exc}") from None
            settings = section.put(settings, part)
    return settings


def _from_file(section: Section, table: Any, source: str) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise InvalidArgument("--config", f"{source}: [{section.name}] must be a table")
    by_name = {f.name: f for f in tunable_fields(section)}
    out = {}
    for key, raw in table.items():
        if key not in by_name:
            hint = _closest(key, by_name)
            raise InvalidArgument(
                "--config", f"{source}: [{section.name}] has no setting {key!r}{hint}"
            )
        try:
            out[key] = convert(by_name[key], raw, key)
        except InvalidArgument as exc:
            raise InvalidArgument(
                "--config", f"{source}: [{section.name}] {key}: {exc.reason}"
            ) from None
    return out


def _from_env(section: Section, env: Mapping[str, str]) -> dict[str, Any]:
    prefix = f"{ENV_PREFIX}{section.name.upper()}_"
    by_env = {prefix + f.name.upper(): f for f in tunable_fields(section)}
    out = {}
    for name, raw in env.items():
        if not name.startswith(prefix):
            continue
        if name not in by_env:
            raise InvalidArgument(name, f"no such setting{_closest(name, by_env)}")
        out[by_env[name].name] = convert(by_env[name], raw, name)
    return out


def _closest(name: str, known: Mapping[str, object]) -> str:
    """``"; did you mean X?"`` for the known name nearest ``name``, and where all are listed."""
    near = difflib.get_close_matches(name, list(known), n=1)
    guess = f"; did you mean {near[0]}?" if near else ""
    return f"{guess} (README, Configuration, lists every setting)"


def convert(f: dataclasses.Field[Any], raw: Any, where: str) -> Any:
    """``raw`` (TOML value or environment text) as the type of field ``f``; raises
    ``InvalidArgument`` naming ``where``."""
    kind = _base_type(f)
    if isinstance(raw, str):
        raw = raw.strip()
        if raw.lower() in ("none", "") and "None" in str(f.type):
            return None
    try:
        if kind is bool:
            return _flag(raw)
        if kind is int and isinstance(raw, str) and f.name.endswith(("_ms", "_s")):
            value = _duration(raw, f.name)
        else:
            value = kind(raw) if kind is not None else raw
    except (TypeError, ValueError):
        raise InvalidArgument(where, f"expected {_expected(f)}, got {str(raw)[:40]!r}") from None
    if isinstance(value, int | float) and value < 0:
        raise InvalidArgument(where, f"must not be negative, got {value}")
    longest = _longest(f.name)
    if longest is not None and isinstance(value, int | float) and value > longest:
        raise InvalidArgument(where, f"at most {longest:,} (ten years), got {value:,}")
    return value


def _longest(name: str) -> int | None:
    """The largest value of a duration setting in its unit (None: not a duration)."""
    if name.endswith("_ms"):
        return MAX_DURATION_MS
    if name.endswith(("_s", "_seconds")):
        return MAX_DURATION_MS // 1000
    return None


def _flag(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    if str(raw).lower() in ("true", "1", "yes", "on"):
        return True
    if str(raw).lower() in ("false", "0", "no", "off"):
        return False
    raise ValueError(raw)


_UNITS_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def _duration(raw: str, name: str) -> int:
    """``"90s"`` etc. in the field's unit (ms, or s for a ``_s`` field); a bare number is
    already in it."""
    if raw.isdigit():
        return int(raw)
    number, unit = raw.rstrip("mshd"), raw[len(raw.rstrip("mshd")) :]
    if unit not in _UNITS_MS or not number.replace(".", "", 1).isdigit():
        raise ValueError(raw)
    ms = float(number) * _UNITS_MS[unit]
    return int(ms // 1000) if name.endswith("_s") else int(ms)


def _expected(f: dataclasses.Field[Any]) -> str:
    kind = _base_type(f)
    if kind is int and f.name.endswith(("_ms", "_s")):
        return "a whole number or a duration such as 90s"
    names: dict[type | None, str] = {
        int: "a whole number",
        float: "a number",
        bool: "true or false",
    }
    return names.get(kind, "a value")


def _shown(default: object) -> str:
    if default is None:
        return "none"
    if isinstance(default, bool):
        return str(default).lower()
    return f"{default:_}" if isinstance(default, int) else str(default)


def reference() -> str:
    """The README's table: every setting, its config key, variable and default."""
    rows = ["| config file | environment | default |", "| --- | --- | --- |"]
    base = Settings(store_url="", history_url="", queue_url="")
    for section in SECTIONS:
        current = section.get(base)
        rows.append(f"| **[{section.name}]**: {section.about} | | |")
        for f in tunable_fields(section):
            variable = f"{ENV_PREFIX}{section.name.upper()}_{f.name.upper()}"
            shown = _shown(getattr(current, f.name))
            rows.append(f"| `[{section.name}] {f.name}` | `{variable}` | {shown} |")
    return "\n".join(rows) + "\n"
