"""The product's URLs plus one page that fails, for the tests of what a failure shows."""

from __future__ import annotations

from django.conf import settings
from django.urls import path

from control.urls import urlpatterns as product_urls

INTERNAL_DETAIL = "internal detail that must stay in the log"


def crash(request):
    raise RuntimeError(f"{INTERNAL_DETAIL}: {settings.REDIS_URL} {settings.SANDBOX_URL}")


urlpatterns = [*product_urls, path("crash/", crash)]
