"""Writes a tenant's evidence bundle (runs.record.evidence_bundle) into a new directory:
`countersign-verify DIR` checks it offline, with nothing but the bundle and the public keys."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from control.models import Tenant
from runs.models import Run
from runs.record.evidence_bundle import Chosen
from runs.services import evidence_export


class Command(BaseCommand):
    help = (
        "Export a tenant's decision receipts (intents proposed in [--since, --until), or one "
        "--run) as an evidence bundle into the new directory -o DIR."
    )

    def add_arguments(self, parser):
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--since", help="ISO 8601 time; intents proposed at or after it")
        parser.add_argument("--until", help="ISO 8601 time; intents proposed before it")
        parser.add_argument("--run", dest="run_id", help="only this run's intents")
        parser.add_argument("-o", "--output", required=True, help="a directory to create")

    def handle(self, *args, tenant, since, until, run_id, output, **options):
        found = Tenant.objects.filter(name=tenant).first()
        if found is None:
            raise CommandError(f"no tenant {tenant!r}")
        chosen = Chosen(
            tenant=found,
            since=_moment("--since", since),
            until=_moment("--until", until),
            run_id=_run(found, run_id),
        )
        if chosen.since and chosen.until and chosen.since >= chosen.until:
            raise CommandError("--since must be before --until")
        try:
            manifest = evidence_export(chosen, Path(output), actor="export_evidence")
        except OSError as error:
            raise CommandError(f"cannot write {output}: {error}; nothing written") from None
        counts = manifest["body"]["counts"]
        if options["verbosity"]:
            self.stdout.write(
                f"{counts['statements.jsonl']} statements of {counts['intents.jsonl']} intents "
                f"and {counts['audit.jsonl']} audit entries written to {output}; check it "
                f"with: countersign-verify {output}"
            )


def _moment(option: str, text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise CommandError(f"{option} {text!r} is not an ISO 8601 time") from None
    return moment if timezone.is_aware(moment) else timezone.make_aware(moment, UTC)


def _run(tenant: Tenant, run_id: str | None) -> str | None:
    if run_id is None:
        return None
    try:
        uuid.UUID(run_id)
    except ValueError:
        raise CommandError(f"--run {run_id!r} is not a run id") from None
    if not Run.objects.filter(pk=run_id, tenant=tenant).exists():
        raise CommandError(f"no run {run_id} in tenant {tenant.name}")
    return run_id
