"""Rows that decide approval, signed with the checkpoint keys.

A tool policy, a standing rule and a membership each decide whether a write waits for a
person and who that person may be. Anyone who can write the database could otherwise turn
approval off with one `INSERT`. So each such row carries a MAC (HMAC-SHA256 under a
checkpoint key, `control.foundation.signing`) over the canonical JSON of its table, primary
key, tenant and deciding fields, and every read that decides checks it: a row that does not verify
decides nothing in its own favour (its reader fails closed).

Signing re-reads the row first, so the MAC covers exactly what the database holds (a
decimal's scale, a time's zone, JSON numbers as the database returns them), not the values a
caller happened to pass in. Rotation: the current key signs; a row keeps the key it was signed
with and verifies while that key id is configured.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from django.apps import apps
from django.db import transaction
from django.db.models import Model

from control.foundation import signing
from control.foundation.canonical import canonical_json

UNSIGNED = "unsigned"
_REGISTRY: dict[str, SignedRows] = {}


def decimal_text(value: Decimal | None) -> str | None:
    """A decimal as the same text whatever its stored scale (5, 5.0 and 5.000000 alike)."""
    return None if value is None else format(value.normalize(), "f")


def time_text(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat()


@dataclass(frozen=True)
class SignedRows:
    """How one table's rows are signed: its name in the MAC, its model ("app.Model") and
    its deciding fields. Each is registered, so `verify_audit` checks every signed table
    without the foundation importing the apps that own them."""

    table: str
    model: str
    deciding: Callable[[Any], dict[str, Any]]
    # What `unverified_rows` reads with each row, so `deciding` runs no query per row.
    related: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _REGISTRY[self.table] = self

    def payload(self, row: Model) -> bytes:
        return canonical_json(
            {
                "row": self.table,
                "pk": str(row.pk),
                "tenant": str(row.tenant_id),
                "fields": self.deciding(row),
            }
        )

    def seal(self, row: Model) -> None:
        """Signs the row as the database holds it now and stores the MAC; call it in the
        transaction that wrote the row, after the write."""
        stored = type(row)._default_manager.get(pk=row.pk)
        key_id, mac = signing.sign(self.payload(stored))
        type(row)._default_manager.filter(pk=row.pk).update(key_id=key_id, mac=mac)
        row.key_id, row.mac = key_id, mac

    def problem(self, row: Model) -> str:
        """Why the row does not verify (`unsigned`, `unknown_key`, `bad_mac`,
        `malformed_mac`); empty when it does."""
        if not row.mac:
            return UNSIGNED
        try:
            signing.verify(self.payload(row), kid=row.key_id, mac=row.mac)
        except signing.SignatureError as error:
            return error.rule
        except ValueError:
            return "no_canonical_form"  # a value no service writes: it cannot have been signed
        return ""

    def verifies(self, row: Model) -> bool:
        return not self.problem(row)


@dataclass(frozen=True)
class Unverified:
    table: str
    pk: str
    tenant: str
    problem: str
    row: str  # the row as str() says it, for people

    def __str__(self) -> str:
        return f"{self.table} {self.pk} ({self.row}) in tenant {self.tenant}: {self.problem}"


def _every_row(key_id: str | None = None):
    """(spec, row) for every row of every signed table (only those signed with `key_id`
    when given), table by table, each table read once in chunks."""
    for spec in sorted(_REGISTRY.values(), key=lambda spec: spec.table):
        rows = apps.get_model(spec.model)._default_manager.select_related("tenant")
        if key_id is not None:
            rows = rows.filter(key_id=key_id)
        if spec.related:
            rows = rows.prefetch_related(*spec.related)
        for row in rows.order_by("pk").iterator(chunk_size=500):
            yield spec, row


def unverified_rows() -> list[Unverified]:
    """Every row of every signed table that does not verify: what `verify_audit` reports."""
    found = []
    for spec, row in _every_row():
        problem = spec.problem(row)
        if problem:
            found.append(Unverified(spec.table, str(row.pk), row.tenant.name, problem, str(row)))
    return found


def rows_signed_with(key_id: str) -> int:
    """How many signed rows name `key_id`: retiring it would make them decide nothing."""
    return sum(
        apps.get_model(spec.model)._default_manager.filter(key_id=key_id).count()
        for spec in _REGISTRY.values()
    )


@transaction.atomic
def rows_resign(*, key_id: str) -> tuple[int, list[Unverified]]:
    """Re-signs with the current key every row signed with `key_id` that verifies, so the
    old key can be retired; a row that does not verify is left as it is (never vouched for
    by a rotation) and returned. Returns (re-signed, refused)."""
    resigned, refused = 0, []
    for spec, row in _every_row(key_id):
        problem = spec.problem(row)
        if problem:
            refused.append(Unverified(spec.table, str(row.pk), row.tenant.name, problem, str(row)))
        else:
            spec.seal(row)
            resigned += 1
    return resigned, refused
