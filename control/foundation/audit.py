"""The audit chain: every human decision and administrative act, hash-chained.

Each entry's hash covers its content and the previous hash, so editing, deleting or
reordering any row breaks `audit_verify`. The head (seq, hash) is signed with the current
checkpoint key in the same transaction, so someone who can write the database but holds no
key cannot rewrite entries and recompute their hashes unseen. The head can also be exported
and kept outside the database (`verify_audit --head`, then `--expect SEQ:HASH`), which
catches even a holder of the key who truncates or rewrites the tail.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from control.foundation import signing
from control.foundation.canonical import canonical_json
from control.models import AuditChainHead, AuditEntry, Tenant

GENESIS_HASH = "sha256:" + "0" * 64


def entry_hash(*, prev_hash: str, fields: dict) -> str:
    digest = hashlib.sha256(prev_hash.encode() + canonical_json(fields)).hexdigest()
    return "sha256:" + digest


def hashed_fields(entry: AuditEntry) -> dict:
    return {
        "seq": entry.seq,
        "tenant": str(entry.tenant_id) if entry.tenant_id else None,
        "actor": entry.actor,
        "verb": entry.verb,
        "object_type": entry.object_type,
        "object_id": entry.object_id,
        "reason": entry.reason,
        "data": entry.data,
        "created_at": entry.created_at.isoformat(),
    }


def exported_fields(entry: AuditEntry) -> dict:
    """What the entry's hash covers, with the hash it links to and its own: enough for anyone
    to hash the entry again and walk the links (the audit page's exports, evidence bundles)."""
    return {**hashed_fields(entry), "prev_hash": entry.prev_hash, "hash": entry.hash}


def entry_intact(entry: AuditEntry) -> bool:
    """Whether the entry still hashes, from its predecessor's hash, to its stored hash: an
    edit of this one row shows; a deletion or reordering shows only to `audit_verify`."""
    return entry_hash(prev_hash=entry.prev_hash, fields=hashed_fields(entry)) == entry.hash


@transaction.atomic
def audit_record(
    *,
    actor: str,
    verb: str,
    tenant: Tenant | None = None,
    object_type: str = "",
    object_id: str = "",
    reason: str = "",
    data: dict | None = None,
) -> AuditEntry:
    head, _ = AuditChainHead.objects.select_for_update().get_or_create(id=1)
    entry = AuditEntry(
        seq=head.seq + 1,
        tenant=tenant,
        actor=actor[:150],
        verb=verb,
        object_type=object_type,
        object_id=str(object_id),
        reason=reason,
        data=data or {},
        created_at=timezone.now(),
        prev_hash=head.hash,
    )
    entry.hash = entry_hash(prev_hash=head.hash, fields=hashed_fields(entry))
    entry.save(force_insert=True)
    head.seq, head.hash = entry.seq, entry.hash
    head.key_id, head.mac = signing.sign(_head_payload(head.seq, head.hash))
    head.save(update_fields=["seq", "hash", "key_id", "mac"])
    return entry


def _head_payload(seq: int, hash: str) -> bytes:
    return canonical_json({"audit_head": {"seq": seq, "hash": hash}})


@dataclass(frozen=True)
class AuditVerdict:
    ok: bool
    entries: int
    problem: str = ""


def audit_verify() -> AuditVerdict:
    """Walks the whole chain in seq order; any edit, deletion or reordering shows."""
    prev_hash = GENESIS_HASH
    expected_seq = 1
    count = 0
    for entry in AuditEntry.objects.order_by("seq").iterator(chunk_size=2000):
        if entry.seq != expected_seq:
            return AuditVerdict(
                False, count, f"entry #{expected_seq} is missing (found #{entry.seq})"
            )
        if entry.prev_hash != prev_hash:
            return AuditVerdict(
                False, count, f"entry #{entry.seq} does not link to its predecessor"
            )
        if not entry_intact(entry):
            return AuditVerdict(False, count, f"entry #{entry.seq} was altered")
        prev_hash, expected_seq, count = entry.hash, expected_seq + 1, count + 1
    head = AuditChainHead.objects.filter(id=1).first()
    if head is None:
        if count:
            return AuditVerdict(False, count, f"the chain has {count} entries but no head")
        return AuditVerdict(True, count)
    if (head.seq, head.hash) != (count, prev_hash):
        return AuditVerdict(
            False, count, f"the chain ends at #{count} but the head says #{head.seq}"
        )
    if head.seq and not head.mac:
        return AuditVerdict(False, count, "the head is not signed")
    if head.seq:
        try:
            signing.verify(_head_payload(head.seq, head.hash), kid=head.key_id, mac=head.mac)
        except signing.SignatureError as error:
            return AuditVerdict(
                False, count, f"the head's signature does not verify ({error.rule}): rewritten"
            )
    return AuditVerdict(True, count)


def audit_expect(*, seq: int, hash: str) -> str:
    """Compares the chain with a head exported earlier; the problem, or "" when the entry
    at `seq` is still there with the same hash (nothing before it was truncated or rewritten)."""
    entry = AuditEntry.objects.filter(seq=seq).only("hash").first()
    if entry is None:
        return f"entry #{seq} of the exported head is gone: the chain was truncated"
    if entry.hash != hash:
        return f"entry #{seq} has hash {entry.hash}, the exported head says {hash}: rewritten"
    return ""


def audit_head() -> dict:
    head = AuditChainHead.objects.filter(id=1).first()
    return {"seq": head.seq, "hash": head.hash} if head else {"seq": 0, "hash": GENESIS_HASH}
