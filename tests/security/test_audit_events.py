"""Refusals and administrative acts leave an entry in the audit chain."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import RequestFactory

from control.auth.denials import AuditDeniedMiddleware, audit_denied
from control.foundation.audit import audit_verify
from control.models import ApiToken, AuditEntry
from tests.factories import make_user

pytestmark = pytest.mark.django_db


def _request(user, path: str = "/runs/x/approve", tenant=None):
    request = RequestFactory().post(path, REMOTE_ADDR="198.51.100.9")
    request.user = user
    if tenant is not None:
        request.tenant = tenant
    return request


def test_audit_denied_records_who_where_and_why(tenant):
    person = make_user(tenant, "auditor", username="aude")

    audit_denied(_request(person, tenant=tenant), "This needs the operator role in acme.")

    entry = AuditEntry.objects.get(verb="auth.denied")
    assert (entry.actor, entry.tenant, entry.reason) == (
        "aude",
        tenant,
        "This needs the operator role in acme.",
    )
    assert entry.data == {
        "method": "POST",
        "path": "/runs/x/approve",
        "address": "198.51.100.9",
        "user_id": person.pk,
    }


def test_a_request_is_recorded_once_however_often_it_is_denied(tenant):
    request = _request(make_user(tenant, "auditor"))

    audit_denied(request, "first")
    AuditDeniedMiddleware(lambda request: None).process_exception(
        request, PermissionDenied("second")
    )

    assert AuditEntry.objects.filter(verb="auth.denied").count() == 1


def test_the_middleware_records_only_permission_denied(tenant):
    middleware = AuditDeniedMiddleware(lambda request: None)
    request = _request(make_user(tenant, "auditor"))

    middleware.process_exception(request, ValueError("a bug, not a refusal"))
    assert not AuditEntry.objects.filter(verb="auth.denied").exists()
    middleware.process_exception(request, PermissionDenied())
    assert AuditEntry.objects.get(verb="auth.denied").reason == "permission denied"


def test_creating_and_revoking_a_token_are_audited_without_the_token(tenant, capsys):
    call_command("createapitoken", "--tenant", "acme", "--name", "agent")
    token = capsys.readouterr().out.strip()
    call_command("revokeapitoken", "--tenant", "acme", "--name", "agent")

    row = ApiToken.objects.get(name="agent")
    created = AuditEntry.objects.get(verb="api_token.create")
    revoked = AuditEntry.objects.get(verb="api_token.revoke")
    assert row.revoked_at is not None
    assert (created.object_id, revoked.object_id) == (str(row.pk), str(row.pk))
    assert revoked.actor == "manage.py revokeapitoken"
    for entry in (created, revoked):
        assert token not in str(entry.data)
        assert row.token_hash not in str(entry.data)
    assert audit_verify().ok


def test_revoking_an_unknown_token_is_refused_with_a_reason(tenant):
    with pytest.raises(CommandError, match="no active token named 'ghost'"):
        call_command("revokeapitoken", "--tenant", "acme", "--name", "ghost")
