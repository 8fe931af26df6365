"""Seeds ticket-1..ticket-100, open at version 1 (sandbox_reset re-creates them later)."""

from __future__ import annotations

from django.db import migrations

TICKET_COUNT = 100


def seed_tickets(apps, schema_editor):
    ticket_model = apps.get_model("sandbox", "Ticket")
    ticket_model.objects.using(schema_editor.connection.alias).bulk_create(
        [ticket_model(id=f"ticket-{number}") for number in range(1, TICKET_COUNT + 1)],
        ignore_conflicts=True,
    )


class Migration(migrations.Migration):
    dependencies = [("sandbox", "0001_initial")]

    operations = [migrations.RunPython(seed_tickets, migrations.RunPython.noop)]
