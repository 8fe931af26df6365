"""Creates a tenant: `manage.py createtenant NAME [--if-missing]`."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from control.exceptions import AlreadyExists, ControlError
from control.services import tenant_create


class Command(BaseCommand):
    help = "Create a tenant. Exits non-zero if it exists, unless --if-missing is given."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument(
            "--if-missing",
            action="store_true",
            help="succeed quietly when the tenant already exists",
        )

    def handle(self, *args, name, if_missing, **options):
        try:
            tenant = tenant_create(name=name, actor="manage.py createtenant")
        except AlreadyExists as error:
            if if_missing:
                return
            raise CommandError(str(error)) from None
        except ControlError as error:
            raise CommandError(str(error)) from None
        if options["verbosity"]:
            self.stdout.write(self.style.SUCCESS(f"tenant {tenant.name} created ({tenant.pk})"))
