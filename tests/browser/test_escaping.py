"""Arguments, observations, goals and reasons that carry HTML or script render as text on
every page: no dialog ever fires, and the text shows as written."""

from __future__ import annotations

import pytest

from runs.services import approval_decide, run_start
from tests.browser.conftest import log_in, screenshot
from tests.factories import make_action, make_observation, make_tenant, make_user, reject
from tests.reconciliation.test_cases import make_uncertain

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])
SCRIPT = '<script>alert("goal")</script><img src=x onerror="alert(1)">'


def test_hostile_text_renders_escaped_and_no_dialog_fires(page):
    tenant = make_tenant()
    everyone = make_user(tenant, "operator", "reconciler", "auditor", "admin", username="eve")
    waiting_run = run_start(tenant=tenant, goal=f"Notify {SCRIPT}", created_by=SCRIPT)
    make_action(
        waiting_run,
        tool="notify.send",
        target="x@example.com",
        action_id="hostile",
        args={"body": f"Hello {SCRIPT}"},
        observation=make_observation(waiting_run, summary=f"seen {SCRIPT}"),
    )
    rejected = make_action(run_start(tenant=tenant, goal="reject me", created_by="agent"))
    reject(rejected, everyone, reason=f"no: {SCRIPT}")
    uncertain = make_action(
        run_start(tenant=tenant, goal=f"doubt {SCRIPT}", created_by="a"),
        tool="notify.send",
        target="y@example.com",
        action_id="doubt",
        args={"body": SCRIPT},
    )
    approval_decide(
        action=uncertain,
        approver=everyone,
        decision="approve",
        seen_digest=uncertain.intent_digest,
        seen_state_version=uncertain.base_version,
    )
    case = make_uncertain(uncertain)

    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    log_in(page, "eve")
    pages = [
        "/inbox/",
        "/runs/",
        f"/runs/{waiting_run.pk}/",
        f"/runs/{rejected.run_id}/",
        f"/runs/{uncertain.run_id}/",
        "/receipts/",
        "/tools/",
        "/reconciliation/",
        f"/reconciliation/{case.pk}/",
    ]
    for path in pages:
        response = page.goto(path)
        assert response.status == 200, path
        page.wait_for_load_state("networkidle")
        assert page.locator("script:not([src])").count() == 0, f"inline script on {path}"
        assert page.locator("img[src='x']").count() == 0, f"injected element on {path}"
    page.goto(f"/runs/{waiting_run.pk}/")
    assert SCRIPT in page.locator("main").inner_text()
    screenshot(page, "escaping-run-detail")
    assert dialogs == []
