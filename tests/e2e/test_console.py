"""The web console in a real browser (Debian's chromium driven by Playwright) against a real
``tikk dev``: the pages a person reads, a redrive by clicking, and a read-only login refused
an action. Each page's screenshot is written under ``test-results/console/``.
"""

from __future__ import annotations

import os
import re
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.e2e.auth_stack import AuthStack
from tests.e2e.conftest import ROOT, read_executions
from tests.e2e.console_rig import Dev
from tests.waiting import eventually
from tikk.client import Client, NotFoundError, Recurrence, ScheduleDefinition
from tikk.v1 import tasks_pb2

pytestmark = pytest.mark.e2e

CHROMIUM = os.environ.get("TIKK_CHROMIUM", "/usr/bin/chromium")
SHOTS = Path(os.environ.get("TIKK_SCREENSHOTS", ROOT / "test-results" / "console"))
_SETTLED = {tasks_pb2.TASK_STATE_SUCCEEDED, tasks_pb2.TASK_STATE_DEAD_LETTERED}


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert Path(CHROMIUM).exists(), (
        f"no browser at {CHROMIUM}: apt-get install chromium (make test does), or set TIKK_CHROMIUM"
    )
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield launched
        launched.close()


def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def click_and_confirm(page: Page, button: str) -> list[str]:
    """Click ``button`` and accept the question it asks; the questions asked."""
    asked: list[str] = []

    def answer(dialog: Any) -> None:
        asked.append(dialog.message)
        dialog.accept()

    page.once("dialog", answer)
    page.get_by_role("button", name=button).click()
    return asked


def create(client: Client, task_id: str, handler: str, **fields: Any) -> None:
    request = tasks_pb2.CreateTaskRequest(
        task_id=task_id, queue="e2e", handler=handler, **{"payload": b"2", **fields}
    )
    client.create_task(request)


def state(client: Client, task_id: str) -> int:
    return int(client.get_task(task_id).state)


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dev]:
    running = Dev(tmp_path_factory.mktemp("console"), "--worker", "tests.e2e.worker_app:worker")
    try:
        with running.client("shop") as client:
            create(client, "ok-1", "record")
            create(client, "flaky-1", "flaky")  # fails once, then succeeds
            once = tasks_pb2.RetryPolicy(max_attempts=1)
            create(client, "broken", "fail_first_run", retry_policy=once)
            ids = ["ok-1", "flaky-1", "broken"]
            client.pause_queue("held")  # nothing of it runs while the tests look
            time.sleep(1.5)  # the dispatcher reads the queues' settings once a second
            client.create_task(tasks_pb2.CreateTaskRequest(task_id="waits", queue="held",
                                                           handler="record"))  # fmt: skip
            every_2s = Recurrence(cron="*/2 * * * * *", timezone="Europe/Oslo")
            client.create_schedule(ScheduleDefinition("heartbeat", every_2s, "e2e", "record"))
            eventually(lambda: all(state(client, t) in _SETTLED for t in ids), timeout=60)
        time.sleep(6)  # one more sample of the metrics, so the overview's windows have two
        yield running
    finally:
        assert running.process.stop() == 0, running.process.output()


def test_the_overview_shows_each_queue_with_its_runs_and_lateness(
    browser: Browser, dev: Dev
) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 760})
    page.goto(dev.console)
    row = page.locator("table.queues tbody tr", has_text="e2e")
    expect(row).to_have_count(1)
    cells = row.locator("td")
    expect(cells.nth(3)).not_to_have_text("—")  # runs/s over 5 minutes
    expect(cells.nth(5)).to_contain_text(" ms / ")  # start p50 / p99
    expect(page.locator("#lateness-chart polyline.p99")).to_have_count(1)  # the live chart
    held = page.locator("table.queues tbody tr", has_text="held")
    expect(held.locator("td").first).to_contain_text("paused · 1 held")
    shot(page, "overview")


