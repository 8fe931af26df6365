"""Schemathesis over /api/v1/openapi.json: no 5xx, every answer conforms to the document.

Positive and negative examples for every operation, in-process through WSGI (the test's own
transaction), with a real token; path ids are either generated or a seeded run and action.
"""

from __future__ import annotations

from itertools import count

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.api.conftest import make_token
from tests.factories import make_action, make_run, make_tenant, make_user, reject

EXAMPLES_PER_OPERATION = 40
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
]

schema = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", get_wsgi_application())
# The token is sent by the test itself, so schemathesis does not generate (or drop) it.
schema.config.generation.update(
    max_examples=EXAMPLES_PER_OPERATION, deterministic=True, with_security_parameters=False
)


@pytest.fixture
def keep_the_test_connection():
    """As Django's test client does: a request must not close the test's transaction."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def seeded(db, keep_the_test_connection) -> dict[str, str]:
    """A token and ids that exist: a run and a rejected action (long-polls answer at once)."""
    tenant = make_tenant()
    run = make_run(tenant)
    action = make_action(run)
    reject(action, make_user(tenant, "operator"), reason="seeded")
    return {"token": make_token(tenant), "run_id": str(run.id), "action_id": str(action.id)}


_examples = count()


@schema.parametrize()
@settings(
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_every_operation_answers_within_its_documented_schema(case, seeded):
    if case.path_parameters and next(_examples) % 2:
        for name, seeded_id in (("run_id", seeded["run_id"]), ("id", seeded["action_id"])):
            if name in case.path_parameters:
                case.path_parameters[name] = seeded_id
    case.call_and_validate(headers={"Authorization": f"Bearer {seeded['token']}"}, checks=CHECKS)
