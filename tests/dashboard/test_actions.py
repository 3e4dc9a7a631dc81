"""The actions over HTTP: refused without `auth`, refused without the CSRF token, and when
allowed done through the Queue's own operator methods, with a report of what changed."""

from __future__ import annotations

import base64
import logging
import re

import pytest
from starlette.testclient import TestClient

from sqla_queue.dashboard import basic_auth, create_app
from sqla_queue.dashboard.security import FLASH_COOKIE


def operator(queue, **options) -> TestClient:
    return TestClient(create_app(queue, auth=lambda request: True, **options), follow_redirects=False)


def token(client: TestClient, path: str = "/jobs/0", **request) -> str:
    """The CSRF token an operator's page carries (the GET also sets the browser's cookie)."""
    page = client.get(path, **request)
    return re.search(r'<meta name="csrf-token" content="([^"]+)">', page.text)[1]


def flash(client: TestClient, response) -> str:
    assert response.status_code == 303, response.text
    page = client.get(response.headers["location"])
    return " ".join(re.search(r'class="flash flash-\w+" role="status">(.*?)</div>', page.text, re.S)[1].split())


def test_read_only_dashboard_shows_no_action_and_refuses_a_post(dash_queue, failed_job):
    job = failed_job()
    client = TestClient(create_app(dash_queue), follow_redirects=False)
    page = client.get(f"/jobs/{job.id}")
    assert "read-only" in page.text and "Retry now" not in page.text
    assert "csrf-token" not in page.text
    refused = client.post(f"/jobs/{job.id}/retry", data={"csrf_token": "x"})
    assert refused.status_code == 403 and "read-only" in refused.text
    assert dash_queue.get_job(job.id).status.value == "failed"


def test_auth_saying_no_refuses_as_none_would(dash_queue, failed_job):
    job = failed_job()
    client = TestClient(create_app(dash_queue, auth=lambda request: False), follow_redirects=False)
    assert client.post(f"/jobs/{job.id}/retry", data={}).status_code == 403
    assert dash_queue.get_job(job.id).status.value == "failed"


@pytest.mark.parametrize("field", [None, "forged", "bm9uY2U.c2lnbmF0dXJl"])
def test_a_post_without_the_pages_csrf_token_changes_nothing(dash_queue, failed_job, field):
    job = failed_job()
    client = operator(dash_queue)
    client.get("/")  # the browser has its CSRF cookie
    response = client.post(f"/jobs/{job.id}/retry", data={} if field is None else {"csrf_token": field})
    assert response.status_code == 403 and "CSRF" in response.text
    assert dash_queue.get_job(job.id).status.value == "failed"


def test_a_token_from_another_browser_is_refused(dash_queue, failed_job):
    job = failed_job()
    theirs = operator(dash_queue)
    stolen = token(theirs)
    mine = operator(dash_queue)
    mine.get("/")
    assert mine.post(f"/jobs/{job.id}/retry", data={"csrf_token": stolen}).status_code == 403


def test_retry_makes_the_failed_job_pending_and_says_so(dash_queue, failed_job, caplog):
    job = failed_job({"to": "secret-address@example.com"})
    client = operator(dash_queue)
    with caplog.at_level(logging.INFO, logger="sqla_queue.dashboard"):
        response = client.post(f"/jobs/{job.id}/retry", data={"csrf_token": token(client, f"/jobs/{job.id}")})
    assert response.headers["location"] == f"/jobs/{job.id}"
    assert flash(client, response) == (f"job {job.id} (send_email on default) is pending again, due now: "
                                       "attempt 2 of 5")
    assert dash_queue.get_job(job.id).status.value == "pending"
    assert f"retried job {job.id}" in caplog.text and "secret-address" not in caplog.text


def test_retrying_a_job_that_is_not_failed_reports_why(dash_queue):
    job_id = dash_queue.enqueue("send_email", {"to": "a"})
    client = operator(dash_queue)
    response = client.post(f"/jobs/{job_id}/retry", data={"csrf_token": token(client), "next": f"/jobs/{job_id}"})
    assert flash(client, response) == f"job {job_id} is pending: only failed jobs can be retried"


def test_cancel_a_pending_job(dash_queue):
    job_id = dash_queue.enqueue("send_email", {"to": "a"})
    client = operator(dash_queue)
    response = client.post(f"/jobs/{job_id}/cancel", data={"csrf_token": token(client)})
    assert flash(client, response) == f"cancelled job {job_id} (send_email on default)"
    assert dash_queue.get_job(job_id).status.value == "cancelled"