def test_a_task_page_shows_every_run_with_its_lateness_and_error(
    browser: Browser, dev: Dev
) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 760})
    page.goto(dev.console + "tasks?namespace=shop&task_id=flaky-1")
    expect(page.locator("h1")).to_have_text("Task flaky-1")
    expect(page.locator("dd .state")).to_have_text("SUCCEEDED")
    runs = page.locator("table.runs tbody tr")
    expect(runs).to_have_count(2)
    expect(runs.nth(0)).to_contain_text("SUCCEEDED")
    expect(runs.nth(1)).to_contain_text("FAILED")
    expect(runs.nth(1)).to_contain_text("ConnectionError: attempt 1 fails")
    trace = runs.nth(1).locator("details.trace[open] pre")  # the newest failure, unfolded
    expect(trace).to_contain_text("Traceback (most recent call last):")
    expect(trace).to_contain_text(re.compile(r"worker_app\.py\", line \d+, in flaky"))
    expect(page.locator("dd code")).to_have_text(re.compile(r"^shop/flaky-1@\d+$"))
    shot(page, "task")


def test_a_task_page_follows_the_task_without_a_reload(browser: Browser, dev: Dev) -> None:
    with dev.client("shop") as client:
        create(client, "soon", "record", delay=_seconds(3))
    page = browser.new_page(viewport={"width": 1280, "height": 760})
    page.goto(dev.console + "ns/shop/tasks/soon")
    expect(page.locator("dd .state")).to_have_text("SCHEDULED")
    # The page's live part is read again every 5 s: the run shows up by itself.
    expect(page.locator("dd .state")).to_have_text("SUCCEEDED", timeout=30_000)
    expect(page.locator("table.runs tbody tr")).to_have_count(1)


def test_a_running_task_is_stopped_by_clicking_and_its_run_ends_cancelled(
    browser: Browser, dev: Dev
) -> None:
    with dev.client("shop") as client:
        create(client, "long", "slow", payload=b"120")
        started = lambda: any(e["task_id"] == "long" for e in read_executions(dev.log))  # noqa: E731
        eventually(started, timeout=30)
        page = browser.new_page(viewport={"width": 1280, "height": 760})
        page.goto(dev.console + "ns/shop/tasks/long")
        expect(page.locator("dd .state")).to_have_text("DISPATCHED")
        expect(page.get_by_role("button", name="Cancel")).to_have_count(0)  # it already runs
        page.once("dialog", lambda dialog: dialog.accept())  # "Stop this run …?"
        page.get_by_role("button", name="Stop").click()
        expect(page.locator("dd .state")).to_have_text("CANCELLED")
        # The worker is told within about a second and ends the run; it is not retried.
        expect(page.locator("table.runs tbody tr")).to_contain_text("CANCELLED", timeout=30_000)
        shot(page, "task-stopped")
        assert client.get_task("long").attempt == 1
    ends = [e for e in read_executions(dev.log) if e["task_id"] == "long"]
    assert [e["event"] for e in ends] == ["start"]  # stopped, never slept to its end


def test_a_dead_letter_is_redriven_by_clicking_and_runs_again(browser: Browser, dev: Dev) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 760})
    page.goto(dev.console + "ns/shop/dead-letters")
    row = page.locator("table.dead-letters tbody tr", has_text="broken")
    expect(row).to_contain_text("ValueError: the first run of this task fails")
    shot(page, "dead-letters")
    page.once("dialog", lambda dialog: dialog.accept())  # "Run broken again now?"
    row.get_by_role("button", name="Redrive").click()
    expect(page.locator("h1")).to_have_text("Task broken")
    with dev.client("shop") as client:
        eventually(lambda: state(client, "broken") == tasks_pb2.TASK_STATE_SUCCEEDED, timeout=60)
    page.reload()
    expect(page.locator("dd .state")).to_have_text("SUCCEEDED")
    expect(page.locator("table.runs tbody tr")).to_have_count(2)
    starts = [e for e in read_executions(dev.log) if e["task_id"] == "broken"]
    assert len(starts) == 2


