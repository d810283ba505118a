"""``quota`` (get, set, recount): a namespace's quotas and usage, changed without a
restart."""

from __future__ import annotations

import argparse

from server.cli.bulk import action_line, follow
from server.cli.client import client, show
from server.cli.options import client_options
from tikk.client import Client
from tikk.errors import InvalidArgument
from tikk.quotas import QUOTA_NAMES, RETENTION_NAMES, check_quota
from tikk.text_rules import shown
from tikk.v1 import admin_pb2, bulk_pb2


def _quota_value(text: str) -> int | None:
    """A quota on the command line: a count, or ``none`` to clear it."""
    if text.lower() == "none":
        return None
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count or 'none'") from None
    if value < 0:
        raise argparse.ArgumentTypeError("a quota is not negative")
    if value > _INT64_MAX:
        raise argparse.ArgumentTypeError(f"a quota is at most {_INT64_MAX:,}")
    return value


_INT64_MAX = 2**63 - 1  # what the API's fields hold


def _quota_text(q: admin_pb2.Quotas, name: str) -> str:
    if name in RETENTION_NAMES:
        seconds = getattr(q, name)
        return f"{seconds:,} s ({seconds / 86_400:g} days)" if q.HasField(name) else "as stored"
    return f"{getattr(q, name):,}" if q.HasField(name) else "unlimited"


def _report(resp: admin_pb2.NamespaceQuotasResponse) -> str:
    rows = [shown(f"namespace {resp.namespace}")]
    for name in QUOTA_NAMES:
        own = "" if resp.quotas.HasField(name) else "  (server default)"
        rows.append(f"  {name:<25} {_quota_text(resp.effective, name)}{own}")
    rows.append(f"  usage: tasks_stored {resp.usage.tasks_stored:,}")
    return "\n".join(rows)


def _quota_get(args: argparse.Namespace, tikk: Client) -> None:
    resp = tikk.get_namespace_quotas()
    show(args, resp, lambda: _report(resp))


def _quota_set(args: argparse.Namespace, tikk: Client) -> None:
    """Change the quotas given on the command line; the others stay as they are (read first,
    then written whole)."""
    own = tikk.get_namespace_quotas().quotas
    quotas = {name: getattr(own, name) if own.HasField(name) else None for name in QUOTA_NAMES}
    quotas.update(args.changes)
    resp = tikk.set_namespace_quotas(**quotas)
    show(args, resp, lambda: _report(resp))


def _quota_recount(args: argparse.Namespace, tikk: Client) -> None:
    """A recount as a server-side action, followed to its end (its progress on stderr)."""
    action = follow(tikk, tikk.recount_usage(action_id=args.action_id))
    if action.state != bulk_pb2.BULK_ACTION_STATE_SUCCEEDED:
        show(args, action, lambda: action_line(action))
        return
    resp = tikk.get_namespace_quotas()
    read = f"recounted from {action.read:,} task rows"
    show(args, resp, lambda: f"{read}\n{_report(resp)}")


class _Change(argparse.Action):
    """Collects ``--<quota> N`` options into ``args.changes`` (only those given)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        if isinstance(values, int):
            try:
                check_quota(self.dest, values, option_string or self.dest)
            except InvalidArgument as exc:
                raise argparse.ArgumentError(self, exc.reason) from None
        namespace.changes = {**namespace.changes, self.dest: values}


def register(top: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = top.add_parser("quota", help="a namespace's quotas and usage (admin)")
    sub = parser.add_subparsers(dest="action", required=True)
    p = sub.add_parser("get", help="the quotas in force and the usage")
    client_options(p)
    p.set_defaults(func=client(_quota_get))
    p = sub.add_parser("recount", help="repair the usage from the stored tasks (reads them all)")
    client_options(p)
    p.add_argument("--action-id", default="", help="resume following this recount")
    p.set_defaults(func=client(_quota_recount))
    p = sub.add_parser("set", help="change quotas (N, or 'none' to clear); others are kept")
    client_options(p)
    for name in QUOTA_NAMES:
        p.add_argument(f"--{name.replace('_', '-')}", dest=name, action=_Change,
                       type=_quota_value, metavar="N")  # fmt: skip
    p.set_defaults(func=client(_quota_set), changes={})
