"""Revokes a tenant API token by its label; the revocation is in the audit chain."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from control.exceptions import ControlError
from control.services import api_token_revoke, tenant_get


class Command(BaseCommand):
    help = "Revoke a tenant's API token; requests with it are refused from then on."

    def add_arguments(self, parser):
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--name", required=True, help="the token's label")

    def handle(self, *args, tenant, name, **options):
        try:
            row = api_token_revoke(
                tenant=tenant_get(tenant), name=name, actor="manage.py revokeapitoken"
            )
        except ControlError as error:
            raise CommandError(str(error)) from None
        if options["verbosity"]:
            self.stdout.write(self.style.SUCCESS(f"revoked {row.name} ({row.prefix}...)"))
