"""Signs the rows that decide approval and existed before they were signed: tool policies,
standing rules and memberships (control.foundation.row_signing), with the first key of
COUNTERSIGN_CHECKPOINT_KEYS as configured when `migrate` runs.

Rows present at the upgrade are vouched for as they stand: review /policies/ and the
members before upgrading (docs/DEPLOY.md). With no key configured, nothing is signed and
`verify_audit` names every unsigned row; such rows decide nothing until an admin saves the
policy, re-adds the member or proposes the rule again. The code is copied from
control.foundation.row_signing and runs.record.signed_rows as they were written, so that later changes
to them cannot change what this migration did.
"""

import hashlib
import hmac
from datetime import UTC

import rfc8785
from django.conf import settings
from django.db import migrations


def _decimal(value):
    return None if value is None else format(value.normalize(), "f")


def _time(value):
    return None if value is None else value.astimezone(UTC).isoformat()


def _policy(row):
    return {
        "tool": row.tool,
        "needs_approval": row.needs_approval,
        "four_eyes": row.four_eyes,
        "required_approvals": row.required_approvals,
        "approval_seconds": row.approval_seconds,
        "standing_grants_allowed": row.standing_grants_allowed,
        "escalation_seconds": row.escalation_seconds,
        "escalation_contacts": row.escalation_contacts,
        "link_only_decisions": row.link_only_decisions,
    }


def _rule(row):
    return {
        "tool": row.tool,
        "name": row.name,
        "target_pattern": row.target_pattern,
        "arg_bounds": row.arg_bounds,
        "max_uses": row.max_uses,
        "uses_per_hour": row.uses_per_hour,
        "amount_argument": row.amount_argument,
        "amount_cap": _decimal(row.amount_cap),
        "expires_at": _time(row.expires_at),
        "status": row.status,
        "required_approvals": row.required_approvals,
        "four_eyes": row.four_eyes,
        "created_by": row.created_by_id,
        "uses": row.uses,
        "amount_used": _decimal(row.amount_used),
        "approvers": sorted(approval.approver_id for approval in row.approvals.all()),
    }


def _membership(row):
    return {"user": row.user_id, "role": row.role}


def sign_existing(apps, schema_editor):
    keys = getattr(settings, "COUNTERSIGN_CHECKPOINT_KEYS", None) or {}
    if not keys:
        return
    kid, secret = next(iter(keys.items()))
    alias = schema_editor.connection.alias
    tables = (
        ("tool_policy", apps.get_model("runs", "ToolPolicy"), _policy),
        ("standing_grant", apps.get_model("runs", "StandingGrant"), _rule),
        ("membership", apps.get_model("control", "Membership"), _membership),
    )
    for table, model, deciding in tables:
        for row in model.objects.using(alias).filter(mac="").iterator():
            payload = {
                "row": table,
                "pk": str(row.pk),
                "tenant": str(row.tenant_id),
                "fields": deciding(row),
            }
            try:
                text = rfc8785.dumps(payload)
            except rfc8785.CanonicalizationError:
                continue  # left unsigned: verify_audit names it
            mac = hmac.new(secret, text, hashlib.sha256).hexdigest()
            model.objects.using(alias).filter(pk=row.pk).update(key_id=kid, mac=mac)


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0020_signed_policies_and_rules"),
        ("control", "0006_signed_memberships"),
    ]

    operations = [migrations.RunPython(sign_existing, migrations.RunPython.noop)]
