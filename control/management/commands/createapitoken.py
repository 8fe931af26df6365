"""Creates a tenant API token and prints it once; only its hash is stored."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from control.exceptions import ControlError
from control.services import api_token_create, tenant_get


class Command(BaseCommand):
    help = "Create an API token for a tenant and print it (it is shown only this once)."

    def add_arguments(self, parser):
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--name", required=True, help="a label for the token")

    def handle(self, *args, tenant, name, **options):
        try:
            _, token = api_token_create(
                tenant=tenant_get(tenant), name=name, actor="manage.py createapitoken"
            )
        except ControlError as error:
            raise CommandError(str(error)) from None
        self.stdout.write(token)
