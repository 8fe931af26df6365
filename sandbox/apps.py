from __future__ import annotations

from django.apps import AppConfig


class SandboxConfig(AppConfig):
    name = "sandbox"
