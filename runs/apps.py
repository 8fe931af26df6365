from __future__ import annotations

from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"

    def ready(self) -> None:
        from runs import checks  # noqa: F401  (registers the connectors system check)
        from runs.record import signed_rows  # noqa: F401  (its tables, for verify_audit)
