"""The intent digest, computed by the sandbox itself with Countersign's public formula.

"sha256:" + hex sha256 of the RFC 8785 canonical JSON of {"tool", "target", "args"}. The
sandbox plays an outside system, so it uses the rfc8785 package directly, not our code.
"""

from __future__ import annotations

import hashlib
from typing import Any

import rfc8785


def intent_digest(*, tool: str, target: str, args: dict[str, Any]) -> str:
    canonical = rfc8785.dumps({"tool": tool, "target": target, "args": args})
    return "sha256:" + hashlib.sha256(canonical).hexdigest()
