"""An evidence bundle: a tenant's decision receipts, for an auditor who trusts none of our
databases (`manage.py export_evidence`, the audit page's download; `countersign-verify`, in
the client package, checks one offline).

A bundle is a directory of four files:

- `statements.jsonl`: every statement (runs.models.evidence) of the intents chosen, whole
  chains in chain order, each line `{"body", "hash", "key_id", "signature"}`;
- `intents.jsonl`: each chosen intent as it stands (status, digest, approval rules), so the
  verifier can ask of each what its chain must end with;
- `audit.jsonl`: the audit entries the statements name, with the fields their hashes cover
  and their links (control.foundation.audit.exported_fields);
- `manifest.json`: the tenant, the filter, the counts, the sha256 of each file, the audit
  chain's head at export, the public keys, all signed with the current evidence key.

The intents chosen are the tenant's proposed in [since, until), or one run's; every
statement of theirs is included, whenever it was made, so each chain is whole.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from django.utils import timezone

from control.foundation import evidence_keys
from control.foundation.audit import audit_head, exported_fields
from control.foundation.canonical import canonical_json
from control.models import AuditEntry, Tenant
from runs.models import Action, Statement

FORMAT = 1
FILES = ("statements.jsonl", "intents.jsonl", "audit.jsonl")


@dataclass(frozen=True)
class Chosen:
    tenant: Tenant
    since: datetime | None = None
    until: datetime | None = None
    run_id: str | None = None

    def actions(self):
        actions = Action.objects.filter(tenant=self.tenant)
        if self.since is not None:
            actions = actions.filter(created_at__gte=self.since)
        if self.until is not None:
            actions = actions.filter(created_at__lt=self.until)
        if self.run_id is not None:
            actions = actions.filter(run_id=self.run_id)
        return actions.order_by("created_at", "pk")

    def described(self) -> dict:
        return {
            "since": self.since.isoformat() if self.since else None,
            "until": self.until.isoformat() if self.until else None,
            "run": self.run_id,
        }


def bundle_write(chosen: Chosen, directory: Path) -> dict:
    """Writes the bundle into `directory`, which must not exist yet, atomically: the files
    are written in a temporary directory beside it, then renamed into place. Returns the
    manifest."""
    directory = Path(directory)
    if directory.exists():
        raise FileExistsError(f"{directory} exists already: choose a new directory")
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
    try:
        manifest = _write_files(chosen, staging)
        os.rename(staging, directory)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return manifest


def _write_files(chosen: Chosen, staging: Path) -> dict:
    actions = list(chosen.actions())
    statements = list(
        Statement.objects.filter(action__in=[action.pk for action in actions]).order_by(
            "action__created_at", "action", "seq"
        )
    )
    audit_seqs = {s.body["audit"]["seq"] for s in statements if s.body.get("audit")}
    entries = AuditEntry.objects.filter(seq__in=audit_seqs).order_by("seq")
    lines = {
        "statements.jsonl": (_statement_line(s) for s in statements),
        "intents.jsonl": (_intent_line(action) for action in actions),
        "audit.jsonl": (exported_fields(entry) for entry in entries.iterator()),
    }
    digests, counts = {}, {}
    for name in FILES:
        digests[name], counts[name] = _write_lines(staging / name, lines[name])
    body = {
        "format": FORMAT,
        "tenant": {"id": str(chosen.tenant.pk), "name": chosen.tenant.name},
        "filter": chosen.described(),
        "exported_at": timezone.now().isoformat(),
        "counts": counts,
        "files": digests,
        "audit_head": audit_head(),
        "keys": evidence_keys.public_keys(),
    }
    key_id, signature = evidence_keys.sign(canonical_json(body))
    manifest = {"body": body, "key_id": key_id, "signature": signature}
    _write_lines(staging / "manifest.json", [manifest])
    return manifest


def _statement_line(statement: Statement) -> dict:
    return {
        "body": statement.body,
        "hash": statement.hash,
        "key_id": statement.key_id,
        "signature": statement.signature,
    }


def _intent_line(action: Action) -> dict:
    return {
        "action": str(action.pk),
        "run": str(action.run_id),
        "action_id": action.action_id,
        "tool": action.tool,
        "target": action.target,
        "intent_digest": action.intent_digest,
        "status": action.status,
        "needs_approval": action.needs_approval,
        "required_approvals": action.required_approvals,
        "proposed_at": action.created_at.isoformat(),
    }


def _write_lines(path: Path, rows: Iterable[dict]) -> tuple[str, int]:
    digest, count = hashlib.sha256(), 0
    with path.open("wb") as out:
        for row in rows:
            line = json.dumps(row, sort_keys=True, ensure_ascii=False).encode() + b"\n"
            digest.update(line)
            out.write(line)
            count += 1
        out.flush()
        os.fsync(out.fileno())
    return "sha256:" + digest.hexdigest(), count
