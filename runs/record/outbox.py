"""The transactional outbox's relay: hands committed work to RQ.

Messages are written in the transaction of the state change that needs them. Right after
commit the relay enqueues them; the sweep relays whatever that missed (Redis down, crash).

Execute messages are coalesced. Every drain job drains every due action, not only its own
message's, so a burst of approvals needs one job, not one each (one each left almost every
job with nothing to do, paying RQ's overhead and a claim query). A message is marked
delivered only once a drain job is seen *waiting in the queue* after its commit: such a job
has not started, so its first claim comes after the commit and sees the action. A job that
is already running is never relied on: it may have made its last, empty claim a moment
before the commit. Other messages get one job each, under an id derived from the message,
so a second enqueue of the same message is harmless; every job re-checks the database.
"""

from __future__ import annotations

import logging
import uuid

from django.db import transaction
from django.db.models import F, Q
from django.db.models.functions import Now
from django.utils import timezone
from redis.exceptions import RedisError
from rq import Queue
from rq.job import Job

from control.foundation.queues import execution_queue
from runs.models import OutboxMessage

logger = logging.getLogger(__name__)

# Never rename: these job paths are stored in outbox rows and in queued RQ jobs.
EXECUTE_JOB = "runs.jobs.execute_run"
NOTIFY_JOB = "runs.notifications.approval_notify"
OPEN_CASE_JOB = "reconciliation.jobs.open_cases"

# Names the drain job most recently queued on a queue; only a hint (see drain_ensure_queued).
WAITING_DRAIN_KEY = "countersign:waiting-drain:{queue}"
WAITING_DRAIN_TTL = 24 * 3600


def job_id_for(message: OutboxMessage) -> str:
    return f"outbox-{message.pk}"


def deliver_after_commit(message_id: int) -> None:
    transaction.on_commit(lambda: relay(OutboxMessage.objects.filter(pk=message_id)))


def relay(messages) -> int:
    """Enqueues undelivered messages; returns how many were handed to RQ."""
    queue = execution_queue()
    due = Q(relay_after__isnull=True) | Q(relay_after__lte=Now())
    pending = messages.filter(due, delivered_at__isnull=True)
    try:
        delivered = _relay_executes(queue, pending.filter(job=EXECUTE_JOB))
    except RedisError as error:
        logger.warning("execute messages not relayed, Redis: %s", error)
        return 0
    for message in pending.exclude(job=EXECUTE_JOB).order_by("pk"):
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


def _relay_executes(queue: Queue, messages) -> int:
    """One waiting drain job covers every execute message committed before it was seen."""
    # Read before the check: only messages committed by then are covered by what it finds.
    pks = list(messages.values_list("pk", flat=True))
    if not pks:
        return 0
    try:
        drain_ensure_queued(queue)
    except RedisError:
        OutboxMessage.objects.filter(pk__in=pks).update(
            delivery_attempts=F("delivery_attempts") + 1
        )
        raise
    return OutboxMessage.objects.filter(pk__in=pks, delivered_at__isnull=True).update(
        delivered_at=timezone.now(), delivery_attempts=F("delivery_attempts") + 1
    )


def drain_ensure_queued(queue: Queue | None = None) -> bool:
    """Makes sure a drain job waits in the queue, not yet started; True when it queued one.

    Whatever is due when this returns will be claimed by that job, or by a drain running
    now. Two callers at once may both queue one: the second job finds little or nothing,
    which is harmless. Raises RedisError when Redis does not answer (nothing is promised)."""
    queue = queue or execution_queue()
    key = WAITING_DRAIN_KEY.format(queue=queue.name)
    waiting = queue.connection.get(key)
    if waiting is not None and _waiting_in(queue, waiting.decode()):
        return False
    job_id = f"drain-{uuid.uuid4().hex}"
    queue.enqueue(EXECUTE_JOB, job_id=job_id, result_ttl=0, failure_ttl=24 * 3600)
    queue.connection.set(key, job_id, ex=WAITING_DRAIN_TTL)
    return True


def _waiting_in(queue: Queue, job_id: str) -> bool:
    """Is the job in the queue's list now (so no worker has taken it), with its data? A
    worker moves a job out of the list (LMOVE) before it starts it; a position found here
    means its function has not begun."""
    with queue.connection.pipeline() as pipe:  # MULTI: both answers from the same instant
        pipe.exists(Job.key_for(job_id))
        pipe.lpos(queue.key, job_id, rank=-1)  # from the tail, where it was pushed
        exists, position = pipe.execute()
    return bool(exists) and position is not None
