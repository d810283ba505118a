"""The console, ``/metrics`` and the operator's settings as a hostile tester tries them, against
real ``tikk dev`` servers with and without ``--auth`` (plain HTTP requests that send what a
browser, or another site's page, would):

1. a write login is refused every action the API keeps for admins, and nothing changes;
2. a console without ``--auth`` answers only its own host names (DNS rebinding), and takes
   no state-changing request from another origin;
3. a login sees only the namespaces it may read; a worker credential opens no session;
4. a retention longer than the documented maximum is refused where it is set;
5. every answer carries the security headers, the login form its own CSRF token, and a label
   selector longer than its documented size is refused.

The authorization of every console route for every kind of login is
``test_console_authorization.py``; a retention pass going on past a failing namespace is
``tests/unit/test_retention.py``.
"""

from __future__ import annotations

import html
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from tests.e2e.auth_stack import AuthStack, Token
from tests.e2e.conftest import Process
from tests.e2e.console_rig import ConsoleHttp, Dev
from tests.waiting import eventually
from tikk.client import Client, InvalidArgumentError, Recurrence, ScheduleDefinition
from tikk.label_selectors import MAX_SELECTOR_LENGTH
from tikk.quotas import MAX_RETENTION_SECONDS
from tikk.v1 import bulk_pb2, bulk_pb2_grpc, tasks_pb2

pytestmark = pytest.mark.e2e

NS, OTHER_NS = "ns-a", "ns-b"
DEAD = ["dead-1", "dead-2", "dead-3", "dead-4"]
INT64_MAX = 2**63 - 1
_DEAD_LETTERED = tasks_pb2.TASK_STATE_DEAD_LETTERED


@dataclass
class Authed:
    """A ``tikk dev --auth`` with dead letters, a schedule and a waiting task in ``NS``, a
    queue only ``OTHER_NS`` uses, and a token of each kind of login."""

    dev: Dev
    tokens: dict[str, Token]

    def browser(self, who: str) -> ConsoleHttp:
        """A browser signed in as ``who``."""
        browser = ConsoleHttp(self.dev.base)
        answer = browser.login(self.tokens[who])
        assert answer.status == 303 and answer.location == "/console/", answer.body
        return browser

    def client(self, namespace: str = NS) -> Client:
        return self.dev.client(namespace, self.tokens["operator"])


GRANTS = {
    "reader": f"read:{NS}",
    "writer": f"write:{NS}",
    "admin": f"admin:{NS}",
    "worker": "worker:*",
    "operator": "admin:*",
}


@pytest.fixture(scope="module")
def authed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Authed]:
    data = tmp_path_factory.mktemp("hostile-console")
    stack = AuthStack(data)
    tokens = {who: stack.create(who, grant)[1] for who, grant in GRANTS.items()}
    dev = Dev(data, "--auth")
    rig = Authed(dev, tokens)
    worker_app, token_file = "tests.e2e.worker_app:worker", str(data / "worker.token")
    worker = Process(
        ["worker", worker_app, "--server", dev.address, "--token-file", token_file],
        {"TIKK_E2E_LOG": str(dev.log), "PYTHONUNBUFFERED": "1"},
    )
    try:
        _seed(rig)
        yield rig
    finally:
        worker.stop()
        dev.process.stop()


def _seed(rig: Authed) -> None:
    """Dead letters (run by the worker and failed), a waiting task and a schedule in
    ``NS``; a task of a queue only ``OTHER_NS`` uses."""
    later = Duration(seconds=3_600)
    with rig.client() as client:
        once = tasks_pb2.RetryPolicy(max_attempts=1)
        for task_id in DEAD:
            client.create_task(
                tasks_pb2.CreateTaskRequest(
                    task_id=task_id, queue="e2e", handler="always_fail", retry_policy=once
                )
            )
        client.create_task(
            tasks_pb2.CreateTaskRequest(task_id="later", queue="e2e", handler="record", delay=later)
        )
        every_hour = Recurrence(cron="0 * * * *", timezone="UTC")
        client.create_schedule(ScheduleDefinition("hourly", every_hour, "e2e", "record"))
        eventually(
            lambda: all(client.get_task(t).state == _DEAD_LETTERED for t in DEAD), timeout=60
        )
    with rig.client(OTHER_NS) as other:
        other.create_task(
            tasks_pb2.CreateTaskRequest(
                task_id="b-1", queue="only-b-uses-this", handler="record", delay=later
            )
        )


