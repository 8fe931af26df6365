"""Verifies and migrates a checkpoint file, then restores its run or refuses with a reason."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from runs.exceptions import CheckpointError, RunsError
from runs.record.export import import_verify
from runs.selectors import run_by_id
from runs.services import run_restore


class Command(BaseCommand):
    help = (
        "Import a checkpoint: strict parse, envelope, schema version, MAC, upgrade, invariants; "
        "then restore the run here. --dry-run verifies only."
    )

    def add_arguments(self, parser):
        parser.add_argument("file")
        parser.add_argument("--dry-run", action="store_true", help="verify and report only")

    def handle(self, *args, file, dry_run, **options):
        try:
            data = Path(file).read_bytes()
        except OSError as error:
            raise CommandError(f"cannot read {file}: {error.strerror}") from None
        try:
            state, plan_items = import_verify(data)
        except CheckpointError as error:
            raise CommandError(f"refused at {error}") from None
        existing = run_by_id(state["run_id"])
        if existing is not None:
            relation = (
                "the same version as"
                if existing.state_version == state["state_version"]
                else "a different version from"
            )
            raise CommandError(
                f"run {state['run_id']} already exists here at version "
                f"{existing.state_version}, {relation} the checkpoint's "
                f"{state['state_version']}; nothing imported"
            )
        if dry_run:
            self.stdout.write(f"checkpoint valid: run {state['run_id']} ({state['phase']})")
            return
        try:
            run = run_restore(
                state=state, plan_items=plan_items, actor="manage.py import_checkpoint"
            )
        except RunsError as error:
            raise CommandError(str(error)) from None
        if options["verbosity"]:
            self.stdout.write(self.style.SUCCESS(f"run {run.pk} restored ({run.phase})"))
