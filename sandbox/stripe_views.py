"""A slice of Stripe's own API, under `stripe/`: the routes docs/CONNECTORS.md's payment
recipe calls on real Stripe, in Stripe's shapes, so the recipe runs here unchanged but for
its base URL.

- `POST stripe/v1/charges`: a form body (`customer`, `amount`, `currency`, `metadata[...]`),
  deduplicated by `Idempotency-Key` as Stripe does (a repeated key answers the stored charge,
  with `Idempotent-Replayed: true`); answers the charge object.
- `GET stripe/v1/charges/search?query=metadata['NAME']:'VALUE'`: Stripe's search result
  (`{"object": "search_result", "data": [...]}`), newest first. Only that one clause is
  understood; any other query is Stripe's 400 `invalid_request_error`.
- `GET stripe/v1/charges/<id>`: the charge object, or Stripe's 404 `resource_missing`.

Errors are Stripe's `{"error": {"type", "code", "message"}}`. The payment.charge faults
apply to the charge route as to the sandbox's own.
"""

from __future__ import annotations

import re
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse

from sandbox import selectors, services, validation
from sandbox.exceptions import NotFound, SandboxError
from sandbox.models import Charge
from sandbox.views import api, charge_made, form_charge_fields

# metadata['countersign_key']:'run-1:step-1:cus_42:v1' (Stripe's search query language).
_METADATA_CLAUSE = re.compile(r"metadata\['([A-Za-z0-9_]{1,40})'\]:'([^'\\]{1,500})'")


def _stripe_error(status: int, *, type: str, code: str, message: str) -> JsonResponse:
    return JsonResponse({"error": {"type": type, "code": code, "message": message}}, status=status)


def stripe_api(*methods: str):
    """The sandbox's api(), its errors in Stripe's shape."""

    def decorate(view):
        def inner(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            try:
                return view(request, *args, **kwargs)
            except NotFound as error:
                return _stripe_error(
                    404, type="invalid_request_error", code="resource_missing", message=error.detail
                )
            except SandboxError as error:
                if error.status >= 500:
                    raise
                code = "idempotency_key_in_use" if error.status == 409 else "parameter_invalid"
                return _stripe_error(
                    error.status, type="invalid_request_error", code=code, message=error.detail
                )

        inner.__name__ = view.__name__
        return api(*methods)(inner)

    return decorate


def _charge_object(charge: Charge) -> dict[str, Any]:
    return {
        "id": charge.receipt_id,
        "object": "charge",
        "amount": charge.amount_cents,
        "amount_refunded": charge.refunded_cents,
        "currency": charge.currency.lower(),
        "customer": charge.customer,
        "metadata": charge.metadata,
        "status": "succeeded",
        "created": int(charge.created_at.timestamp()),
    }


@stripe_api("POST")
def charges(request: HttpRequest) -> HttpResponse:
    key = validation.idempotency_key(request.headers)
    customer, amount, currency, metadata = form_charge_fields(request)
    return charge_made(
        request,
        key,
        customer=customer,
        amount_cents=amount,
        currency=currency,
        metadata=metadata,
        answer=_charge_answer,
    )


def _charge_answer(outcome: services.Outcome) -> JsonResponse:
    """The charge object, as Stripe answers a create (200) and a replayed key alike."""
    charge = selectors.charge_get(charge_id=outcome.receipt["receipt_id"])
    response = JsonResponse(_charge_object(charge))
    if outcome.replayed:
        response["Idempotent-Replayed"] = "true"
    return response


@stripe_api("GET")
def charge_search(request: HttpRequest) -> HttpResponse:
    query = request.GET.get("query", "")
    clause = _METADATA_CLAUSE.fullmatch(query.strip())
    if clause is None:
        return _stripe_error(
            400,
            type="invalid_request_error",
            code="parameter_invalid",
            message="this server searches charges by one metadata['NAME']:'VALUE' clause only",
        )
    found = selectors.charges_with_metadata(name=clause[1], value=clause[2])[:10]
    return JsonResponse(
        {
            "object": "search_result",
            "data": [_charge_object(charge) for charge in found],
            "has_more": False,
            "next_page": None,
            "url": "/v1/charges/search",
        }
    )


@stripe_api("GET")
def charge_detail(request: HttpRequest, charge_id: str) -> HttpResponse:
    charge = selectors.charge_get(charge_id=charge_id)
    if charge is None:
        raise NotFound(f"No such charge: '{charge_id}'")
    return JsonResponse(_charge_object(charge))