def test_bulk_retry_of_every_failed_job_of_a_filter(dash_queue, failed_job):
    mine = [failed_job().id for _ in range(3)]
    other = failed_job(task="resize").id
    client = operator(dash_queue)
    response = client.post("/jobs/bulk", data={"csrf_token": token(client), "action": "retry_filter",
                                               "queue": "default", "next": "/jobs?status=failed"})
    report = flash(client, response)
    assert report.startswith("retried 3 jobs (")
    assert sorted(int(n) for n in re.findall(r"\d+", report.split("(", 1)[1])) == sorted(mine)
    assert {dash_queue.get_job(i).status.value for i in mine} == {"pending"}
    assert dash_queue.get_job(other).status.value == "failed"


def test_bulk_cancel_of_the_ticked_jobs(dash_queue):
    ids = [dash_queue.enqueue("send_email", {"to": str(n)}) for n in range(4)]
    client = operator(dash_queue)
    response = client.post("/jobs/bulk", data={"csrf_token": token(client), "action": "cancel",
                                               "job_id": [str(ids[0]), str(ids[2])]})
    assert flash(client, response).startswith("cancelled (or asked to stop) 2 jobs")
    assert [dash_queue.get_job(i).status.value for i in ids] == ["cancelled", "pending", "cancelled", "pending"]


def test_bulk_with_nothing_ticked_says_so(dash_queue):
    client = operator(dash_queue)
    response = client.post("/jobs/bulk", data={"csrf_token": token(client), "action": "retry"})
    assert flash(client, response).startswith("no job selected")


def test_pause_and_resume_a_queue(dash_queue):
    dash_queue.enqueue("resize", {"image": 1})
    client = operator(dash_queue)
    response = client.post("/queues/pause", data={"csrf_token": token(client), "queue": "images"})
    assert flash(client, response).startswith("queue images is paused")
    assert [q.paused for q in dash_queue.list_queues() if q.name == "images"] == [True]
    response = client.post("/queues/resume", data={"csrf_token": token(client), "queue": "images"})
    assert flash(client, response) == "queue images is resumed (1 pending)"
    assert [q.paused for q in dash_queue.list_queues() if q.name == "images"] == [False]


def test_a_redirect_never_leaves_the_site(dash_queue):
    job_id = dash_queue.enqueue("send_email", {"to": "a"})
    client = operator(dash_queue)
    response = client.post(f"/jobs/{job_id}/cancel", data={"csrf_token": token(client), "next": "//evil.example/"})
    assert response.headers["location"] == f"/jobs/{job_id}"


def test_a_forged_flash_cookie_is_not_shown(dash_queue):
    client = operator(dash_queue)
    text = base64.urlsafe_b64encode(b"ok\n<script>x</script>").decode()
    client.cookies.set(FLASH_COOKIE, f"{text}.forgedsignature")
    assert "flash-ok" not in client.get("/").text


def test_basic_auth_challenges_then_allows_the_right_password(dash_queue, failed_job):
    job = failed_job()
    client = TestClient(create_app(dash_queue, auth=basic_auth("s3cret")), follow_redirects=False)
    challenge = client.get("/signin")
    assert challenge.status_code == 401 and challenge.headers["www-authenticate"].startswith("Basic")
    assert "Sign in" in client.get("/").text
    right, wrong = ("admin", "s3cret"), ("admin", "guess")
    assert client.get("/signin", auth=right).status_code == 303
    csrf = token(client, auth=right)
    assert client.post(f"/jobs/{job.id}/retry", data={"csrf_token": csrf}, auth=wrong).status_code == 403
    assert dash_queue.get_job(job.id).status.value == "failed"
    response = client.post(f"/jobs/{job.id}/retry", data={"csrf_token": csrf}, auth=right)
    assert response.status_code == 303
    assert dash_queue.get_job(job.id).status.value == "pending"


def test_an_async_auth_callable_is_awaited(dash_queue, failed_job):
    job = failed_job()

    async def auth(request):
        return request.headers.get("x-operator") == "yes"

    client = TestClient(create_app(dash_queue, auth=auth), follow_redirects=False)
    data = {"csrf_token": token(client, headers={"x-operator": "yes"})}
    assert client.post(f"/jobs/{job.id}/retry", data=data).status_code == 403
    assert client.post(f"/jobs/{job.id}/retry", data=data, headers={"x-operator": "yes"}).status_code == 303


def test_an_empty_password_is_refused():
    with pytest.raises(ValueError, match="non-empty password"):
        basic_auth("")


def test_bulk_ids_that_are_digits_but_not_numbers_are_refused_cleanly(dash_queue):
    """D11: ``"²".isdigit()`` is true and ``int("²")`` raises: a 500 before."""
    client = operator(dash_queue)
    response = client.post("/jobs/bulk", data={"csrf_token": token(client), "action": "cancel", "job_id": ["²"]})
    assert flash(client, response).startswith("job ids must be whole numbers")
