"""What a reconciler points at as the proof that an uncertain write took effect.

The probes' reads are what the external system records about the target (a ticket, the
messages a recipient was sent). The records in them that could be this write are the
candidates: one that shares a value with the intent (its target, a recipient, a body, an
amount) and was not created before the write's first attempt started. A reconciler picks one
("this record is the effect"), types what the system recorded (a receipt id, the state they
observed), or says none matches and resolves otherwise.

Nothing here trusts what a form sends back beyond a probe number and a record's place: the
record itself is read again from the case's findings, and a digest is checked wherever the
system knows one, never demanded where it does not.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta

from control.foundation.canonical import canonical_json, content_hash
from reconciliation.exceptions import ResolutionRefused
from runs.models import Receipt
from runs.tools.calls import ToolReceipt

# The fields a record's creation time and its id go by, in the order they are looked for.
TIME_FIELDS = ("created_at", "created", "timestamp", "sent_at", "at")
ID_FIELDS = ("receipt_id", "id")


@dataclass(frozen=True)
class Candidate:
    """One record of one probe's read that could be this write."""

    probe: int
    index: int
    record: dict
    matches: tuple[str, ...]
    # How long after the write's first attempt started the record was created, if it says.
    after: timedelta | None

    @property
    def choice(self) -> str:
        """How the form names it: the probe and the record's place in that probe's read."""
        return f"{self.probe}:{self.index}"

    @property
    def record_id(self) -> str:
        return next((str(self.record[name]) for name in ID_FIELDS if self.record.get(name)), "")

    @property
    def after_text(self) -> str:
        if self.after is None:
            return "its creation time is not in the record"
        return f"created {self.after.total_seconds():.1f} s after the first attempt started"


def record_bytes(record: dict) -> bytes:
    """A record read from an external system, serialized to compare and hash it: sorted keys,
    any JSON value (unlike the canonical form, which refuses integers no double holds)."""
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def read_records(read) -> list[dict]:
    """The records a read holds: the objects of its lists (a recipient's messages), or the
    read itself when it is one object with no list of objects (a ticket)."""
    if isinstance(read, list):
        return [item for item in read if isinstance(item, dict)]
    if not isinstance(read, dict):
        return []
    nested = [
        item
        for value in read.values()
        if isinstance(value, list)
        for item in value
        if isinstance(item, dict)
    ]
    has_lists = any(isinstance(value, list) for value in read.values())
    return nested if has_lists else [read]


def intent_values(action) -> dict[str, object]:
    """The intent's values a record may repeat, by what they are: the target and each scalar
    argument."""
    values: dict[str, object] = {"target": action.target}
    for name, value in (action.args or {}).items():
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            values[name] = value
    return values


def _created_at(record: dict) -> datetime | None:
    for name in TIME_FIELDS:
        value = record.get(name)
        if isinstance(value, str):
            try:
                moment = datetime.fromisoformat(value)
            except ValueError:
                continue
            return moment if moment.tzinfo else None
    return None


def _matches(record: dict, wanted: dict[str, object]) -> tuple[str, ...]:
    shown = [value for value in record.values() if isinstance(value, str | int | float)]
    return tuple(name for name, value in wanted.items() if value in shown)


@dataclass(frozen=True)
class Candidates:
    """The candidates among every probe's reads, each record once (the first probe that read
    it), and how many records were left out as created before the first attempt."""

    found: tuple[Candidate, ...]
    earlier: int

    def pick(self, probe, index) -> Candidate | None:
        return next((c for c in self.found if (c.probe, c.index) == (probe, index)), None)


def candidates(findings, action, *, since: datetime | None) -> Candidates:
    wanted = intent_values(action)
    found: list[Candidate] = []
    seen: set[bytes] = set()
    earlier = 0
    for probe, finding in enumerate(findings or [], start=1):
        read = finding.get("read") if isinstance(finding, dict) else None
        for index, record in enumerate(read_records(read)):
            key = record_bytes(record)
            if key in seen:
                continue
            seen.add(key)
            matches = _matches(record, wanted)
            if not matches:
                continue
            created_at = _created_at(record)
            if since is not None and created_at is not None and created_at < since:
                earlier += 1
                continue
            after = created_at - since if since and created_at else None
            found.append(Candidate(probe, index, record, matches, after))
    return Candidates(tuple(found), earlier)


