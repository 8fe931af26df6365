"""Logging in: the lock enforced on every door, and said in words on the login pages.

`ThrottledModelBackend` refuses every `authenticate()` while the username or the address is
locked (control.auth.throttle): the site's login, the admin's, anything else. `LoginForm` and
`AdminLoginForm` say that logging in is locked instead of "wrong password"; `login_view` is the
site's login page.
"""

from __future__ import annotations

from datetime import datetime

from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.views import LoginView
from django.core.exceptions import PermissionDenied, ValidationError

from control.auth.clients import client_address
from control.auth.throttle import (
    LOCKED_MESSAGE,
    REFUSED_BY_LOCK,
    locked_message,
    login_locked_until,
    minutes_left,
)


class ThrottledModelBackend(ModelBackend):
    """Django's model backend, refusing every attempt while the username or address is locked.

    Raising PermissionDenied stops authenticate() before any other backend or the password
    check runs, and Django then sends user_login_failed (which does not count it again)."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if username is None:
            username = kwargs.get(get_user_model().USERNAME_FIELD)
        until = login_locked_until(username=username or "", address=client_address(request))
        if until is not None:
            if request is not None:
                setattr(request, REFUSED_BY_LOCK, until)
            raise PermissionDenied(locked_message(until))
        return super().authenticate(request, username=username, password=password, **kwargs)


class ThrottledLoginMixin:
    """Says in words that logging in is locked, instead of "wrong password"."""

    def clean(self):
        request = self.request
        username = self.cleaned_data.get("username") or ""
        until = login_locked_until(username=username, address=client_address(request))
        if until is not None:
            raise self._locked_error(until)
        try:
            return super().clean()
        except ValidationError:
            # The failure that reached the limit says so at once.
            until = login_locked_until(username=username, address=client_address(request))
            if until is not None:
                raise self._locked_error(until) from None
            raise

    def _locked_error(self, until: datetime) -> ValidationError:
        return ValidationError(
            LOCKED_MESSAGE, code="locked", params={"minutes": minutes_left(until)}
        )


class LoginForm(ThrottledLoginMixin, AuthenticationForm):
    """The site's login form."""


class AdminLoginForm(ThrottledLoginMixin, AdminAuthenticationForm):
    """The admin's login form (control/admin.py installs it)."""


# The site's login page; control/urls.py routes /accounts/login/ here, before Django's auth
# URLs, so the lock message reaches the person.
login_view = LoginView.as_view(authentication_form=LoginForm)
