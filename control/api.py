"""The agent API under /api/v1: composed here from each app's router."""

from __future__ import annotations

from ninja import NinjaAPI

api = NinjaAPI(title="Countersign API", version="1", urls_namespace="api")
