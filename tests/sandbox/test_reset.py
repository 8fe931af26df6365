from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from sandbox.models import Charge, Effect, FaultPlan, IdempotencyRecord, Notification, Ticket
from sandbox.services import charge_create, notification_send, ticket_close

pytestmark = pytest.mark.django_db(databases=["default", "sandbox"])


def test_sandbox_reset_restores_open_tickets_and_empties_everything_else():
    call_command("sandbox_reset", stdout=StringIO())
    ticket_close(ticket_id="ticket-1", idempotency_key="k-1", args={})
    notification_send(recipient="ops@example.com", body="hi")
    charge_create(idempotency_key="c-1", customer="cus_1", amount_cents=5, currency="EUR")
    FaultPlan.objects.create(tool="ticket.close", kind="commit_then_drop", remaining=1)
    Ticket.objects.filter(id="ticket-100").delete()

    output = StringIO()
    call_command("sandbox_reset", stdout=output)

    assert "Sandbox reset" in output.getvalue()
    assert Ticket.objects.count() == 100
    assert set(Ticket.objects.values_list("status", "version")) == {("open", 1)}
    assert Ticket.objects.filter(id__in=["ticket-1", "ticket-100"]).count() == 2
    for model in (Effect, IdempotencyRecord, Notification, Charge, FaultPlan):
        assert not model.objects.exists(), model


def test_sandbox_reset_is_idempotent():
    call_command("sandbox_reset", stdout=StringIO())
    first = sorted(Ticket.objects.values_list("id", "status", "version"))

    call_command("sandbox_reset", stdout=StringIO())

    assert sorted(Ticket.objects.values_list("id", "status", "version")) == first


def test_a_dry_run_of_sandbox_reset_changes_nothing():
    call_command("sandbox_reset", stdout=StringIO())
    ticket_close(ticket_id="ticket-1", idempotency_key="k-1", args={})

    output = StringIO()
    call_command("sandbox_reset", "--dry-run", stdout=output)

    assert "Would reset" in output.getvalue()
    assert Ticket.objects.get(id="ticket-1").status == "closed"
    assert Effect.objects.count() == 1


@pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])
def test_migrating_the_sandbox_database_seeds_the_hundred_open_tickets():
    Ticket.objects.all().delete()
    call_command("migrate", "sandbox", "0001", database="sandbox", verbosity=0)

    call_command("migrate", "sandbox", database="sandbox", verbosity=0)

    assert Ticket.objects.count() == 100
    assert set(Ticket.objects.values_list("status", "version")) == {("open", 1)}