# 1. Roles: the console refuses a writer what the API keeps for admins.


def test_a_writer_is_refused_every_admin_action_and_nothing_changes(authed: Authed) -> None:
    writer = authed.browser("writer")
    base = f"/console/ns/{NS}"
    writer.get(f"{base}/dead-letters")
    refused = {
        "redrive a task": writer.post(f"{base}/tasks/dead-1/redrive"),
        "purge a task": writer.post(f"{base}/tasks/dead-2/purge"),
        "purge a selection": writer.post(f"{base}/dead-letters/purge", {"task_id": "dead-3"}),
        "redrive a selection": writer.post(f"{base}/dead-letters/redrive", {"task_id": "dead-4"}),
        "pause a schedule": writer.post(f"{base}/schedules/hourly/pause"),
        "count before a bulk purge": writer.get(f"{base}/dead-letters/all?verb=purge"),
        "purge every match": writer.post(f"{base}/bulk", {"verb": "purge", "action_id": "x1"}),
    }
    wrong = {what: a.status for what, a in refused.items() if a.status != 403}
    assert not wrong, f"not refused: {wrong}"
    said = html.unescape(refused["purge a task"].body)
    assert "role admin on namespace 'ns-a' is not granted" in said
    with authed.client() as client:
        assert [client.get_task(t).state for t in DEAD] == [_DEAD_LETTERED] * 4
        assert not client.get_schedule("hourly").paused
    # What the API lets a writer do, the console does too.
    page = writer.get(f"{base}/tasks/later")
    assert "Cancel" in page.body and "Redrive" not in page.body
    assert writer.post(f"{base}/tasks/later/cancel").status == 303
    with authed.client() as client:
        assert client.get_task("later").state == tasks_pb2.TASK_STATE_CANCELLED


def test_an_admin_may_redrive_in_the_console(authed: Authed) -> None:
    admin = authed.browser("admin")
    admin.get(f"/console/ns/{NS}/dead-letters")
    assert admin.post(f"/console/ns/{NS}/tasks/dead-1/redrive").status == 303
    with authed.client() as client:
        eventually(lambda: len(list(client.list_task_runs("dead-1"))) == 2, timeout=60)


# 3. Namespaces: an overview shows a login only what it may read; no worker sessions.


def test_the_overview_shows_a_namespace_reader_only_its_namespaces(authed: Authed) -> None:
    reader = authed.browser("reader")
    overview = reader.get("/console/")
    assert overview.status == 200
    assert "only-b-uses-this" not in overview.body and OTHER_NS not in overview.body
    assert f"/console/ns/{NS}/dead-letters" in overview.body
    data = reader.get("/console/api/overview")
    assert data.status == 403 and "only-b-uses-this" not in data.body
    operator = authed.browser("operator")
    eventually(lambda: "only-b-uses-this" in operator.get("/console/api/overview").body)


def test_a_worker_credential_opens_no_console_session(authed: Authed) -> None:
    browser = ConsoleHttp(authed.dev.base)
    answer = browser.login(authed.tokens["worker"])
    assert answer.status == 403 and "worker credential" in answer.body
    assert "tikk_session" not in browser.cookies
    assert browser.get("/console/").location == "/console/login"


# 5. Headers, the login form's token, bounded filters.


