"""The sweep: re-drives work from PostgreSQL (outbox, expiries, due and orphaned actions,
missing reconciliation cases), purges expired idempotency keys, summarizes old failed logins
into the audit chain, and folds the metrics' appended counts (control.foundation.rollup). `--loop`
repeats until SIGTERM or Ctrl-C."""

from __future__ import annotations

import logging
import signal
import time

from django.core.management.base import BaseCommand
from django.db import close_old_connections

from control.api_kit.idempotency import purge_expired
from control.auth.summaries import login_failures_summarize
from control.foundation.rollup import fold
from reconciliation.probes import probe_due_cases
from reconciliation.services import open_missing_cases
from runs.execution.sweep import sweep_once
from runs.execution.sweep_steps import STEPS

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = "Sweep once (or --loop): outbox, expired approvals, deadlines, due work, cases."

    def add_arguments(self, parser):
        parser.add_argument("--loop", action="store_true", help="keep sweeping until stopped")
        parser.add_argument("--interval", type=float, default=1.0, help="seconds between passes")

    def handle(self, *args, loop, interval, **options):
        stopping = False

        def stop(signum, frame):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        while True:
            close_old_connections()
            try:
                self._pass(loop=loop, verbosity=options["verbosity"])
            except Exception as error:
                if not loop:
                    raise
                # A loop outlives a bad pass (a database restart, one broken row): log, go on.
                logger.exception("sweep pass failed")
                self.stderr.write(f"sweep pass failed: {type(error).__name__}: {error}")
            if not loop or stopping:
                return
            time.sleep(interval)
            if stopping:
                return

    def _pass(self, *, loop: bool, verbosity: int) -> None:
        report = sweep_once()

        def step(name: str, work) -> int:
            return STEPS.run(name, work, errors=report.errors) or 0

        cases = step("open cases", open_missing_cases)
        probed = step("probe", probe_due_cases)
        purged = step("purge idempotency keys", purge_expired)
        failed_logins = step("summarize failed logins", login_failures_summarize)
        step("fold metrics", fold)
        if verbosity > 1 or (verbosity and not loop):
            self.stdout.write(
                f"relayed {report.relayed}, expired {report.expired}, stopped "
                f"{report.stopped}, idle MCP runs ended {report.idled}, "
                f"drains {report.drains_enqueued}, cases opened {cases}, "
                f"probes {probed}, idempotency keys purged {purged}, "
                f"failed logins summarized {failed_logins}"
            )
        for error in report.errors:
            self.stderr.write(error)
