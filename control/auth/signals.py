"""Logging in and out, in the audit chain and the throttle, through Django's auth signals.

A login is audited with how many failures of its username preceded it (those failures are then
forgotten, not summarized later); a failed login is counted by the throttle, unless a lock
refused it (not a new failure); a logout is audited. control/apps.py connects these receivers.
"""

from __future__ import annotations

from django.contrib.auth import user_logged_in, user_logged_out, user_login_failed
from django.dispatch import receiver

from control.auth.clients import client_address
from control.auth.throttle import REFUSED_BY_LOCK, login_failure_record, normalized_username
from control.foundation.audit import audit_record
from control.models import LoginFailure


@receiver(user_logged_in, dispatch_uid="countersign_audit_login")
def _audit_login(sender, request, user, **kwargs) -> None:
    # The failures this login forgets are not summarized later: its own entry counts them.
    forgotten, _ = LoginFailure.objects.filter(
        username=normalized_username(user.get_username()),
        locks_username_until__isnull=True,
        locks_address_until__isnull=True,
    ).delete()
    audit_record(
        actor=user.get_username(),
        verb="auth.login",
        object_type="user",
        object_id=str(user.pk),
        data={"address": client_address(request), "failures_before": forgotten},
    )


@receiver(user_login_failed, dispatch_uid="countersign_count_login_failed")
def _count_login_failed(sender, credentials, request=None, **kwargs) -> None:
    if request is not None and getattr(request, REFUSED_BY_LOCK, None):
        return
    login_failure_record(
        username=normalized_username(credentials.get("username", "")),
        address=client_address(request),
    )


@receiver(user_logged_out, dispatch_uid="countersign_audit_logout")
def _audit_logout(sender, request, user, **kwargs) -> None:
    if user is None:
        return
    audit_record(
        actor=user.get_username(),
        verb="auth.logout",
        object_type="user",
        object_id=str(user.pk),
        data={"address": client_address(request)},
    )
