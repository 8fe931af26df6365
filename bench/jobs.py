"""The bare RQ job the benchmark compares against: it does nothing at all."""

from __future__ import annotations


def noop() -> None:
    return None
