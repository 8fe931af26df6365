"""Tool adapters: the contract every external tool meets, and the sandbox's HTTP adapters.

Pure Python and requests; the only Django it touches is settings: SANDBOX_URL for the adapters,
SANDBOX_ENABLED and COUNTERSIGN_EXTRA_TOOLS for the registry. See README.md.
"""

from __future__ import annotations
