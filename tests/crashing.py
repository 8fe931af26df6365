"""`crashy.noop`: the bench's no-op, except that it raises a plain Python exception (not a
ToolError) where its connector file says, as a python tool with a bug would. Loaded by the
worker processes from a python-kind connector file (tests/faults/test_tool_crashes.py)."""

from __future__ import annotations

import builtins

from bench.tools import BenchNoop

# An address and a secret the message carries, as a failed client's would: no stored error
# may show either.
INTERNAL_URL = "http://10.1.2.3:8443/charges"
TOKEN = "sk_test_crashy_0123456789abcdef"


class CrashingNoop(BenchNoop):
    name = "crashy.noop"
    description = "Does nothing, once per key, except raise where it is told to."

    def __init__(self, *, raises: str, during: str, token: str) -> None:
        self.raises = getattr(builtins, raises)
        self.during = set(during.split(","))
        self.token = token

    def _crash(self, point: str) -> None:
        if point in self.during:
            raise self.raises(f"{point}: POST {INTERNAL_URL} with Bearer {self.token} went wrong")

    def execute(self, call, *, timeout):
        self._crash("execute")
        return super().execute(call, timeout=timeout)

    def query(self, idempotency_key, *, timeout, intent_digest=None):
        self._crash("query")
        return super().query(idempotency_key, timeout=timeout, intent_digest=intent_digest)

    def read(self, target, *, timeout):
        self._crash("read")
        return super().read(target, timeout=timeout)
