"""Checkpoint MAC keys: list them, make a new one, retire an old one, check what is in use.

The keys live in COUNTERSIGN_CHECKPOINT_KEYS (`kid:secret,...`, the first signs, all verify),
outside the database. This command never changes that setting and never re-signs a
checkpoint: `add` and `retire` print the value to deploy, and the operator deploys it. Old
checkpoints keep verifying until their key is removed from the setting; `check` says which
key ids stored checkpoints use and fails when one of them is no longer configured.

    checkpoint_keys list
    checkpoint_keys add --id 2026-07        # prints the new value, the new key first
    checkpoint_keys check [--verify]
    checkpoint_keys resign-rows --id 2026-01  # policies, rules, memberships: to the current key
    checkpoint_keys retire --id 2026-01     # refuses while a run's latest checkpoint needs it

Tool policies, standing rules and memberships are signed with the same keys
(control.foundation.row_signing); they are re-signed (`resign-rows`, only rows that
verify), since a row whose key is retired decides nothing.
"""

from __future__ import annotations

import getpass
import re
import secrets

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db.models import Count, OuterRef, Subquery

from control.foundation.audit import audit_record
from control.foundation.row_signing import rows_resign, rows_signed_with
from runs.exceptions import CheckpointError
from runs.models import Checkpoint
from runs.record.checkpoints import checkpoint_verify

KEY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
SECRET_BYTES = 32


def _setting_value(keys: dict[str, bytes]) -> str:
    return ",".join(f"{kid}:{secret.decode()}" for kid, secret in keys.items())


def _latest_checkpoints():
    """Each run's newest checkpoint: the one recovery and export read."""
    newest = (
        Checkpoint.objects.filter(run=OuterRef("run"))
        .order_by("-state_version")
        .values("state_version")[:1]
    )
    return Checkpoint.objects.filter(state_version=Subquery(newest))


