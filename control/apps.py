from __future__ import annotations

from django.apps import AppConfig


class ControlConfig(AppConfig):
    name = "control"
