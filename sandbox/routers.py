"""Keeps the sandbox's tables in their own database, as an external system's would be."""

from __future__ import annotations

SANDBOX_APP = "sandbox"
SANDBOX_DATABASE = "sandbox"


class SandboxRouter:
    def db_for_read(self, model, **hints):
        return SANDBOX_DATABASE if model._meta.app_label == SANDBOX_APP else None

    def db_for_write(self, model, **hints):
        return SANDBOX_DATABASE if model._meta.app_label == SANDBOX_APP else None

    def allow_relation(self, obj1, obj2, **hints):
        if SANDBOX_APP in (obj1._meta.app_label, obj2._meta.app_label):
            return obj1._meta.app_label == obj2._meta.app_label
        return None

    def allow_migrate(self, db, app_label, model_name=None, **hints):
        if app_label == SANDBOX_APP:
            return db == SANDBOX_DATABASE
        return db != SANDBOX_DATABASE