def test_every_answer_carries_the_security_headers(authed: Authed) -> None:
    reader = authed.browser("reader")
    for path in (
        "/console/",
        f"/console/ns/{NS}/tasks/dead-2",
        "/console/static/console.css",
        "/console/login",
        "/console/ns/x/nothing-here",
    ):
        answer = reader.get(path)
        assert answer.header("Cache-Control") == "no-store", path
        assert answer.header("Referrer-Policy") == "same-origin", path
        assert answer.header("X-Frame-Options") == "DENY", path
        assert "frame-ancestors 'none'" in answer.header("Content-Security-Policy"), path
        assert not answer.header("Strict-Transport-Security"), path  # plain HTTP: no HSTS


def test_the_login_form_refuses_a_post_without_its_own_token(authed: Authed) -> None:
    browser = ConsoleHttp(authed.dev.base)
    forged = browser.post("/console/login", {"token": authed.tokens["reader"]})
    assert forged.status == 403 and "tikk_session" not in browser.cookies
    # Another browser's form token does not fit this browser's cookie.
    other = ConsoleHttp(authed.dev.base)
    other.get("/console/login")
    browser.get("/console/login")
    stolen = browser.post("/console/login", {"token": authed.tokens["reader"], "csrf": other.csrf})
    assert stolen.status == 403 and "tikk_session" not in browser.cookies
    from_elsewhere = browser.post(
        "/console/login", {"token": authed.tokens["reader"]}, Origin="http://attacker.example"
    )
    assert from_elsewhere.status == 403 and "tikk_session" not in browser.cookies


def test_a_label_selector_longer_than_its_bound_is_refused_and_not_stored(authed: Authed) -> None:
    with grpc.insecure_channel(authed.dev.address) as channel:
        bulk = bulk_pb2_grpc.BulkServiceStub(channel)
        md = (("authorization", f"Bearer {authed.tokens['operator']}"),)
        for size in (MAX_SELECTOR_LENGTH + 1, 4 * 1024 * 1024):
            selector = "team=" + "a" * (size - 5)
            request = bulk_pb2.BulkActionRequest(
                filter=bulk_pb2.TaskFilter(namespace=NS, label_selector=selector),
                action_id=f"big-{size}",
            )
            with pytest.raises(grpc.RpcError) as refused:
                bulk.BulkCancelTasks(request, timeout=30, metadata=md)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "filter.label_selector" in (refused.value.details() or "")
        listed = bulk.ListBulkActions(
            bulk_pb2.ListBulkActionsRequest(namespace=NS), timeout=30, metadata=md
        )
        assert not [a for a in listed.actions if a.id.startswith("big-")]


# 4. Retention: bounded where it is set.


def test_a_retention_over_the_maximum_is_refused_naming_it(authed: Authed) -> None:
    with authed.client() as client:
        for value in (INT64_MAX, MAX_RETENTION_SECONDS + 1):
            with pytest.raises(InvalidArgumentError, match="task_retention_seconds"):
                client.set_namespace_quotas(task_retention_seconds=value)
            with pytest.raises(InvalidArgumentError, match="history_retention_seconds"):
                client.set_namespace_quotas(history_retention_seconds=value)
        kept = client.set_namespace_quotas(task_retention_seconds=MAX_RETENTION_SECONDS)
        assert kept.quotas.task_retention_seconds == MAX_RETENTION_SECONDS
        client.set_namespace_quotas()
        assert not client.get_namespace_quotas().quotas.HasField("task_retention_seconds")


# 2. Host and Origin on a console without --auth.


@dataclass
class Open:
    """A ``tikk dev`` without ``--auth`` that also answers for a proxy's name, with a task
    whose payload a rebinding page would like to read."""

    dev: Dev
    port: str


@pytest.fixture(scope="module")
def open_dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Open]:
    dev = Dev(
        tmp_path_factory.mktemp("open-console"),
        "--http-allowed-hosts",
        "tikk.proxy.example,[::1]:1",
    )
    try:
        with dev.client("default") as client:
            for task_id in ("secret", "kept"):
                client.create_task(
                    tasks_pb2.CreateTaskRequest(
                        task_id=task_id,
                        queue="e2e",
                        handler="record",
                        payload=b"the-payload",
                        delay=Duration(seconds=3_600),
                    )
                )
        yield Open(dev, dev.base.rpartition(":")[2])
    finally:
        dev.process.stop()