def test_a_schedule_shows_its_next_fire_times_and_ledger_and_is_paused_and_backfilled(
    browser: Browser, dev: Dev
) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(dev.console + "ns/shop/schedules")
    page.get_by_role("link", name="heartbeat").click()
    expect(page.locator("h1")).to_have_text("Schedule heartbeat")
    expect(page.locator("dl.facts")).to_contain_text("cron */2 * * * * * (Europe/Oslo)")
    upcoming = page.locator("table.upcoming tbody tr")
    expect(upcoming).to_have_count(10)
    expect(upcoming.first).to_contain_text("CET")  # each fire time in the schedule's zone too
    expect(page.locator("table.ledger tbody tr", has_text="fired").first).to_be_visible()
    shot(page, "schedule")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Pause").click()
    expect(page.locator("dd .state")).to_have_text("paused")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Resume").click()
    expect(page.locator("dd .state")).to_have_text("active")
    # The preview of a backfill of 10 s in the past lists its 5 occurrences, then runs them.
    end = (int(time.time()) - 120) // 10 * 10
    span = {"from": _iso(end - 10), "to": _iso(end)}
    page.goto(dev.console + "ns/shop/schedules/heartbeat?" + "&".join(
        f"{k}={v}" for k, v in span.items()))  # fmt: skip
    expect(page.locator("table.backfill tbody tr")).to_have_count(5)
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Backfill 5 occurrence(s)").click()
    expect(page.locator("table.ledger tbody tr", has_text="backfilled")).to_have_count(5)


def _iso(epoch_s: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch_s))


def test_dead_letters_are_filtered_by_error_type_and_a_selection_redriven_at_once(
    browser: Browser, dev: Dev
) -> None:
    once = tasks_pb2.RetryPolicy(max_attempts=1)
    with dev.client("shop") as client:
        for task_id in ("bulk-1", "bulk-2"):
            create(client, task_id, "fail_first_run", retry_policy=once)
        create(client, "rejected", "reject")
        ids = ["bulk-1", "bulk-2", "rejected"]
        dead = tasks_pb2.TASK_STATE_DEAD_LETTERED
        eventually(lambda: all(state(client, t) == dead for t in ids), timeout=60)
    page = browser.new_page(viewport={"width": 1280, "height": 760})
    page.goto(dev.console + "ns/shop/dead-letters?error_type=ValueError")
    rows = page.locator("table.dead-letters tbody tr")
    assert all("ValueError" in t for t in rows.all_inner_texts())
    expect(rows.filter(has_text="rejected")).to_have_count(0)
    for task_id in ("bulk-1", "bulk-2"):
        page.check(f"input[name=task_id][value={task_id}]")
    shot(page, "dead-letters-filtered")
    asked = click_and_confirm(page, "Redrive selected")
    expect(page.locator(".notice")).to_have_text("2 of 2 redriven")
    assert asked == ["Redrive 2 selected dead letter(s) now?"]
    with dev.client("shop") as client:
        done = tasks_pb2.TASK_STATE_SUCCEEDED
        eventually(lambda: all(state(client, t) == done for t in ids[:2]), timeout=60)
        assert state(client, "rejected") == tasks_pb2.TASK_STATE_DEAD_LETTERED
    purge_the_one_that_never_works(page, dev)


