"""The sandbox's HTTP API: JSON in and out, no CSRF (it plays an outside system).

Each view reads and validates the request (a 400 consumes no fault), then runs its tool's
step under the tool's next injected fault, if any.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from sandbox import selectors, services, validation
from sandbox.exceptions import BadRequest, NotFound, SandboxError
from sandbox.faults import error_response, fault_plan_add, fault_plans_clear, with_faults
from sandbox.models import FaultPlan

View = Callable[..., HttpResponse]


def api(*methods: str) -> Callable[[View], View]:
    """Allowed methods, and every SandboxError answered as JSON {"type", "detail"}."""

    def decorate(view: View) -> View:
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if request.method not in methods:
                response = JsonResponse(
                    {"type": "method_not_allowed", "detail": f"use {', '.join(methods)}"},
                    status=405,
                )
                response["Allow"] = ", ".join(methods)
                return response
            try:
                return view(request, *args, **kwargs)
            except SandboxError as error:
                return error_response(error)

        return csrf_exempt(wrapper)

    return decorate


def _receipt_json(receipt: dict[str, Any], *, status: int = 200) -> JsonResponse:
    # Sorted keys: a replay or a query answers the very bytes of the first answer.
    return JsonResponse(receipt, status=status, json_dumps_params={"sort_keys": True})


def _receipt_response(outcome: services.Outcome) -> JsonResponse:
    response = _receipt_json(outcome.receipt, status=200 if outcome.replayed else 201)
    if outcome.replayed:
        response["Idempotent-Replayed"] = "true"
    return response


@api("GET")
def ticket_detail(request: HttpRequest, ticket_id: str) -> HttpResponse:
    def step() -> HttpResponse:
        ticket = selectors.ticket_get(ticket_id=ticket_id)
        if ticket is None:
            raise NotFound(f"no ticket {ticket_id!r}")
        return JsonResponse({"id": ticket.id, "status": ticket.status, "version": ticket.version})

    return with_faults("ticket.lookup", request.META, step)


@api("POST")
def ticket_close(request: HttpRequest, ticket_id: str) -> HttpResponse:
    key = validation.idempotency_key(request.headers)
    body = validation.json_object(request.body or b"{}", allowed={"args"}, required=set())
    args = body.get("args", {})
    if not isinstance(args, dict):
        raise BadRequest("args must be a JSON object")
    unknown = sorted(set(args) - {"resolution"})
    if unknown:
        raise BadRequest(f"unknown field args.{unknown[0]}")
    if "resolution" in args:
        validation.string(args["resolution"], field="args.resolution", max_length=64)

    def step() -> HttpResponse:
        outcome = services.ticket_close(ticket_id=ticket_id, idempotency_key=key, args=args)
        return _receipt_response(outcome)

    return with_faults("ticket.close", request.META, step)


@api("GET")
def receipt_detail(request: HttpRequest, key: str) -> HttpResponse:
    receipt = selectors.receipt_get(key=key)
    if receipt is None:
        raise NotFound(f"no receipt for Idempotency-Key {key!r}")
    return _receipt_json(receipt)


@api("GET", "POST")
def notifications(request: HttpRequest) -> HttpResponse:
    if request.method == "GET":
        sent = selectors.notifications_sent(recipient=request.GET.get("recipient"))
        return JsonResponse(
            {
                "notifications": [
                    {
                        "receipt_id": notification.receipt_id,
                        "recipient": notification.recipient,
                        "body": notification.body,
                        "created_at": notification.created_at.isoformat(),
                    }
                    for notification in sent
                ]
            }
        )
    body = validation.json_object(
        request.body, allowed={"recipient", "body"}, required={"recipient", "body"}
    )
    recipient = validation.string(body["recipient"], field="recipient", max_length=254)
    text = validation.string(body["body"], field="body", max_length=2000)

    def step() -> HttpResponse:
        outcome = services.notification_send(recipient=recipient, body=text)
        return _receipt_response(outcome)

    return with_faults("notify.send", request.META, step)


@api("POST")
def charges(request: HttpRequest) -> HttpResponse:
    key = validation.idempotency_key(request.headers)
    fields = {"customer", "amount_cents", "currency"}
    body = validation.json_object(request.body, allowed=fields, required=fields)
    customer = validation.string(
        body["customer"], field="customer", max_length=64, pattern=validation.CUSTOMER
    )
    amount = validation.amount_cents(body["amount_cents"])
    currency = validation.string(
        body["currency"], field="currency", max_length=3, pattern=validation.CURRENCY
    )

    return charge_made(request, key, customer=customer, amount_cents=amount, currency=currency)


@api("POST")
def form_charges(request: HttpRequest) -> HttpResponse:
    """payments/charges as Stripe's API takes it: a form body (`amount` in minor units,
    `metadata[...]` strings, kept with the charge) and nothing else."""
    key = validation.idempotency_key(request.headers)
    customer, amount, currency, metadata = form_charge_fields(request)
    return charge_made(
        request, key, customer=customer, amount_cents=amount, currency=currency, metadata=metadata
    )


def form_charge_fields(request: HttpRequest) -> tuple[str, int, str, dict[str, str]]:
    """(customer, amount in minor units, currency, metadata) of a Stripe-style form charge."""
    body = validation.form_object(
        request,
        allowed={"customer", "amount", "currency", "metadata"},
        required={"customer", "amount", "currency"},
    )
    customer = validation.string(
        body["customer"], field="customer", max_length=64, pattern=validation.CUSTOMER
    )
    if not isinstance(body["amount"], str) or not validation.FORM_AMOUNT.fullmatch(body["amount"]):
        raise BadRequest("amount must be a whole number of minor units")
    amount = validation.amount_cents(int(body["amount"]), field="amount")
    # Stripe's currencies are lower case; the sandbox keeps ISO 4217's upper case.
    currency = validation.string(
        body["currency"], field="currency", max_length=3, pattern=validation.CURRENCY_ANY_CASE
    ).upper()
    metadata = body.get("metadata", {})
    if not isinstance(metadata, dict):
        raise BadRequest("metadata takes metadata[NAME]=VALUE fields")
    return customer, amount, currency, metadata


def charge_made(
    request: HttpRequest,
    key: str,
    *,
    customer: str,
    amount_cents: int,
    currency: str,
    metadata: dict[str, str] | None = None,
    answer: Callable[[services.Outcome], HttpResponse] = _receipt_response,
) -> HttpResponse:
    """The charge a route read, made under the payment.charge faults; answered in the
    route's shape (the sandbox's receipt, or Stripe's charge object)."""

    def step() -> HttpResponse:
        return answer(
            services.charge_create(
                idempotency_key=key,
                customer=customer,
                amount_cents=amount_cents,
                currency=currency,
                metadata=metadata,
            )
        )

    return with_faults("payment.charge", request.META, step)


