"""Which connectors a tenant may reach (runs.services.connectors writes them).

A tenant reaches no external system until a connector is enabled for it: the catalog, every
proposal, every read and every send look this table up (runs.selectors.connectors)."""

from __future__ import annotations

from django.db import models

from control.models import SignedRow, Tenant


class ConnectorEnablement(SignedRow):
    """One connector (`ticket`, the part of a tool's name before the dot) enabled for one
    tenant. Disabling deletes the row; both are audited (connectors.enable / .disable).
    Signed (runs.record.signed_rows): a row that does not verify enables nothing."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="connectors")
    connector = models.CharField(max_length=64)
    # A read_only tool of this connector runs at once, without a person, only when this is
    # on (and no tool policy of the tenant says otherwise): reads return external data to
    # the agent, so a tenant opts in.
    reads_without_approval = models.BooleanField(default=False)
    enabled_by = models.CharField(max_length=150)
    enabled_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "connector"], name="connector_enablement_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.connector} for {self.tenant}"
