"""Gives a user a role in a tenant, creating the user when missing."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from control.exceptions import ControlError
from control.models import Role
from control.services import member_add, tenant_get


class Command(BaseCommand):
    help = "Give USER a role in a tenant (creates the user when missing)."

    def add_arguments(self, parser):
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--username", required=True)
        parser.add_argument("--role", required=True, choices=Role.values)
        parser.add_argument("--password", help="set this password (validated)")
        parser.add_argument(
            "--admin-site",
            action="store_true",
            help="let an auditor or admin into the read-only admin (/admin/) too",
        )

    def handle(self, *args, tenant, username, role, password, admin_site, **options):
        try:
            membership = member_add(
                tenant=tenant_get(tenant),
                username=username,
                role=role,
                password=password,
                admin_site=admin_site,
                actor="manage.py addmember",
            )
        except ControlError as error:
            raise CommandError(str(error)) from None
        if options["verbosity"]:
            self.stdout.write(
                self.style.SUCCESS(f"{membership.user.username} is {role} in {tenant}")
            )