class Command(BaseCommand):
    help = "List, add, retire or check checkpoint MAC keys (COUNTERSIGN_CHECKPOINT_KEYS)."

    def add_arguments(self, parser):
        commands = parser.add_subparsers(dest="subcommand", required=True)
        commands.add_parser("list", help="the configured key ids; which one signs")
        add = commands.add_parser("add", help="make a key and print the value with it first")
        add.add_argument("--id", dest="key_id", required=True, help="the new key's id")
        retire = commands.add_parser("retire", help="print the value without an old key")
        retire.add_argument("--id", dest="key_id", required=True, help="the key id to remove")
        retire.add_argument(
            "--force",
            action="store_true",
            help="retire even though runs' latest checkpoints are signed with it "
            "(they will no longer verify)",
        )
        check = commands.add_parser("check", help="checkpoints per key id; missing key ids")
        check.add_argument(
            "--verify",
            action="store_true",
            help="also verify every run's latest checkpoint (MAC and invariants)",
        )
        resign = commands.add_parser(
            "resign-rows", help="re-sign the policies, rules and memberships signed with a key"
        )
        resign.add_argument("--id", dest="key_id", required=True, help="the key id to leave")
        for sub in (add, retire, resign):
            sub.add_argument("--actor", default="", help="who rotates, for the audit chain")

    def handle(self, *args, subcommand, **options):
        getattr(self, f"_{subcommand.replace('-', '_')}")(**options)

    def _resign_rows(self, *, key_id: str, actor: str, **options):
        if next(iter(settings.COUNTERSIGN_CHECKPOINT_KEYS)) == key_id:
            raise CommandError(f"key id {key_id!r} signs now; deploy a new key first")
        resigned, refused = rows_resign(key_id=key_id)
        audit_record(
            actor=self._actor(actor),
            verb="checkpoint_key.resign_rows",
            object_type="checkpoint_key",
            object_id=key_id,
            data={"resigned": resigned, "refused": [str(row) for row in refused][:100]},
        )
        for row in refused:
            self.stderr.write(f"not re-signed, does not verify: {row}")
        if refused:
            raise CommandError(
                f"{len(refused)} row(s) signed with {key_id!r} do not verify and were left "
                f"as they are ({resigned} re-signed): an admin must write them again"
            )
        self.stdout.write(f"{resigned} row(s) re-signed with the current key")

    def _actor(self, given: str) -> str:
        return given or f"manage.py checkpoint_keys ({getpass.getuser()})"

    def _list(self, **options):
        for position, kid in enumerate(settings.COUNTERSIGN_CHECKPOINT_KEYS):
            role = "signs and verifies" if position == 0 else "verifies"
            self.stdout.write(f"{kid}\t{role}")

    def _add(self, *, key_id: str, actor: str, **options):
        keys = settings.COUNTERSIGN_CHECKPOINT_KEYS
        if not KEY_ID.fullmatch(key_id):
            raise CommandError(
                f"key id {key_id!r} must be 1-64 letters, digits, '.', '_' or '-' (no ':' or ',')"
            )
        if key_id in keys:
            raise CommandError(f"key id {key_id!r} is already configured")
        if Checkpoint.objects.filter(key_id=key_id).exists():
            raise CommandError(
                f"key id {key_id!r} signed stored checkpoints before; pick an id never used"
            )
        new_keys = {key_id: secrets.token_urlsafe(SECRET_BYTES).encode(), **keys}
        audit_record(
            actor=self._actor(actor),
            verb="checkpoint_key.add",
            object_type="checkpoint_key",
            object_id=key_id,
            reason="new signing key generated; it signs once deployed",
            data={"signs": key_id, "verifies": list(new_keys)},
        )
        self.stderr.write(
            "Deploy this as COUNTERSIGN_CHECKPOINT_KEYS (it holds secrets; keep it out of "
            f"shell history and logs). {key_id} signs from then on; the others still verify."
        )
        self.stdout.write(_setting_value(new_keys))

    def _retire(self, *, key_id: str, force: bool, actor: str, **options):
        keys = settings.COUNTERSIGN_CHECKPOINT_KEYS
        if key_id not in keys:
            raise CommandError(f"key id {key_id!r} is not configured")
        if next(iter(keys)) == key_id:
            raise CommandError(
                f"key id {key_id!r} signs now; add a new key and deploy it before retiring this one"
            )
        rows = rows_signed_with(key_id)
        if rows and not force:
            raise CommandError(
                f"{rows} row(s) (policies, standing rules, memberships, connector "
                f"enablements) are signed with "
                f"{key_id!r} and would decide nothing; run `checkpoint_keys resign-rows "
                f"--id {key_id}` first (or use --force)"
            )
        needed = _latest_checkpoints().filter(key_id=key_id).count()
        if needed and not force:
            raise CommandError(
                f"{needed} run(s) have their latest checkpoint signed with {key_id!r}; "
                "they would no longer verify (advance those runs, or use --force)"
            )
        remaining = {kid: secret for kid, secret in keys.items() if kid != key_id}
        audit_record(
            actor=self._actor(actor),
            verb="checkpoint_key.retire",
            object_type="checkpoint_key",
            object_id=key_id,
            reason="forced: latest checkpoints still signed with it" if needed else "",
            data={"verifies": list(remaining), "latest_checkpoints_signed": needed},
        )
        self.stderr.write(
            f"Deploy this as COUNTERSIGN_CHECKPOINT_KEYS; checkpoints signed with {key_id} "
            "will then fail to verify as unknown_key."
        )
        self.stdout.write(_setting_value(remaining))

    def _check(self, *, verify: bool, **options):
        configured = list(settings.COUNTERSIGN_CHECKPOINT_KEYS)
        totals = dict(
            Checkpoint.objects.values_list("key_id").annotate(n=Count("pk")).order_by("key_id")
        )
        latest = dict(
            _latest_checkpoints().values_list("key_id").annotate(n=Count("pk")).order_by("key_id")
        )
        for kid in sorted(set(configured) | set(totals)):
            state = "configured" if kid in configured else "NOT CONFIGURED"
            if configured and kid == configured[0]:
                state += ", signs"
            self.stdout.write(
                f"{kid}\t{totals.get(kid, 0)} checkpoint(s), latest of "
                f"{latest.get(kid, 0)} run(s)\t{state}"
            )
        problems = []
        missing = sorted(set(totals) - set(configured))
        if missing:
            stranded = sum(latest.get(kid, 0) for kid in missing)
            problems.append(
                f"key id(s) {', '.join(missing)} sign stored checkpoints but are not configured "
                f"({stranded} run(s) have a latest checkpoint that no longer verifies)"
            )
        if verify:
            failures = self._verify_latest()
            if failures:
                problems.append(f"{failures} latest checkpoint(s) do not verify")
        if problems:
            raise CommandError("; ".join(problems))
        if options["verbosity"]:
            self.stdout.write(self.style.SUCCESS("every key id in use is configured"))

    def _verify_latest(self) -> int:
        failures = 0
        for checkpoint in _latest_checkpoints().order_by("pk").iterator(chunk_size=500):
            try:
                checkpoint_verify(checkpoint.body)
            except CheckpointError as error:
                failures += 1
                self.stderr.write(f"run {checkpoint.run_id}: {error}")
        return failures
