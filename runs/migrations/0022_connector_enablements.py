"""Connectors are enabled per tenant (runs.models.connectors).

A tenant that existed before keeps what it already used: each connector named by one of its
intents or tool policies (the part of the tool's name before the first dot) is enabled for
it, with reads without approval as before. Anything else it reaches only once enabled.
Each row is signed as runs.record.signed_rows signs it (the code copied here, as 0021 does)
with the first key of COUNTERSIGN_CHECKPOINT_KEYS; with none configured the rows stay
unsigned, enable nothing, and `verify_audit` names them.
"""

import hashlib
import hmac

import django.db.models.deletion
import rfc8785
from django.conf import settings
from django.db import migrations, models


def _seal(model, row, alias) -> None:
    keys = getattr(settings, "COUNTERSIGN_CHECKPOINT_KEYS", None) or {}
    if not keys:
        return
    kid, secret = next(iter(keys.items()))
    payload = {
        "row": "connector_enablement",
        "pk": str(row.pk),
        "tenant": str(row.tenant_id),
        "fields": {
            "connector": row.connector,
            "reads_without_approval": row.reads_without_approval,
        },
    }
    mac = hmac.new(secret, rfc8785.dumps(payload), hashlib.sha256).hexdigest()
    model.objects.using(alias).filter(pk=row.pk).update(key_id=kid, mac=mac)


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
    alias = schema_editor.connection.alias
    for tenant_id, connector in sorted(used):
        if tenant_id in names:
            row = Enablement.objects.using(alias).create(
                tenant_id=tenant_id,
                connector=connector,
                reads_without_approval=True,
                enabled_by="migration runs.0022 (used before connectors were per tenant)",
            )
            _seal(Enablement, row, alias)


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
                ('key_id', models.CharField(blank=True, max_length=64)),
                ('mac', models.CharField(blank=True, max_length=64)),
                ('tenant', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='connectors', to='control.tenant')),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('tenant', 'connector'), name='connector_enablement_unique')],
            },
        ),
        migrations.RunPython(enable_what_tenants_used, migrations.RunPython.noop),
    ]
