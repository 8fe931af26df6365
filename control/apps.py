from __future__ import annotations

from django.apps import AppConfig


class ControlConfig(AppConfig):
    name = "control"

    def ready(self) -> None:
        # Connects the login audit and throttling signal handlers, and the time zone's.
        from control.auth import signals  # noqa: F401
        from control.web import zones  # noqa: F401
