"""Changing one's own password: throttled like logging in, and audited. There is no reset.

A wrong current password is a password guess like a failed login, so it is counted by the
login throttle (control.auth.throttle) against the same username and address: guesses through either
door add up, and while either is locked both refuse, the right password too. Each refused
guess and each change is in the audit chain, never the password. Django's own view checks
the old password outside `authenticate()`, where no throttle sees it; the admin's page asks
for no old password at all (control/admin.py sends it here).
"""

from __future__ import annotations

from django.contrib.auth import forms as auth_forms
from django.contrib.auth import update_session_auth_hash
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.debug import sensitive_post_parameters

from control.auth.clients import client_address
from control.auth.throttle import locked_message, login_failure_record, login_locked_until
from control.foundation.audit import audit_record


@transaction.atomic
def password_change(*, user: AbstractBaseUser, password: str, address: str) -> None:
    user.set_password(password)
    user.save(update_fields=["password"])
    audit_record(
        actor=user.get_username(),
        verb="auth.password_change",
        object_type="user",
        object_id=str(user.pk),
        data={"address": address},
    )


@transaction.atomic
def password_guess_refused(*, user: AbstractBaseUser, address: str) -> None:
    """A wrong current password: audited, and counted as a failed login of this username."""
    audit_record(
        actor=user.get_username(),
        verb="auth.password_change_failed",
        object_type="user",
        object_id=str(user.pk),
        data={"address": address},
    )
    login_failure_record(username=user.get_username(), address=address)


class ThrottledPasswordChangeForm(auth_forms.PasswordChangeForm):
    """Django's form (current password, the new one twice) behind the login throttle."""

    def __init__(self, user: AbstractBaseUser, *args, address: str, **kwargs) -> None:
        super().__init__(user, *args, **kwargs)
        self.address = address

    def clean_old_password(self) -> str:
        if locked := self._locked_error():
            raise locked
        try:
            return super().clean_old_password()
        except ValidationError as wrong:
            password_guess_refused(user=self.user, address=self.address)
            # The guess that reached the limit says so at once.
            raise (self._locked_error() or wrong) from None

    def _locked_error(self) -> ValidationError | None:
        until = login_locked_until(username=self.user.get_username(), address=self.address)
        return None if until is None else ValidationError(locked_message(until), code="locked")


@sensitive_post_parameters()
@never_cache
@login_required
def password_change_view(request: HttpRequest) -> HttpResponse:
    address = client_address(request)
    data = request.POST if request.method == "POST" else None
    form = ThrottledPasswordChangeForm(request.user, data, address=address)
    if form.is_bound and form.is_valid():
        password_change(
            user=request.user, password=form.cleaned_data["new_password1"], address=address
        )
        # The person's other sessions end; this one stays logged in.
        update_session_auth_hash(request, request.user)
        return redirect("password_change_done")
    return render(request, "registration/password_change_form.html", {"form": form})
