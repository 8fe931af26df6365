"""Checkpoint schema v2: a run's completed work is a count and a running digest over its
receipts (runs.record.completed) instead of a list that grows in every checkpoint.

Existing runs get the count and digest of their receipts in completion order, exactly what
the v1 -> v2 checkpoint upgrader computes from their latest v1 checkpoint, so that
checkpoint keeps verifying against the run until its next transition writes a v2 one.
"""

import hashlib

import rfc8785
from django.db import migrations, models

GENESIS = "sha256:" + "0" * 64


def chain_completed_work(apps, schema_editor):
    Run = apps.get_model("runs", "Run")
    Action = apps.get_model("runs", "Action")
    for run in Run.objects.exclude(completed_work=[]).iterator():
        done = {
            action.action_id: action
            for action in Action.objects.filter(
                run=run, status__in=["succeeded", "satisfied"], receipt__isnull=False
            ).select_related("receipt")
        }
        count, digest = 0, GENESIS
        for action_id in run.completed_work:
            action = done.get(action_id)
            if action is None:  # completed where an imported run came from
                continue
            entry = {
                "action_id": action.action_id,
                "intent_digest": action.intent_digest,
                "status": action.status,
                "receipt_id": action.receipt.receipt_id,
                "idempotency_key": action.receipt.idempotency_key,
                "source": action.receipt.source,
                "target_version": action.receipt.target_version,
            }
            count += 1
            digest = "sha256:" + hashlib.sha256(digest.encode() + rfc8785.dumps(entry)).hexdigest()
        Run.objects.filter(pk=run.pk).update(completed_count=count, completed_digest=digest)


class Migration(migrations.Migration):
    dependencies = [("runs", "0004_action_needs_attention")]

    operations = [
        migrations.AddField(
            model_name="run",
            name="completed_count",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="run",
            name="completed_digest",
            field=models.CharField(default="sha256:" + "0" * 64, max_length=71),
        ),
        migrations.RunPython(chain_completed_work, migrations.RunPython.noop),
        migrations.RemoveField(model_name="run", name="completed_work"),
    ]
