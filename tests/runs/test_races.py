"""Two connections change the same run at once: exactly one wins."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from runs.exceptions import StaleState
from runs.models import Run
from runs.services import observation_record
from tests.factories import make_run, make_tenant


@pytest.mark.django_db(transaction=True)
def test_two_writers_from_the_same_version_one_wins_one_is_refused():
    run = make_run(make_tenant())
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def write(label: str) -> None:
        stale_copy = Run.objects.get(pk=run.pk)
        barrier.wait()
        try:
            observation_record(
                run=stale_copy,
                source=label,
                ref="r",
                summary=label,
                content_hash="sha256:" + "a" * 64,
                actor=label,
            )
            outcomes.append("won")
        except StaleState:
            outcomes.append("refused")
        finally:
            connection.close()

    threads = [threading.Thread(target=write, args=(name,)) for name in ("one", "two")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    run.refresh_from_db()
    assert sorted(outcomes) == ["refused", "won"]
    assert (run.state_version, run.observations.count()) == (2, 1)
