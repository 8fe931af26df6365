"""Decision receipts written: each intent's chain of signed statements (runs.models.evidence).

`statements_append` adds one to each intent's chain: the body names the intent, its place in
the chain, the previous statement's hash and the signing key, and is signed as canonical
JSON. The callers are the services that decide, execute, expire and reconcile; each appends
in the transaction of the change it states, so a statement exists exactly when its change
committed. Lock order: the caller holds the action's row (or the run's lease) already.
"""

from __future__ import annotations

import hashlib

from django.utils import timezone

from control.foundation import evidence_keys
from control.foundation.canonical import canonical_json
from control.models import AuditEntry
from runs.models import Action, Statement

FORMAT = 1


def statements_append(entries: list[tuple[Action, str, dict]]) -> list[Statement]:
    """One statement at the end of each (action, kind, content)'s chain, in one insert; the
    chains' ends are read in one query. An action appears at most once."""
    moment = timezone.now()
    ends = _chain_ends([action.pk for action, _, _ in entries])
    key_id = evidence_keys.current_key_id()
    statements = []
    for action, kind, content in entries:
        seq, prev = ends.get(action.pk, (0, None))
        body = {
            "format": FORMAT,
            "kind": kind,
            "seq": seq + 1,
            "prev": prev,
            "tenant": str(action.tenant_id),
            "run": str(action.run_id),
            "action": str(action.pk),
            "action_id": action.action_id,
            "tool": action.tool,
            "target": action.target,
            "intent_digest": action.intent_digest,
            "at": moment.isoformat(),
            "key_id": key_id,
            **content,
        }
        payload = canonical_json(body)
        _, signature = evidence_keys.sign(payload)
        statements.append(
            Statement(
                tenant_id=action.tenant_id,
                action=action,
                seq=seq + 1,
                kind=kind,
                body=body,
                hash=statement_hash(payload),
                key_id=key_id,
                signature=signature,
                created_at=moment,
            )
        )
    return Statement.objects.bulk_create(statements)


def _chain_ends(action_pks: list) -> dict:
    """action pk -> (seq, hash) of its chain's last statement, for those that have one."""
    ends: dict = {}
    rows = Statement.objects.filter(action__in=action_pks).order_by("action", "seq")
    for action_pk, seq, hash in rows.values_list("action", "seq", "hash"):
        ends[action_pk] = (seq, hash)
    return ends


def statement_hash(payload: bytes) -> str:
    return "sha256:" + hashlib.sha256(payload).hexdigest()


def audit_place(entry: AuditEntry) -> dict:
    """Where a statement's audit entry sits in the audit chain."""
    return {"seq": entry.seq, "hash": entry.hash}
