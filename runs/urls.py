"""Operator pages of runs: the inbox and the run pages."""

from __future__ import annotations

urlpatterns: list = []
