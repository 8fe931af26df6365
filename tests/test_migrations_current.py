"""The models and the migrations say the same thing: a model change without its migration
fails here, in `make test`, instead of in a deployment's `migrate`."""

from __future__ import annotations

import pytest
from django.core.management import call_command


@pytest.mark.django_db(databases=["default", "sandbox"])
def test_every_model_change_has_its_migration(capsys):
    try:
        call_command("makemigrations", check=True, dry_run=True, verbosity=1)
    except SystemExit as exit:
        pytest.fail(f"models changed without a migration:\n{capsys.readouterr().out}")
        raise AssertionError from exit
    assert "No changes detected" in capsys.readouterr().out