def test_every_dead_letter_a_filter_selects_is_redriven_as_one_counted_action(
    browser: Browser, dev: Dev
) -> None:
    once = tasks_pb2.RetryPolicy(max_attempts=1)
    ids = ["every-1", "every-2", "every-3"]
    with dev.client("ops") as client:  # a namespace of its own: nothing else dead-letters here
        for task_id in ids:
            create(client, task_id, "fail_first_run", retry_policy=once)
        dead = tasks_pb2.TASK_STATE_DEAD_LETTERED
        eventually(lambda: all(state(client, t) == dead for t in ids), timeout=60)
    page = browser.new_page(viewport={"width": 1280, "height": 760})
    page.goto(dev.console + "ns/ops/dead-letters?error_type=ValueError")
    page.get_by_role("link", name="Redrive every match…").click()
    expect(page.locator(".count")).to_have_text(
        "3 dead letter(s) match any queue, error type ValueError."
    )
    expect(page.locator("table.sample tbody tr")).to_have_count(3)
    shot(page, "bulk-preview")
    asked = click_and_confirm(page, "Redrive every match")
    assert asked == ["Redrive 3 dead letter(s) now, from attempt 1?"]
    expect(page.locator("h1")).to_contain_text("Bulk action console-")
    # The server runs the action on its own; the page follows it without a reload.
    expect(page.locator("dd .state")).to_have_text("SUCCEEDED", timeout=30_000)
    expect(page.locator("dl.facts")).to_contain_text("3 / 0 / 0")  # acted / skipped / failed
    shot(page, "bulk-action")
    with dev.client("ops") as client:
        done = tasks_pb2.TASK_STATE_SUCCEEDED
        eventually(lambda: all(state(client, t) == done for t in ids), timeout=60)
        assert all(client.get_task(t).attempt == 1 for t in ids)  # from attempt 1 again
    page.get_by_role("link", name="Bulk actions").click()
    expect(page.locator("table.bulk-actions tbody tr")).to_have_count(1)
    expect(page.locator("table.bulk-actions tbody tr")).to_contain_text("3 of 3")


def purge_the_one_that_never_works(page: Page, dev: Dev) -> None:
    """Purged: the task is gone, its runs are kept."""
    page.goto(dev.console + "ns/shop/dead-letters")
    page.check("input[name=task_id][value=rejected]")
    asked = click_and_confirm(page, "Purge selected")
    expect(page.locator(".notice")).to_have_text("1 of 1 purged")
    assert asked[0].startswith("Delete 1 selected dead letter(s) for good?")
    with dev.client("shop") as client, pytest.raises(NotFoundError):
        client.get_task("rejected")
    page.goto(dev.console + "ns/shop/runs?queue=e2e&status=dead_lettered")
    expect(page.locator("table.runs tbody tr", has_text="rejected")).to_have_count(1)


def test_upcoming_shows_what_is_due_in_each_coming_minute_per_queue(
    browser: Browser, dev: Dev
) -> None:
    with dev.client("shop") as client:
        for i, minutes in enumerate((10, 10, 10, 20, 20, 90)):
            request = tasks_pb2.CreateTaskRequest(
                task_id=f"later-{i}", queue="later", handler="record",
                delay=_seconds(minutes * 60 + 5),
            )  # fmt: skip
            client.create_task(request)
        client.cancel_task("later-2")
    page = browser.new_page(viewport={"width": 1280, "height": 760})

    def shown() -> str:
        page.goto(dev.console + "ns/shop/upcoming")
        return page.locator("main p").first.inner_text()

    eventually(lambda: shown().startswith("4 task(s) due in the next 60"), timeout=30)
    rows = page.locator("table.upcoming-minutes tbody tr")
    expect(rows).to_have_count(2)  # the minutes 10 and 20 from now; 90 is outside the hour
    assert [r.split("\t")[-2].strip() for r in rows.all_inner_texts()] == ["2", "2"]
    shot(page, "upcoming")
    page.goto(dev.console + "ns/shop/upcoming?minutes=120")
    expect(page.locator("table.upcoming-minutes tbody tr")).to_have_count(3)


def test_the_run_history_is_searched_by_queue_and_status(browser: Browser, dev: Dev) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 760})
    page.goto(dev.console + "ns/shop/runs")
    page.fill("input[name=queue]", "e2e")
    page.select_option("select[name=status]", "failed")
    page.get_by_role("button", name="Filter").click()
    rows = page.locator("table.runs tbody tr")
    expect(rows.first).to_be_visible()
    texts = rows.all_inner_texts()
    assert texts and all("FAILED" in t for t in texts)
    assert any("flaky-1" in t for t in texts)
    shot(page, "runs")


