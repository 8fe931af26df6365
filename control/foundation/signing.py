"""HMAC-SHA256 with key ids, for checkpoints.

Keys come from `settings.COUNTERSIGN_CHECKPOINT_KEYS`, an insertion-ordered mapping of key id
to secret: the first key signs, every listed key verifies. To rotate, put the new key first
and keep the old one until nothing signed with it remains; removing it then makes anything
still signed with it fail as `unknown_key`.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from typing import Literal

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

Rule = Literal["unknown_key", "bad_mac", "malformed_mac"]

# Exactly what hexdigest() produces: accepting other spellings would make MACs malleable.
_MAC_FORMAT = re.compile(r"[0-9a-f]{64}")


class SignatureError(Exception):
    """A MAC that does not verify; `rule` says why in a stable word."""

    def __init__(self, rule: Rule, detail: str) -> None:
        super().__init__(rule, detail)
        self.rule = rule
        self.detail = detail

    def __str__(self) -> str:
        return self.detail


def current_key_id() -> str:
    """The id of the key that signs now (the first listed); callers that sign their own key
    id into the payload need it before signing."""
    return next(iter(_keys()))


def sign(payload: bytes) -> tuple[str, str]:
    """MAC payload with the current signing key; returns (key id, hex MAC)."""
    kid = current_key_id()
    return kid, _mac(_keys()[kid], payload)


def verify(payload: bytes, *, kid: str, mac: str) -> None:
    """Return if mac is payload's MAC under key kid; otherwise raise SignatureError."""
    keys = _keys()
    # kid and mac may come straight from an imported file: refuse other types, don't crash.
    if not isinstance(kid, str) or kid not in keys:
        raise SignatureError("unknown_key", f"unknown signing key id {kid!r}")
    if not isinstance(mac, str) or not _MAC_FORMAT.fullmatch(mac):
        raise SignatureError("malformed_mac", "MAC must be 64 lowercase hex characters")
    if not hmac.compare_digest(_mac(keys[kid], payload), mac):
        raise SignatureError("bad_mac", f"MAC does not match under key {kid!r}")


def _keys() -> dict[str, bytes]:
    keys = settings.COUNTERSIGN_CHECKPOINT_KEYS
    if not keys:
        raise ImproperlyConfigured("COUNTERSIGN_CHECKPOINT_KEYS holds no key")
    for kid, secret in keys.items():
        if not isinstance(secret, bytes):
            raise ImproperlyConfigured(f"COUNTERSIGN_CHECKPOINT_KEYS[{kid!r}] must be bytes")
    return keys


def _mac(secret: bytes, payload: bytes) -> str:
    return hmac.new(secret, payload, hashlib.sha256).hexdigest()
