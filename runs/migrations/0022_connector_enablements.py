"""Connectors are enabled per tenant (runs.models.connectors).

A tenant that existed before keeps what it already used: each connector named by one of its
intents or tool policies (the part of the tool's name before the first dot) is enabled for
it, with reads without approval as before. Anything else it reaches only once enabled.
"""

import django.db.models.deletion
from django.db import migrations, models


def enable_what_tenants_used(apps, schema_editor):
    Tenant = apps.get_model("control", "Tenant")
    Action = apps.get_model("runs", "Action")
    ToolPolicy = apps.get_model("runs", "ToolPolicy")
    Enablement = apps.get_model("runs", "ConnectorEnablement")
    used: set[tuple[int, str]] = set()
    for model in (Action, ToolPolicy):
        for tenant_id, tool in model.objects.values_list("tenant_id", "tool").distinct():
            used.add((tenant_id, tool.split(".", 1)[0]))
    names = dict(Tenant.objects.values_list("pk", "name"))
    Enablement.objects.bulk_create(
        [
            Enablement(
                tenant_id=tenant_id,
                connector=connector,
                reads_without_approval=True,
                enabled_by="migration runs.0017 (used before connectors were per tenant)",
            )
            for tenant_id, connector in sorted(used)
            if tenant_id in names
        ]
    )


class Migration(migrations.Migration):

    dependencies = [
        ('control', '0005_metric_rollup'),
        ('runs', '0021_sign_existing_rows'),
    ]

    operations = [
        migrations.CreateModel(
            name='ConnectorEnablement',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('connector', models.CharField(max_length=64)),
                ('reads_without_approval', models.BooleanField(default=False)),
                ('enabled_by', models.CharField(max_length=150)),
                ('enabled_at', models.DateTimeField(auto_now_add=True)),
                ('tenant', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='connectors', to='control.tenant')),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('tenant', 'connector'), name='connector_enablement_unique')],
            },
        ),
        migrations.RunPython(enable_what_tenants_used, migrations.RunPython.noop),
    ]