@api("GET")
def charge_detail(request: HttpRequest, charge_id: str) -> HttpResponse:
    charge = selectors.charge_get(charge_id=charge_id)
    if charge is None:
        raise NotFound(f"no charge {charge_id!r}")
    return JsonResponse(
        {
            "id": charge.receipt_id,
            "customer": charge.customer,
            "amount_cents": charge.amount_cents,
            "currency": charge.currency,
            "refunded_cents": charge.refunded_cents,
            "version": charge.version,
        }
    )


@api("POST")
def refunds(request: HttpRequest) -> HttpResponse:
    key = validation.idempotency_key(request.headers)
    fields = {"charge", "amount_cents"}
    body = validation.json_object(request.body, allowed=fields, required=fields)
    charge_id = validation.string(body["charge"], field="charge", max_length=64)
    amount = validation.amount_cents(body["amount_cents"])

    def step() -> HttpResponse:
        outcome = services.refund_create(
            idempotency_key=key, charge_id=charge_id, amount_cents=amount
        )
        return _receipt_response(outcome)

    return with_faults("payment.refund", request.META, step)


@api("GET")
def effects(request: HttpRequest) -> HttpResponse:
    ledger = selectors.effects_ledger(tool=request.GET.get("tool"), key=request.GET.get("key"))
    return JsonResponse(
        {
            "effects": [
                {
                    "tool": effect.tool,
                    "target": effect.target,
                    "idempotency_key": effect.idempotency_key,
                    "receipt_id": effect.receipt_id,
                    "created_at": effect.created_at.isoformat(),
                }
                for effect in ledger
            ]
        }
    )


def _plan_json(plan: FaultPlan) -> dict[str, Any]:
    parameter = plan.parameter
    if parameter is None:
        fault = plan.kind
    else:
        fault = f"{plan.kind}:{int(parameter) if parameter.is_integer() else parameter}"
    return {"id": plan.pk, "tool": plan.tool, "fault": fault, "remaining": plan.remaining}


@api("GET", "POST", "DELETE")
def faults(request: HttpRequest) -> HttpResponse:
    if not settings.SANDBOX_FAULTS:
        raise NotFound("fault injection is off (settings.SANDBOX_FAULTS)")
    if request.method == "DELETE":
        return JsonResponse({"cleared": fault_plans_clear()})
    if request.method == "GET":
        pending = selectors.fault_plans_pending()
        return JsonResponse({"faults": [_plan_json(plan) for plan in pending]})
    body = validation.json_object(
        request.body, allowed={"tool", "fault", "count"}, required={"tool", "fault"}
    )
    plan = fault_plan_add(tool=body["tool"], fault=body["fault"], count=body.get("count", 1))
    return JsonResponse(_plan_json(plan), status=201)
