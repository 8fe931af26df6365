"""Ed25519 keys that sign evidence (decision receipts, runs.record.evidence): asymmetric, so
anyone holding the public half can check a statement, and only this server can make one.

Keys come from `settings.COUNTERSIGN_EVIDENCE_KEYS`, an insertion-ordered mapping of key id to
a 32-byte private seed (base64url in the environment, `kid:seed,...`): the first key signs,
every listed key's public half is published (`/.well-known/countersign-keys.json` and each
evidence export) so statements signed before a rotation still verify. The HMAC keys of
control.foundation.signing stay what they are: they protect rows from a database writer; these
prove statements to an outsider.
"""

from __future__ import annotations

import base64
import binascii
from functools import cache

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

# The demo's and the tests' key (control/settings.py, DEBUG only): published in this source,
# so it proves nothing; production settings refuse it.
DEMO_KEY_ID = "demo-ed25519-1"
DEMO_SEED = "ZGVtby1vbmx5LWV2aWRlbmNlLWtleS1wdWJsaXNoZWQ"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def current_key_id() -> str:
    return next(iter(_private_keys()))


def sign(payload: bytes) -> tuple[str, str]:
    """Signs payload with the current key; returns (key id, base64url signature)."""
    kid = current_key_id()
    return kid, b64url(_private_keys()[kid].sign(payload))


def verify(payload: bytes, *, kid: str, signature: str) -> bool:
    key = _private_keys().get(kid)
    if key is None:
        return False
    try:
        key.public_key().verify(b64url_decode(signature), payload)
    except (InvalidSignature, ValueError, binascii.Error):
        return False
    return True


def public_keys() -> list[dict[str, str]]:
    """Every listed key's public half as a JWK (RFC 8037), the signing one first."""
    keys = []
    for index, (kid, key) in enumerate(_private_keys().items()):
        raw = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        keys.append(
            {
                "kid": kid,
                "kty": "OKP",
                "crv": "Ed25519",
                "alg": "EdDSA",
                "use": "sig",
                "x": b64url(raw),
                "status": "signing" if index == 0 else "verifying",
            }
        )
    return keys


def private_key_from_seed(name: str, kid: str, seed: str) -> Ed25519PrivateKey:
    """The key a configured seed denotes; ImproperlyConfigured naming the key otherwise."""
    try:
        raw = b64url_decode(seed)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 32:
        raise ImproperlyConfigured(
            f"{name}: key {kid!r} must be 32 random bytes in base64url (43 characters); make "
            'one with python3 -c "import base64,os; '
            "print(base64.urlsafe_b64encode(os.urandom(32)).rstrip(b'=').decode())\""
        )
    return Ed25519PrivateKey.from_private_bytes(raw)


def _private_keys() -> dict[str, Ed25519PrivateKey]:
    return _parsed(tuple(settings.COUNTERSIGN_EVIDENCE_KEYS.items()))


@cache
def _parsed(items: tuple[tuple[str, bytes], ...]) -> dict[str, Ed25519PrivateKey]:
    if not items:
        raise ImproperlyConfigured("COUNTERSIGN_EVIDENCE_KEYS holds no key")
    return {
        kid: private_key_from_seed("COUNTERSIGN_EVIDENCE_KEYS", kid, seed.decode())
        for kid, seed in items
    }
