"""Shared fixtures for the whole suite: real worker processes, the sandbox over HTTP, Redis,
and the bench's no-op and read tools registered for one test."""

from __future__ import annotations

from tests.processes import redis_queue, sandbox, workers
from tests.registry import noop_tool, read_tool

__all__ = ["noop_tool", "read_tool", "redis_queue", "sandbox", "workers"]
