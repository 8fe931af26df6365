"""Countersign's benchmark, volume seeding and chaos soak (see docs/PERFORMANCE.md).

A Django app of its own: the management commands `bench`, `seed_volume` and `soak`
(bench/management/commands/) are thin wrappers over the modules here, and `bench.tools`
holds its no-op tool. Nothing in the product imports this package (tests/test_layers.py).
"""

from __future__ import annotations
