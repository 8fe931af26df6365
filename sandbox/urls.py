from __future__ import annotations

from django.urls import path

from sandbox import stripe_views, views

app_name = "sandbox"

urlpatterns = [
    path("tickets/<str:ticket_id>", views.ticket_detail, name="ticket-detail"),
    path("tickets/<str:ticket_id>/close", views.ticket_close, name="ticket-close"),
    # Keys may hold "/" (sent as %2F, which the server decodes): match the whole rest.
    path("receipts/<path:key>", views.receipt_detail, name="receipt-detail"),
    path("notifications", views.notifications, name="notifications"),
    path("payments/charges", views.charges, name="charges"),
    path("payments/form/charges", views.form_charges, name="form-charges"),
    path("payments/charges/<str:charge_id>", views.charge_detail, name="charge-detail"),
    path("payments/refunds", views.refunds, name="refunds"),
    # Stripe's own routes and shapes, for the docs' payment recipe (sandbox/stripe_views.py).
    path("stripe/v1/charges", stripe_views.charges, name="stripe-charges"),
    path("stripe/v1/charges/search", stripe_views.charge_search, name="stripe-charge-search"),
    path(
        "stripe/v1/charges/<str:charge_id>",
        stripe_views.charge_detail,
        name="stripe-charge-detail",
    ),
    path("effects", views.effects, name="effects"),
    path("faults", views.faults, name="faults"),
]
