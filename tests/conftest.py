"""Shared fixtures for the whole suite: real worker processes, the sandbox over HTTP, Redis."""

from __future__ import annotations

from tests.processes import redis_queue, sandbox, workers

__all__ = ["redis_queue", "sandbox", "workers"]
