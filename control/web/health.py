"""Health endpoint: answers 200 only when the database and Redis both answer."""

from __future__ import annotations

import django_rq
from django.db import connection
from django.http import JsonResponse
from django.views.decorators.http import require_GET


@require_GET
def healthz(request):
    checks = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["database"] = "ok"
    except Exception as error:
        checks["database"] = f"error: {error.__class__.__name__}"
    try:
        django_rq.get_connection("countersign").ping()
        checks["redis"] = "ok"
    except Exception as error:
        checks["redis"] = f"error: {error.__class__.__name__}"
    healthy = all(value == "ok" for value in checks.values())
    return JsonResponse(
        {"status": "ok" if healthy else "degraded", **checks}, status=200 if healthy else 503
    )
