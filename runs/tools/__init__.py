"""Tool adapters: the contract every external tool meets, and the sandbox's HTTP adapters.

Pure Python and requests; the only Django it touches is settings.SANDBOX_URL. See README.md.
"""

from __future__ import annotations