def _scheduled(dev: Dev, task_id: str) -> bool:
    with dev.client("default") as client:
        return bool(client.get_task(task_id).state == tasks_pb2.TASK_STATE_SCHEDULED)


def test_another_host_name_is_not_answered(open_dev: Open) -> None:
    browser = ConsoleHttp(open_dev.dev.base)
    rebound = f"attacker.example:{open_dev.port}"
    page = browser.get("/console/ns/default/tasks/secret", Host=rebound)
    assert page.status == 421
    assert "the-payload" not in page.body and 'name="csrf"' not in page.body
    assert "tikk_session" not in browser.cookies
    assert browser.get("/metrics", Host=rebound).status == 421
    # Its own names are answered: the address it listens on, localhost, the allowed proxy.
    for host in (
        f"127.0.0.1:{open_dev.port}",
        f"localhost:{open_dev.port}",
        "tikk.proxy.example",
        f"TIKK.proxy.example:{open_dev.port}",
    ):
        answer = browser.get("/console/ns/default/tasks/secret", Host=host)
        assert answer.status == 200 and "the-payload" in answer.body, host
    assert browser.get("/console/", Host=f"localhost:{int(open_dev.port) + 1}").status == 421
    assert browser.get("/console/", Host="[::1]:1").status == 200  # named with its port


def test_no_action_is_taken_from_another_host_or_origin(open_dev: Open) -> None:
    browser = ConsoleHttp(open_dev.dev.base)
    browser.get("/console/ns/default/tasks/secret")  # a session and its CSRF token
    path = "/console/ns/default/tasks/secret/cancel"
    rebound = f"attacker.example:{open_dev.port}"
    attacker = f"http://{rebound}"
    assert browser.post(path, Host=rebound, Origin=attacker).status == 421
    assert browser.post(path, Origin=attacker).status == 403
    assert browser.post(path, Origin="null").status == 403
    assert browser.post(path, Origin=f"https://127.0.0.1:{open_dev.port}").status == 403
    assert _scheduled(open_dev.dev, "secret")
    # The same request from the console's own page, or through the allowed proxy, acts.
    own = browser.post(path, Origin=f"http://127.0.0.1:{open_dev.port}")
    assert own.status == 303 and not _scheduled(open_dev.dev, "secret")
    proxied = browser.post(
        "/console/ns/default/tasks/kept/cancel",
        Host="tikk.proxy.example",
        Origin="https://tikk.proxy.example",
    )
    assert proxied.status == 303 and not _scheduled(open_dev.dev, "kept")


# 5. HSTS under TLS.


def test_under_tls_every_answer_asks_for_https_only(tmp_path: Path) -> None:
    dev = Dev(tmp_path, "--tls")
    try:
        trusted = ssl.create_default_context(cafile=str(tmp_path / "tls" / "ca.pem"))
        browser = ConsoleHttp(dev.base, context=trusted)
        for path in ("/console/", "/console/static/console.js", "/metrics"):
            answer = browser.get(path)
            assert answer.header("Strict-Transport-Security") == "max-age=31536000", path
            assert answer.header("Cache-Control") == "no-store", path
    finally:
        assert dev.process.stop() == 0


def test_the_retention_default_of_a_config_file_is_bounded(tmp_path: Path) -> None:
    config = tmp_path / "tikk.toml"
    config.write_text(f"[quota_defaults]\ntask_retention_seconds = {INT64_MAX}\n")
    server = Process(
        [
            "dev",
            "--data-dir",
            str(tmp_path),
            "--listen",
            "127.0.0.1:0",
            "--http",
            "off",
            "--config",
            str(config),
        ],
        {},
    )
    deadline = time.monotonic() + 60
    while server.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert server.stop() != 0
    assert "task_retention_seconds" in server.output() and "ten years" in server.output()
