from __future__ import annotations

from django.apps import AppConfig


class ControlConfig(AppConfig):
    name = "control"

    def ready(self) -> None:
        # Connects the login audit and throttling signal handlers.
        from control.auth import signals  # noqa: F401
