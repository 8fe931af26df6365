"""Shared fixtures for the whole suite: real worker processes, the sandbox over HTTP, Redis,
and the bench's no-op tool registered for one test."""

from __future__ import annotations

from tests.processes import redis_queue, sandbox, workers
from tests.registry import noop_tool

__all__ = ["noop_tool", "redis_queue", "sandbox", "workers"]
