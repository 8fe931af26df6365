"""The way back for a run stopped because its checkpoint was refused (see runs/README.md).

Without --confirm it checks and says what recovery would do; with --confirm REASON (who
looked, and why the run may go on) it re-derives the run's state from its verified events,
signs a new checkpoint with the current key, and reopens the run, audited.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from runs.exceptions import RunsError
from runs.models import Action, Run
from runs.record.checkpoints import REFUSED_REASON_PREFIX
from runs.selectors import run_by_id
from runs.services import run_recover


class Command(BaseCommand):
    help = (
        "Recover a run stopped because its checkpoint was refused: check, then with "
        "--confirm REASON re-sign its state from its verified events and reopen it."
    )

    def add_arguments(self, parser):
        parser.add_argument("run_id")
        parser.add_argument(
            "--confirm",
            metavar="REASON",
            help="who checked and why the run may go on (recorded in the audit log)",
        )

    def handle(self, *args, run_id, confirm, **options):
        run = run_by_id(run_id)
        if run is None:
            raise CommandError(f"no run {run_id}")
        if confirm is None:
            self._describe(run)
            return
        try:
            run_recover(run=run, actor="recover_run", reason=confirm)
        except RunsError as error:
            raise CommandError(f"refusing to recover run {run_id}: {error}") from None
        if options["verbosity"]:
            self.stdout.write(
                self.style.SUCCESS(f"run {run_id} recovered: running, checkpoint re-signed")
            )

    def _describe(self, run: Run) -> None:
        if run.phase != Run.Phase.FAILED or not run.stop_reason.startswith(REFUSED_REASON_PREFIX):
            raise CommandError(
                f"run {run.pk} is {run.phase}, not stopped for a refused checkpoint: "
                "nothing to recover"
            )
        cancelled = run.actions.filter(status=Action.Status.CANCELLED).values_list(
            "action_id", flat=True
        )
        self.stdout.write(
            f"run {run.pk}: {run.stop_reason}\n"
            f"Recovery re-derives its state from its events (checked first), signs a new "
            f"checkpoint with the current key and reopens it as running. Writes the stop "
            f"cancelled stay cancelled ({', '.join(cancelled) or 'none'}): the agent proposes "
            f"them again for a fresh approval.\n"
            f'Run again with --confirm "who checked what" to do it.'
        )
