"""Countersign's benchmark, volume seeding and chaos soak (see docs/PERFORMANCE.md).

The management commands `bench`, `seed_volume` and `soak` (in runs/management/commands/)
are thin wrappers over the modules here. Nothing in the application imports this package.
"""

from __future__ import annotations
