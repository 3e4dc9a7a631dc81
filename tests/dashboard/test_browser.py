"""The dashboard in a real browser: the distribution's headless Chromium driven by Selenium
through the distribution's chromedriver (apt packages ``chromium`` and ``chromium-driver``;
``bash .ci/run`` installs them; nothing is downloaded at test time).

The journey an on-call engineer takes: the overview with live data and its plots, the jobs
filtered to the failed ones, a failed job opened and retried, and the job watched until the
running worker completes it; and, without auth, no action offered and a forged POST refused.
Each page is screenshotted into a directory printed in the log (``$SQLA_QUEUE_DASHBOARD_SCREENSHOTS``
if set: docs/how-to/dashboard.md's pictures are made this way). Missing Chromium skips these
tests locally with that hint; in CI (``CI=true``) it fails them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

from sqla_queue.dashboard import create_app
from sqla_queue.services.registry import WorkerDescription, WorkerRegistration

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as ec  # noqa: E402
from selenium.webdriver.support.select import Select  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
INSTALL_HINT = "apt-get install chromium chromium-driver"
SCREENSHOTS_ENV = "SQLA_QUEUE_DASHBOARD_SCREENSHOTS"
WIDTH = 1360
OPERATOR_COOKIE = "dashboard-operator"


@pytest.fixture(scope="module")
def screenshots(request, tmp_path_factory) -> Path:
    directory = Path(os.environ.get(SCREENSHOTS_ENV) or tmp_path_factory.mktemp("dashboard-screenshots"))
    directory.mkdir(parents=True, exist_ok=True)
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None:  # past output capture, or a passing run would drop the line from the log
        with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
            reporter.write_line(f"dashboard screenshots: {directory.resolve()}")
    return directory


@pytest.fixture(scope="module")
def browser(tmp_path_factory) -> Iterator:
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        if IN_CI:
            pytest.fail(f"Chromium and chromedriver are not installed, and CI must run these tests: {INSTALL_HINT}")
        pytest.skip(f"Chromium and chromedriver are not installed: {INSTALL_HINT}")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--window-size={WIDTH},900", "--hide-scrollbars",
                 f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def operator_cookie(request) -> bool:
    """The host's auth in these tests: a cookie its own login would have set."""
    return request.cookies.get(OPERATOR_COOKIE) == "yes"


@pytest.fixture
def served(dash_queue) -> Iterator[str]:
    """The dashboard (auth by `operator_cookie`, refreshing every second) under uvicorn on a
    free loopback port; its base URL."""
    import uvicorn

    app = create_app(dash_queue, auth=operator_cookie, refresh=1.0, title="shop jobs")
    sock = socket.socket()
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as uvicorn's own sockets have it
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@pytest.fixture
def start_worker(dash_queue) -> Iterator:
    """Starts a worker in a thread, which runs until the test ends."""
    running = dash_queue.worker(queues=("default", "images"), concurrency=2, poll_interval=0.2)
    thread = threading.Thread(target=running.run, daemon=True)
    yield thread.start
    if thread.is_alive():
        running.stop()
        thread.join(30)


def sign_in(browser, base: str) -> None:
    browser.get(base + "/static/dashboard.css")  # a page of the site, to set its cookie on
    browser.add_cookie({"name": OPERATOR_COOKIE, "value": "yes", "path": "/"})


def sign_out(browser, base: str) -> None:
    browser.get(base + "/static/dashboard.css")
    browser.delete_all_cookies()


def wait(browser, condition, seconds: float = 20):
    """Until `condition` holds; an element the live refresh just replaced is read again."""
    return WebDriverWait(browser, seconds, poll_frequency=0.1,
                         ignored_exceptions=(StaleElementReferenceException,)).until(condition)


def texts(browser, css: str) -> list[str]:
    return [element.text for element in browser.find_elements(By.CSS_SELECTOR, css)]


def screenshot(browser, directory: Path, name: str) -> None:
    """The whole page, not only the window: the viewport is stretched to the content's height."""
    height = browser.execute_script("return Math.ceil(document.body.getBoundingClientRect().height)")
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": WIDTH, "height": min(height, 6000), "deviceScaleFactor": 1, "mobile": False})
    try:
        browser.save_screenshot(str(directory / f"{name}.png"))
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


# The hour before the test, as workers would have sampled it: mail flows steadily, images
# back up from 35 minutes ago until a second worker drains them, and failures jump 20
# minutes ago (a deploy). Written as the samples table's rows: the plots read nothing else.
PAST_HOUR = text("""
    INSERT INTO sqla_queue_jobs_samples
        (bucket, queue_name, pending, eligible, scheduled, running, completed, failed, retried,
         empty_claims, oldest_eligible_age, duration_p50, duration_p95)
    SELECT date_trunc('minute', now()) - make_interval(mins => m), q.name,
           p.pending, p.pending - m % 3, m % 3, least(p.pending, 4), p.completed, p.failed, p.failed * 2,
           CASE WHEN p.pending < 5 THEN (m * 5) % 7 ELSE 0 END, make_interval(secs => p.pending * 0.4),
           make_interval(secs => q.p50 * (1 + (m % 7) / 10.0)), make_interval(secs => q.p50 * (3 + (m % 5) / 4.0))
    FROM generate_series(2, 60) AS m,
         (VALUES ('default', 0.08), ('images', 0.9)) AS q(name, p50),
         LATERAL (SELECT
             CASE WHEN q.name = 'images' AND m BETWEEN 12 AND 35 THEN (36 - m) * 6 + m % 4
                  ELSE 2 + m % 5 END AS pending,
             CASE WHEN q.name = 'default' THEN 40 + (m * 7) % 13 ELSE 8 + m % 6 END AS completed,
             CASE WHEN m < 20 AND q.name = 'default' THEN 3 + m % 4 ELSE m % 9 / 8 END AS failed) AS p
""")


