"""countersign-verify: checks an evidence bundle offline (`manage.py export_evidence` writes
one), with no Django, no database and no secret: only the bundle and Ed25519 public keys.

    countersign-verify DIR [--keys KEYS.json]

It checks, and names the first record that breaks:

- the manifest's signature, then every statement's hash, key and signature;
- every chain: each intent's statements numbered from 1, each naming the hash of the one
  before;
- every binding: a decision's view hashes to the digest it names and shows the intent it
  decides; each audit entry a statement names is in the bundle with that hash, and hashes
  again to it; an executed write's receipt carries its intent's digest, and approvals came
  first (enough people, or a standing rule, or a policy that asks none);
- every ending: each intent as the bundle lists it is what its statements say (a write that
  succeeded has its receipt, one that failed its failure; one rejected, expired or superseded
  ends in the statement that nothing was sent, and one cancelled has that statement);
- last, each file's digest and count against the manifest.

Without --keys, the bundle's own public keys are used, and the summary says so: a bundle
signed with a key you do not trust proves nothing. Pass the keys published by the server
(`/.well-known/countersign-keys.json`, fetched once and kept) to pin them.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import rfc8785
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

FILES = ("statements.jsonl", "intents.jsonl", "audit.jsonl")
GENESIS_HASH = "sha256:" + "0" * 64
# An intent in one of these ended without its write applied: its chain must say so last.
NOT_SENT = frozenset({"rejected", "expired", "superseded"})
DONE = frozenset({"succeeded", "satisfied"})
# Ended with each kind: a cancelled write states it was not sent, maybe before its case's
# resolution; a failed one its failure.
ENDED_WITH = {"cancelled": "never_sent", "failed": "failed"}
AUDIT_FIELDS = (
    "seq",
    "tenant",
    "actor",
    "verb",
    "object_type",
    "object_id",
    "reason",
    "data",
    "created_at",
)


class Broken(Exception):
    """The bundle does not hold: `record` names where, `problem` says what."""

    def __init__(self, record: str, problem: str) -> None:
        super().__init__(f"{record}: {problem}")
        self.record = record
        self.problem = problem


@dataclass
class Report:
    tenant: str
    statements: int = 0
    intents: Counter = field(default_factory=Counter)
    audit_entries: int = 0
    pinned_keys: bool = False

    def summary(self) -> str:
        endings = ", ".join(f"{count} {status}" for status, count in sorted(self.intents.items()))
        keys = (
            "the keys given with --keys"
            if self.pinned_keys
            else "the bundle's own keys (pass --keys to pin the server's)"
        )
        return (
            f"OK: tenant {self.tenant}: {self.statements} statements of "
            f"{sum(self.intents.values())} intents ({endings or 'none'}) and "
            f"{self.audit_entries} audit entries; every signature (under {keys}), chain "
            "link and binding holds"
        )


def digest(value) -> str:
    return "sha256:" + hashlib.sha256(rfc8785.dumps(value)).hexdigest()


def verify_bundle(directory: Path, trusted_keys: list[dict] | None = None) -> Report:
    directory = Path(directory)
    manifest = _read_json(directory / "manifest.json", "manifest.json")
    body = _field(manifest, "body", "manifest.json")
    keys = _public_keys(trusted_keys if trusted_keys is not None else body.get("keys", []))
    _check_signature(keys, body, manifest, "manifest.json")
    report = Report(
        tenant=str(body.get("tenant", {}).get("name")), pinned_keys=trusted_keys is not None
    )
    audit = _audit_entries(directory, report)
    chains = _statements(directory, keys, audit, report)
    _intents(directory, chains, report)
    _files(directory, body)
    return report


def _audit_entries(directory: Path, report: Report) -> dict[int, dict]:
    entries: dict[int, dict] = {}
    for number, entry in _lines(directory / "audit.jsonl"):
        record = f"audit.jsonl line {number} (audit entry #{entry.get('seq')})"
        fields = {name: entry.get(name) for name in AUDIT_FIELDS}
        recomputed = hashlib.sha256(
            str(entry.get("prev_hash")).encode() + rfc8785.dumps(fields)
        ).hexdigest()
        if "sha256:" + recomputed != entry.get("hash"):
            raise Broken(record, "the entry does not hash to its recorded hash: altered")
        previous = entries.get(entry["seq"] - 1) if isinstance(entry["seq"], int) else None
        if previous is not None and entry.get("prev_hash") != previous["hash"]:
            raise Broken(record, f"the entry does not link to entry #{previous['seq']}")
        entries[entry["seq"]] = entry
    report.audit_entries = len(entries)
    return entries


def _statements(directory, keys, audit, report) -> dict[str, list[dict]]:
    chains: dict[str, list[dict]] = defaultdict(list)
    for number, line in _lines(directory / "statements.jsonl"):
        body = _field(line, "body", f"statements.jsonl line {number}")
        record = (
            f"statements.jsonl line {number} (statement {body.get('seq')}, {body.get('kind')}, "
            f"of intent {body.get('action_id')} {body.get('action')})"
        )
        if digest(body) != line.get("hash"):
            raise Broken(record, "the statement does not hash to its recorded hash: altered")
        if line.get("key_id") != body.get("key_id"):
            raise Broken(record, "the key id beside the statement is not the one it names")
        _check_signature(keys, body, line, record)
        chain = chains[str(body.get("action"))]
        _check_link(chain, body, line, record)
        _check_binding(chain, body, audit, record)
        chain.append({**body, "_hash": line["hash"], "_record": record})
        report.statements += 1
    return chains


def _check_link(chain: list[dict], body: dict, line: dict, record: str) -> None:
    expected_seq = len(chain) + 1
    expected_prev = chain[-1]["_hash"] if chain else None
    if body.get("seq") != expected_seq:
        raise Broken(record, f"the chain expects statement {expected_seq} here: one is missing")
    if body.get("prev") != expected_prev:
        raise Broken(record, "the statement does not link to the one before it")


def _check_binding(chain: list[dict], body: dict, audit: dict, record: str) -> None:
    kind = body.get("kind")
    place = body.get("audit")
    if place:
        entry = audit.get(place.get("seq"))
        if entry is None:
            raise Broken(record, f"its audit entry #{place.get('seq')} is not in the bundle")
        if entry["hash"] != place.get("hash"):
            raise Broken(record, f"audit entry #{place['seq']} is not the one it names")
    if kind == "decision":
        view = body.get("view")
        if not isinstance(view, dict) or digest(view) != body.get("view_digest"):
            raise Broken(record, "the decision view does not hash to the digest it names")
        shown = [item.get("intent_digest") for item in view.get("items", [view])]
        if body.get("intent_digest") not in shown:
            raise Broken(record, "the decision view shows another intent")
        if view.get("plan_digest") != body.get("plan_digest"):
            raise Broken(record, "the decision view shows another plan")
    elif kind == "executed":
        receipt = body.get("receipt") or {}
        if receipt.get("intent_digest") != body.get("intent_digest"):
            raise Broken(record, "the receipt carries another intent's digest")
        problem = _approval_problem(chain)
        if problem:
            raise Broken(record, f"executed without approval: {problem}")


def _approval_problem(chain: list[dict]) -> str:
    """ "" when the chain so far approves its intent for execution, else what is missing."""
    if any(statement["kind"] == "unreviewed" for statement in chain):
        return ""
    decisions = [statement for statement in chain if statement["kind"] == "decision"]
    if any(statement["decision"] != "approve" for statement in decisions):
        return "it was rejected"
    if any(statement["decider"].get("kind") == "rule" for statement in decisions):
        return ""
    if not decisions:
        return "no decision precedes it"
    people = {statement["decider"].get("name") for statement in decisions}
    needed = decisions[0].get("policy", {}).get("required_approvals", 1)
    if len(people) < needed:
        return f"{len(people)} of {needed} approvals"
    return ""


def _intents(directory: Path, chains: dict[str, list[dict]], report: Report) -> None:
    listed = set()
    for number, intent in _lines(directory / "intents.jsonl"):
        record = f"intents.jsonl line {number} (intent {intent.get('action_id')})"
        chain = chains.get(str(intent.get("action")), [])
        listed.add(str(intent.get("action")))
        status = intent.get("status")
        kinds = [statement["kind"] for statement in chain]
        for statement in chain:
            for name in ("tool", "target", "intent_digest", "run"):
                if statement.get(name) != intent.get(name):
                    raise Broken(statement["_record"], f"names another {name} than its intent")
        if status in DONE and "executed" not in kinds:
            raise Broken(record, f"the intent {status} but no receipt of its execution is here")
        if status in NOT_SENT and (not kinds or kinds[-1] != "never_sent"):
            raise Broken(record, f"the intent is {status} but no statement says it was not sent")
        if status in ENDED_WITH and ENDED_WITH[status] not in kinds:
            raise Broken(record, f"the intent is {status} but no statement says so")
        if (status in NOT_SENT or status in ENDED_WITH) and "executed" in kinds:
            raise Broken(record, f"the intent is {status} yet a receipt says it executed")
        problem = _approval_problem(chain) if status in DONE else ""
        if intent.get("needs_approval") and problem:
            raise Broken(record, f"executed without approval: {problem}")
        report.intents[status] += 1
    for action, chain in chains.items():
        if action not in listed:
            raise Broken(chain[0]["_record"], "its intent is not listed in intents.jsonl")


def _files(directory: Path, body: dict) -> None:
    for name in FILES:
        data = (directory / name).read_bytes()
        if "sha256:" + hashlib.sha256(data).hexdigest() != body.get("files", {}).get(name):
            raise Broken(name, "the file is not the one the manifest signed (its digest differs)")
        lines = data.count(b"\n")
        if lines != body.get("counts", {}).get(name):
            raise Broken(name, f"the file holds {lines} lines, the manifest says otherwise")


def _public_keys(keys: list[dict]) -> dict[str, Ed25519PublicKey]:
    found = {}
    for key in keys:
        if key.get("kty") != "OKP" or key.get("crv") != "Ed25519":
            continue
        raw = base64.urlsafe_b64decode(key["x"] + "=" * (-len(key["x"]) % 4))
        found[key["kid"]] = Ed25519PublicKey.from_public_bytes(raw)
    return found


def _check_signature(keys, body: dict, line: dict, record: str) -> None:
    key = keys.get(line.get("key_id"))
    if key is None:
        raise Broken(record, f"signed with key {line.get('key_id')!r}, which is not trusted")
    try:
        signature = base64.urlsafe_b64decode(
            str(line.get("signature")) + "=" * (-len(str(line.get("signature"))) % 4)
        )
        key.verify(signature, rfc8785.dumps(body))
    except (InvalidSignature, ValueError):
        raise Broken(record, "the signature does not verify") from None


def _lines(path: Path):
    with path.open("rb") as lines:
        for number, raw in enumerate(lines, start=1):
            try:
                yield number, json.loads(raw)
            except ValueError:
                raise Broken(f"{path.name} line {number}", "not JSON") from None


def _read_json(path: Path, record: str) -> dict:
    try:
        return json.loads(path.read_bytes())
    except FileNotFoundError:
        raise Broken(record, f"{path} is missing: is this an evidence bundle?") from None
    except ValueError:
        raise Broken(record, "not JSON") from None


def _field(value, name: str, record: str):
    if not isinstance(value, dict) or not isinstance(value.get(name), dict):
        raise Broken(record, f"has no {name!r} object")
    return value[name]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="countersign-verify", description="Check a Countersign evidence bundle offline."
    )
    parser.add_argument("bundle", type=Path, help="the directory export_evidence wrote")
    parser.add_argument(
        "--keys",
        type=Path,
        help="the public keys to trust (/.well-known/countersign-keys.json, saved)",
    )
    options = parser.parse_args(argv)
    try:
        trusted = None
        if options.keys is not None:
            trusted = _read_json(options.keys, str(options.keys)).get("keys", [])
        report = verify_bundle(options.bundle, trusted)
    except Broken as broken:
        print(f"BROKEN: {broken.record}: {broken.problem}", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"BROKEN: cannot read the bundle: {error}", file=sys.stderr)
        return 1
    print(report.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
