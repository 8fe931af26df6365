"""Writes a run's latest signed checkpoint to a file or standard output."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from runs.exceptions import CheckpointError
from runs.record.checkpoints import checkpoint_verify, latest_checkpoint
from runs.selectors import run_by_id


class Command(BaseCommand):
    help = "Export RUN_ID's latest checkpoint (verified first) to -o FILE or stdout."

    def add_arguments(self, parser):
        parser.add_argument("run_id")
        parser.add_argument("-o", "--output", help="file to write; stdout when omitted")

    def handle(self, *args, run_id, output, **options):
        run = run_by_id(run_id)
        if run is None:
            raise CommandError(f"no run {run_id}")
        checkpoint = latest_checkpoint(run)
        if checkpoint is None:
            raise CommandError(f"run {run_id} has no checkpoint")
        try:
            checkpoint_verify(checkpoint.body, run=run)
        except CheckpointError as error:
            raise CommandError(f"refusing to export an invalid checkpoint: {error}") from None
        if output:
            Path(output).write_text(checkpoint.body, encoding="utf-8")
            if options["verbosity"]:
                self.stderr.write(f"checkpoint v{checkpoint.state_version} written to {output}")
        else:
            self.stdout.write(checkpoint.body)