def record_past_hour(dash_queue) -> None:
    with dash_queue.engine.begin() as conn:
        conn.execute(PAST_HOUR)


def seed(dash_queue, failed_job) -> int:
    """A shop's afternoon: an hour of samples, pending mail and images, a completed run, one
    failed job."""
    record_past_hour(dash_queue)
    dash_queue.enqueue_many([{"task": "send_email", "payload": {"to": f"customer{n}@example.com"}} for n in range(12)])
    dash_queue.enqueue_many([{"task": "resize", "payload": {"image": n}} for n in range(5)])
    dash_queue.worker(queues=("images",), concurrency=2).run(until_empty=True)
    dash_queue.enqueue_many([{"task": "resize", "payload": {"image": n}} for n in range(3)])
    failed = failed_job({"to": "bounced@example.com"}, error="SMTPRecipientsRefused: 550 mailbox unavailable")
    dash_queue.record_sample()
    return failed.id


def test_overview_shows_live_queues_and_plots(browser, served, dash_queue, failed_job, screenshots):
    seed(dash_queue, failed_job)
    browser.get(served + "/")
    wait(browser, lambda b: [t.split()[0] for t in texts(b, "#queues tbody tr td:first-child")] == ["default", "images"])
    wait(browser, lambda b: texts(b, "#total-pending") == ["15"])
    wait(browser, lambda b: b.find_element(By.CSS_SELECTOR, "figure.plot svg.chart path.line").is_displayed())
    box = wait(browser, lambda b: b.find_element(By.CSS_SELECTOR, "figure.plot svg.chart").rect)
    assert box["width"] > 300 and box["height"] > 100  # the plot is laid out, not collapsed
    wait(browser, lambda b: len(b.find_elements(By.CSS_SELECTOR, "svg.chart .xlabel")) >= 3 * 5)  # time ticks
    screenshot(browser, screenshots, "overview")


def test_filter_open_a_failed_job_retry_it_and_watch_it_complete(browser, served, dash_queue, failed_job,
                                                                 start_worker, screenshots):
    failed_id = seed(dash_queue, failed_job)
    start_worker()
    sign_in(browser, served)
    browser.get(served + "/jobs")
    Select(browser.find_element(By.NAME, "status")).select_by_value("failed")
    browser.find_element(By.CSS_SELECTOR, "#filters button[type=submit]").click()
    wait(browser, ec.url_contains("status=failed"))
    links = browser.find_elements(By.CSS_SELECTOR, "#jobs tbody td.num a")
    assert [link.text for link in links] == [str(failed_id)]
    screenshot(browser, screenshots, "failed-jobs")
    links[0].click()
    wait(browser, ec.text_to_be_present_in_element((By.ID, "last-error"), "550 mailbox unavailable"))
    screenshot(browser, screenshots, "job-failed")
    browser.find_element(By.XPATH, "//button[text()='Retry now']").click()
    flash = wait(browser, ec.visibility_of_element_located((By.CSS_SELECTOR, ".flash-ok")))
    assert "is pending again" in flash.text
    wait(browser, ec.text_to_be_present_in_element((By.CSS_SELECTOR, ".pagehead .badge"), "completed"))
    assert dash_queue.get_job(failed_id).status.value == "completed"
    screenshot(browser, screenshots, "job-completed")


def test_jobs_workers_and_doctor_pages(browser, served, dash_queue, failed_job, screenshots):
    seed(dash_queue, failed_job)
    for worker_id, queues in (("web-1:4242:5f3a9c", ["default", "images"]), ("web-2:4243:0b71e2", ["images"])):
        assert WorkerRegistration(dash_queue.core, WorkerDescription.of_this_process(
            worker_id, queues, dash_queue.task_names, 8, timedelta(minutes=1))).register()
    dash_queue.claim("default", worker_id="web-1:4242:5f3a9c", limit=2)
    sign_in(browser, served)
    browser.get(served + "/jobs")
    assert len(wait(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "#jobs tbody tr"))) == 21
    screenshot(browser, screenshots, "jobs")
    browser.get(served + "/workers")
    wait(browser, lambda b: any("web-1:4242:5f3a9c" in row for row in texts(b, "#workers tbody tr")))
    screenshot(browser, screenshots, "workers")
    browser.get(served + "/doctor")
    assert len(wait(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "#checks section.check"))) >= 5
    screenshot(browser, screenshots, "doctor")


def test_without_auth_no_action_is_offered_and_a_forged_post_is_refused(browser, served, dash_queue,
                                                                         failed_job, screenshots):
    failed_id = failed_job().id
    sign_out(browser, served)
    browser.get(f"{served}/jobs/{failed_id}")
    wait(browser, ec.text_to_be_present_in_element((By.CSS_SELECTOR, ".mode"), "read-only"))
    assert browser.find_elements(By.XPATH, "//button[text()='Retry now']") == []
    status = browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        f"fetch('/jobs/{failed_id}/retry', {{method: 'POST', body: new URLSearchParams({{csrf_token: 'x'}})}})"
        ".then(r => done(r.status));")
    assert status == 403
    assert dash_queue.get_job(failed_id).status.value == "failed"
    screenshot(browser, screenshots, "read-only")
