"""/.well-known/countersign-keys.json: the public halves of the evidence keys (JWK Set), for
anyone checking a decision receipt or an evidence bundle (countersign-verify --keys)."""

from __future__ import annotations

from django.http import JsonResponse
from django.views.decorators.cache import cache_control
from django.views.decorators.http import require_GET

from control.foundation import evidence_keys


@require_GET
@cache_control(public=True, max_age=300)
def countersign_keys(request):
    return JsonResponse({"keys": evidence_keys.public_keys()})
