"""The transactional outbox's relay: hands committed work to RQ.

Messages are written in the transaction of the state change that needs them. Right after
commit the relay enqueues them; the sweep relays whatever that missed (Redis down, crash).
Job ids are derived from the message, so a second enqueue of the same message is harmless,
and every job re-checks the database anyway.
"""

from __future__ import annotations

import logging

import django_rq
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.db.models.functions import Now
from django.utils import timezone
from redis.exceptions import RedisError
from rq.job import Job

from runs.models import OutboxMessage

logger = logging.getLogger(__name__)

# Never rename: these job paths are stored in outbox rows and in queued RQ jobs.
EXECUTE_JOB = "runs.jobs.execute_run"
NOTIFY_JOB = "runs.notifications.approval_notify"
OPEN_CASE_JOB = "reconciliation.jobs.open_cases"


def job_id_for(message: OutboxMessage) -> str:
    return f"outbox-{message.pk}"


def deliver_after_commit(message_id: int) -> None:
    transaction.on_commit(lambda: relay(OutboxMessage.objects.filter(pk=message_id)))


def relay(messages) -> int:
    """Enqueues undelivered messages; returns how many were handed to RQ."""
    queue = django_rq.get_queue(settings.RQ_EXECUTION_QUEUE)
    delivered = 0
    due = Q(relay_after__isnull=True) | Q(relay_after__lte=Now())
    for message in messages.filter(due, delivered_at__isnull=True).order_by("pk"):
        job_id = job_id_for(message)
        try:
            if not Job.exists(job_id, connection=queue.connection):
                queue.enqueue(
                    message.job,
                    args=(str(message.run_id) if message.run_id else None,),
                    kwargs=message.payload,
                    job_id=job_id,
                    result_ttl=0,
                    failure_ttl=24 * 3600,
                )
        except RedisError as error:
            logger.warning("outbox %s not relayed, Redis: %s", message.pk, error)
            OutboxMessage.objects.filter(pk=message.pk).update(
                delivery_attempts=message.delivery_attempts + 1
            )
            break
        OutboxMessage.objects.filter(pk=message.pk, delivered_at__isnull=True).update(
            delivered_at=timezone.now(), delivery_attempts=message.delivery_attempts + 1
        )
        delivered += 1
    return delivered
