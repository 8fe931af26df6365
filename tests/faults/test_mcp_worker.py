"""An mcp tool through Countersign with real worker processes and mcp-server-git: an approved
commit is made once and its receipt recorded; a server or a worker killed after the commit
leaves a reconciliation case whose findings hold the probe's git log, and nothing is ever
committed twice."""

from __future__ import annotations

import signal

import pytest
from django.core.management import call_command
from django.db import connection

from reconciliation.models import ReconciliationCase
from runs.execution.sweep import sweep_once
from runs.models import Action, Receipt
from tests.factories import approve, make_action, make_run, make_tenant, make_user
from tests.git_upstream import commits, install_hook, make_repository, stage_file

pytestmark = pytest.mark.django_db(transaction=True)


def approved_commit(repository, message: str = "Add the release notes") -> Action:
    tenant = make_tenant()
    action = make_action(
        make_run(tenant),
        tool="git.commit",
        target=str(repository),
        args={"message": message},
        action_id="commit-notes",
    )
    approve(action, make_user(tenant, "operator"))
    return action


def lease_expires(action: Action) -> None:
    """The database clock passes the dead worker's lease."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runs_lease SET expires_at = now() - interval '1 second' WHERE run_id = %s",
            [str(action.run_id)],
        )


def test_a_worker_commits_once_with_a_receipt_and_a_server_dying_mid_call_is_uncertain(
    git_workers, tmp_path
):
    """One burst worker, two approved commits: one is made once and its receipt recorded;
    on the other repository a post-commit hook kills the server after the commit, so that
    write is uncertain (never failed, never resent), and the case's probe, on a new
    connection, shows the commit."""
    plain = make_repository(tmp_path / "plain")
    stage_file(plain, "release-notes.txt")
    dying = make_repository(tmp_path / "dying")
    stage_file(dying, "release-notes.txt")
    install_hook(dying, "post-commit", "kill -9 $PPID")
    made, lost = approved_commit(plain), approved_commit(dying)

    assert git_workers.run_burst() == 0

    made.refresh_from_db()
    assert made.status == "succeeded", [a.error for a in made.attempts.all()]
    assert commits(plain) == ["Add the release notes", "initial"]
    receipt = made.receipt
    assert (receipt.idempotency_key, receipt.intent_digest, receipt.source) == (
        made.idempotency_key,
        made.intent_digest,
        "response",
    )
    assert receipt.receipt_id == "mcp_" + receipt.raw_response_hash[7:39]
    assert made.attempts.get().status == "succeeded"
    lost.refresh_from_db()
    assert (lost.status, lost.error_class) == ("uncertain", "tool_result_uncertain")
    assert "was sent and may have been applied" in lost.attempts.get().error
    case = ReconciliationCase.objects.get(action=lost)
    assert case.reason == "tool_result_uncertain"
    assert "Message: Add the release notes" in case.findings[0]["read"]["text"]
    assert commits(dying) == ["Add the release notes", "initial"]


def test_a_worker_killed_between_the_commit_and_its_receipt_leaves_a_case_never_a_resend(
    git_workers, tmp_path
):
    repository = make_repository(tmp_path / "repository")
    stage_file(repository, "release-notes.txt")
    action = approved_commit(repository)

    killed = git_workers.run_burst(fault_point=f"after_send_before_receipt@{action.pk}")

    assert killed == -signal.SIGKILL
    assert commits(repository) == ["Add the release notes", "initial"]
    # A resend would commit this too: the log shows whether anything went out again.
    stage_file(repository, "unrelated.txt")
    lease_expires(action)
    call_command("sweep", verbosity=0)
    assert git_workers.run_burst() == 0

    action.refresh_from_db()
    assert (action.status, action.error_class) == ("uncertain", "crash_after_send")
    assert action.attempts.get().status == "uncertain"
    assert not Receipt.objects.filter(action=action).exists()
    case = ReconciliationCase.objects.get(action=action)
    assert case.status == "probing"
    first = case.findings[0]
    assert first["query"] == "this tool cannot be queried by key"
    assert first["read"]["probe"] == "git_log"
    assert "Message: Add the release notes" in first["read"]["text"]
    # Nothing is left for a worker to send: the next sweep queues no drain.
    assert sweep_once().drains_enqueued == 0
    assert commits(repository) == ["Add the release notes", "initial"]
