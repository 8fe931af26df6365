"""The worker container's healthcheck: exits 0 when an RQ worker of this host listens on the
execution queue and beat recently, and PostgreSQL answers; otherwise says why and exits 1.

A worker registers itself in Redis under its host name and renews that entry as it works, so
this answers "is this container's worker alive and connected", not merely "is Redis up".
"""

from __future__ import annotations

import socket
from datetime import UTC, datetime, timedelta

import django_rq
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from rq.worker import Worker


class Command(BaseCommand):
    help = "Exit 0 if this host's RQ worker is registered and beating and PostgreSQL answers."

    def handle(self, *args, **options):
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        queue = django_rq.get_queue(settings.RQ_EXECUTION_QUEUE)
        hostname = socket.gethostname()
        now = datetime.now(UTC)
        beating = [
            worker
            for worker in Worker.all(queue=queue)
            if worker.hostname == hostname
            and worker.last_heartbeat is not None
            and now - worker.last_heartbeat < timedelta(seconds=worker.worker_ttl)
        ]
        if not beating:
            raise CommandError(
                f"no RQ worker of host {hostname} has beaten on queue {queue.name} recently"
            )
        if options["verbosity"]:
            self.stdout.write(f"ok: {', '.join(worker.name for worker in beating)}")