def _known_digests(findings, receipt_id: str) -> set[str]:
    """The digests the probes saw for a receipt id: its query by key, any read record."""
    digests = set()
    for finding in findings or []:
        if not isinstance(finding, dict):
            continue
        query = finding.get("query")
        records = read_records(finding.get("read"))
        for record in [query, *records] if isinstance(query, dict) else records:
            ids = {str(record.get(name)) for name in ID_FIELDS if record.get(name)}
            if receipt_id in ids and isinstance(record.get("intent_digest"), str):
                digests.add(record["intent_digest"])
    return digests


def _refuse_other_digest(digest: str, action) -> None:
    if digest != action.intent_digest:
        raise ResolutionRefused(
            f"the receipt carries digest {digest}, the intent is {action.intent_digest}: "
            "it proves another write"
        )


def _picked(case, evidence: dict, since: datetime | None) -> tuple[dict, Candidate]:
    try:
        probe, index = int(evidence["probe"]), int(evidence["index"])
    except (KeyError, TypeError, ValueError):
        raise ResolutionRefused("a picked record names its probe and its place") from None
    candidate = candidates(case.findings, case.action, since=since).pick(probe, index)
    if candidate is None:
        raise ResolutionRefused(
            f"probe #{probe} read no record #{index + 1} that could be this write"
        )
    if "record" in evidence and evidence["record"] != candidate.record:
        raise ResolutionRefused(f"the record picked from probe #{probe} is not what it read")
    digest = candidate.record.get("intent_digest")
    if isinstance(digest, str):
        _refuse_other_digest(digest, case.action)
    return {"probe": probe, "index": index, "record": candidate.record}, candidate


def evidence_receipt(
    case, evidence: dict | None, *, since: datetime | None
) -> tuple[dict, ToolReceipt]:
    """The evidence as it is kept (a picked record is stored whole) and the receipt it
    makes. A receipt id is checked against every digest the system knows for it (given with
    it, or seen by a probe) and refused when one is another intent's; without any, it stands
    as the reconciler's word, like the state they observed."""
    action = case.action
    if not isinstance(evidence, dict) or not evidence:
        raise ResolutionRefused(
            "evidence is required: a record the probes read, a receipt id or the observed state"
        )
    if "probe" in evidence:
        kept, picked = _picked(case, evidence, since)
        return kept, ToolReceipt(
            idempotency_key=action.idempotency_key,
            intent_digest=action.intent_digest,
            receipt_id=(picked.record_id or f"record:{case.pk}:{picked.choice}")[:200],
            target_version=None,
            status=Receipt.OBSERVED,
            raw_response_hash=content_hash(record_bytes(picked.record)),
        )
    if evidence.get("receipt_id"):
        receipt_id = str(evidence["receipt_id"])[:200]
        given = evidence.get("intent_digest")
        known = _known_digests(case.findings, receipt_id)
        for digest in known | ({str(given)} if given else set()):
            _refuse_other_digest(digest, action)
        version = evidence.get("target_version")
        return evidence, ToolReceipt(
            idempotency_key=action.idempotency_key,
            intent_digest=action.intent_digest,
            receipt_id=receipt_id,
            target_version=version if isinstance(version, int) else None,
            status=str(evidence.get("status") or ("applied" if given else Receipt.ATTESTED))[:64],
            raw_response_hash=content_hash(canonical_json(evidence)),
        )
    observed = evidence.get("observed_state")
    if isinstance(observed, str) and observed.strip():
        return evidence, ToolReceipt(
            idempotency_key=action.idempotency_key,
            intent_digest=action.intent_digest,
            receipt_id=f"observed:{case.pk}",
            target_version=None,
            status=Receipt.OBSERVED,
            raw_response_hash=content_hash(canonical_json(evidence)),
        )
    raise ResolutionRefused(
        "evidence needs a record the probes read, a receipt id, or the observed state of the target"
    )