def test_a_read_only_login_sees_but_is_refused_an_action(browser: Browser, tmp_path: Path) -> None:
    stack = AuthStack(tmp_path)
    _, writer = stack.create("writer", "write:shop")
    _, reader = stack.create("reader", "read:shop")
    dev = Dev(tmp_path, "--auth")
    try:
        with dev.client("shop", writer) as client:
            create(client, "later", "record", delay=_seconds(3_600))
        page = browser.new_page(viewport={"width": 1280, "height": 760})
        page.goto(dev.console)
        expect(page).to_have_url(re.compile(r"/console/login$"))
        _login(page, "tikk_" + "0" * 32 + "_nope")
        expect(page.locator(".error")).to_have_text("That token is not valid.")
        _login(page, reader)
        _sees_its_namespaces_not_the_queues(page)
        page.goto(dev.console + "ns/shop/tasks/later")
        expect(page.locator("dd .state")).to_have_text("SCHEDULED")
        expect(page.get_by_role("button", name="Cancel")).to_have_count(0)
        expect(page.locator(".hint")).to_contain_text("Read-only")
        shot(page, "read-only")
        csrf = page.evaluate("document.cookie")  # HttpOnly: the session is not readable
        assert "tikk_session" not in csrf
        forged = page.request.post(dev.console + "ns/shop/tasks/later/cancel",
                                   form={"csrf": "guess"})  # fmt: skip
        assert forged.status == 403
        page.goto(dev.console + "ns/other/dead-letters")
        expect(page.locator(".error")).to_have_text("role read on namespace 'other' is not granted")
        page.goto(dev.console + "ns/shop/dead-letters/all?verb=purge")  # a bulk purge: admins'
        expect(page.locator(".error")).to_have_text("role admin on namespace 'shop' is not granted")
        started = page.request.post(dev.console + "ns/shop/bulk", form={"verb": "purge"})
        assert started.status == 403
        page.get_by_role("button", name="Sign out").click()
        _login(page, writer)
        page.goto(dev.console + "ns/shop/tasks/later")
        page.once("dialog", lambda dialog: dialog.accept())
        page.get_by_role("button", name="Cancel").click()
        expect(page.locator("dd .state")).to_have_text("CANCELLED")
    finally:
        dev.process.stop()


def _sees_its_namespaces_not_the_queues(page: Page) -> None:
    """Queues are every namespace's: a reader of one sees its namespace's pages instead."""
    expect(page.locator("table.namespaces td").first).to_have_text("shop")
    expect(page.locator("table.queues")).to_have_count(0)
    shot(page, "overview-of-a-namespace-reader")


def _login(page: Page, token: str) -> None:
    page.fill("input[name=token]", token)
    page.get_by_role("button", name="Sign in").click()


def _seconds(n: int) -> Any:
    from google.protobuf.duration_pb2 import Duration

    return Duration(seconds=n)


def test_over_tls_the_console_is_https_and_its_cookie_secure(tmp_path: Path) -> None:
    dev = Dev(tmp_path, "--tls")
    try:
        assert dev.console.startswith("https://")
        trusted = ssl.create_default_context(cafile=str(tmp_path / "tls" / "ca.pem"))
        with urllib.request.urlopen(dev.console, context=trusted, timeout=10) as answer:
            cookie = answer.headers["Set-Cookie"]
            policy = answer.headers["Content-Security-Policy"]
        assert "Secure" in cookie and "HttpOnly" in cookie and "SameSite=Strict" in cookie
        assert "script-src 'self'" in policy
        plain = ssl.create_default_context()  # trusts no development CA: refused
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(dev.console, context=plain, timeout=10)
    finally:
        assert dev.process.stop() == 0
