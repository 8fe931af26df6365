"""The job dashboard (django-rq) is tenant-blind: only active superusers reach any of it."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.urls import NoReverseMatch, reverse
from django_rq import urls as django_rq_urls
from django_rq.settings import get_queues_map
from rq import Queue

from control.models import AuditEntry
from tests.factories import make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def job(redis_queue):
    # Plain RQ, not django-rq's queue: that one waits for a commit the test never makes.
    return Queue(redis_queue.name, connection=redis_queue.connection).enqueue("math.floor", 1.5)


def _every_dashboard_url(job) -> list[str]:
    """One URL for each of django-rq's patterns, so a pattern added upstream is covered too."""
    samples = {
        "queue_index": get_queues_map()[settings.RQ_EXECUTION_QUEUE],
        "job_id": job.id,
        "result_id": "1",
        "key": "worker",
        "scheduler_index": 0,
        "connection_index": 0,
        "scheduler_name": "scheduler",
        "cron_job_name": "nightly",
        "token": "guess",
    }
    urls = set()
    for pattern in django_rq_urls.urlpatterns:
        names = pattern.pattern.regex.groupindex
        kwargs = {name: samples[name] for name in names}
        urls.add(reverse(f"django_rq:{pattern.name}", kwargs=kwargs))
    return sorted(urls)


def _url(name: str, job=None) -> str:
    kwargs = {"queue_index": get_queues_map()[settings.RQ_EXECUTION_QUEUE]}
    if job is not None:
        kwargs["job_id"] = job.id
    return reverse(f"django_rq:{name}", kwargs=kwargs)


def test_a_staff_auditor_can_neither_read_nor_act_on_any_dashboard_page(
    client, staff_auditor, redis_queue, job
):
    client.force_login(staff_auditor)
    urls = _every_dashboard_url(job)
    actions = {"action": "delete", "job_ids": [job.id], "next_url": "/"}

    for url in urls:
        assert client.get(url).status_code == 403, url
        assert client.post(url, actions).status_code == 403, url

    assert len(urls) == len(django_rq_urls.urlpatterns)
    assert redis_queue.job_ids == [job.id]
    refused = AuditEntry.objects.filter(verb="auth.denied", actor="aude")
    assert refused.count() == 2 * len(urls)


def test_a_tenant_admin_is_refused_and_a_deactivated_superuser_is_logged_out(
    client, tenant, django_user_model, job
):
    client.force_login(make_user(tenant, "admin"))
    assert client.get(_url("jobs")).status_code == 403

    retired = django_user_model.objects.create_superuser("retired", password="x" * 20)
    client.force_login(retired)
    retired.is_active = False
    retired.save(update_fields=["is_active"])
    response = client.get(_url("jobs"))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))


def test_nobody_logged_out_gets_in_and_is_sent_to_the_admin_login(client, redis_queue, job):
    for url in _every_dashboard_url(job):
        response = client.post(url, {"action": "delete", "job_ids": [job.id]})
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("admin:login") + "?next="), url

    assert redis_queue.job_ids == [job.id]


def test_a_superuser_reads_the_dashboard_and_can_empty_the_queue(
    client, superuser, redis_queue, job
):
    client.force_login(superuser)

    for url in (reverse("django_rq:home"), _url("jobs"), _url("job_detail", job)):
        response = client.get(url)
        assert response.status_code == 200, url
    assert job.id in client.get(_url("jobs")).content.decode()

    assert client.post(_url("clear")).status_code == 302
    assert redis_queue.job_ids == []


def test_the_dashboard_is_not_inside_the_admin_where_any_staff_would_reach_it(
    client, staff_auditor
):
    client.force_login(staff_auditor)

    with pytest.raises(NoReverseMatch):
        reverse("admin:django_rq_home")
    assert client.get("/admin/django_rq/dashboard/").status_code == 404
